"""The rollouts table of the embedded backend's SQLite file (docs/wire-contract.md#rollouts).

Shares the Store's connection and lock (store.py), so a rollout is written in one short
transaction like every other row. A rollout's summary is in columns (listing and sorting never
read a body); its turns are one zlib-compressed JSON body. Per job the stored bytes (body plus
ROW_OVERHEAD) stay within the job's cap: after each insert the oldest rollouts of the job are
deleted until the total fits; a rollout larger than the cap on its own is not stored.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import zlib
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS rollouts (
    job_id TEXT NOT NULL REFERENCES jobs (id),
    rollout_id TEXT NOT NULL,
    phase TEXT NOT NULL,
    phase_rank INTEGER NOT NULL,
    step INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    seed INTEGER,
    reward REAL NOT NULL,
    turns INTEGER NOT NULL,
    created_at TEXT NOT NULL,
    size INTEGER NOT NULL,
    body BLOB NOT NULL,
    UNIQUE (job_id, rollout_id)
);
CREATE INDEX IF NOT EXISTS rollouts_order ON rollouts (job_id, step, phase_rank, idx);
CREATE INDEX IF NOT EXISTS rollouts_job ON rollouts (job_id);
"""

PHASE_RANK = {"train": 0, "eval": 1}  # within a step, the train rollouts come before the eval after it
ROW_OVERHEAD = 96  # the columns and index entries of a row, roughly: counted against the cap
COMPRESS_LEVEL = 6
_CURSOR = re.compile(r"^(\d{1,18})\.(train|eval)\.(\d{1,9})$")
SEED_RANGE = (-(2**63), 2**63 - 1)


class BadCursor(ValueError):
    """An `after` that is not a cursor this backend gave."""


def cursor_of(row: dict[str, Any]) -> str:
    return f"{row['step']}.{row['phase']}.{row['index']}"


def parse_cursor(after: str) -> tuple[int, int, int]:
    match = _CURSOR.fullmatch(after)
    if match is None:
        raise BadCursor(after)
    return int(match.group(1)), PHASE_RANK[match.group(2)], int(match.group(3))


def encode_body(record: dict[str, Any]) -> bytes:
    # allow_nan=False: what is stored is served as JSON, which has no NaN
    # (app/local/training/rollout_record.py keeps it out).
    text = json.dumps(record, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return zlib.compress(text.encode(), COMPRESS_LEVEL)


class RolloutStore:
    def __init__(self, conn: sqlite3.Connection, lock: threading.RLock) -> None:
        self._conn = conn
        self._lock = lock
        self._totals: dict[str, int] = {}  # job -> stored bytes, read from the table once
        with self._lock:
            self._conn.executescript(SCHEMA)

    def total_bytes(self, job_id: str) -> int:
        with self._lock:
            return self._total(job_id)

    def _total(self, job_id: str) -> int:
        if job_id not in self._totals:
            (total,) = self._conn.execute("SELECT COALESCE(SUM(size), 0) FROM rollouts WHERE job_id = ?",
                                          (job_id,)).fetchone()
            self._totals[job_id] = int(total)
        return self._totals[job_id]

    def add(self, job_id: str, summary: dict[str, Any], record: dict[str, Any], *, max_bytes: int,
            created_at: str) -> bool:
        """Store one rollout (its summary columns and its record's body), then drop the job's
        oldest rollouts until it fits in max_bytes. False when it was not stored (larger than
        the cap on its own, or already there)."""
        body = encode_body(record)
        size = len(body) + ROW_OVERHEAD + len(summary["rollout_id"])
        if size > max_bytes:
            return False
        seed = summary.get("seed")
        if not (isinstance(seed, int) and SEED_RANGE[0] <= seed <= SEED_RANGE[1]):
            seed = None
        with self._lock, self._conn:
            total = self._total(job_id)
            try:
                self._conn.execute(
                    "INSERT INTO rollouts (job_id, rollout_id, phase, phase_rank, step, idx, seed, reward, turns,"
                    " created_at, size, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (job_id, summary["rollout_id"], summary["phase"], PHASE_RANK[summary["phase"]], summary["step"],
                     summary["index"], seed, float(summary["reward"]), summary["turns"], created_at, size, body))
            except sqlite3.IntegrityError:
                return False
            total += size
            if total > max_bytes:
                total -= self._drop_oldest(job_id, total - max_bytes)
            self._totals[job_id] = total
        return True

    def forget_replayed(self, job_id: str, step: int, eval_too: bool) -> None:
        """Before a resumed job replays what came after its checkpoint: the rollouts kept for
        the steps after `step` (and, with `eval_too`, the evaluation after `step` itself)."""
        with self._lock, self._conn:
            self._conn.execute("DELETE FROM rollouts WHERE job_id = ? AND (step > ? OR (step = ? AND phase = 'eval'"
                               " AND ?))", (job_id, step, step, int(eval_too)))
            self._totals.pop(job_id, None)

    def _drop_oldest(self, job_id: str, excess: int) -> int:
        """Delete the job's oldest rollouts until at least `excess` bytes are gone; the bytes freed."""
        freed, doomed = 0, []
        for rowid, size in self._conn.execute(
                "SELECT rowid, size FROM rollouts WHERE job_id = ? ORDER BY rowid", (job_id,)):
            if freed >= excess:
                break
            doomed.append((rowid,))
            freed += size
        self._conn.executemany("DELETE FROM rollouts WHERE rowid = ?", doomed)
        return freed

    def list(self, job_id: str, *, step: int | None, phase: str | None, limit: int,
             after: str | None) -> tuple[list[dict[str, Any]], str | None]:
        """Summaries by step, then phase (train first), then index; and the cursor of the next
        page, or None. Raises BadCursor for an `after` that is not one."""
        conditions: list[str] = ["job_id = ?"]
        args: list[Any] = [job_id]
        if after is not None:
            conditions.append("(step, phase_rank, idx) > (?, ?, ?)")
            args += list(parse_cursor(after))
        if step is not None:
            conditions.append("step = ?")
            args.append(step)
        if phase is not None:
            conditions.append("phase = ?")
            args.append(phase)
        query = ("SELECT rollout_id, phase, step, idx, seed, reward, turns, created_at FROM rollouts WHERE "
                 + " AND ".join(conditions) + " ORDER BY step, phase_rank, idx LIMIT ?")
        with self._lock:
            rows = [_summary(r) for r in self._conn.execute(query, [*args, limit + 1])]
        more = len(rows) > limit
        rows = rows[:limit]
        return rows, cursor_of(rows[-1]) if more and rows else None

    def get(self, job_id: str, rollout_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT rollout_id, phase, step, idx, seed, reward, turns, created_at, body FROM rollouts"
                " WHERE job_id = ? AND rollout_id = ?", (job_id, rollout_id)).fetchone()
        if row is None:
            return None
        record = json.loads(zlib.decompress(row["body"]))
        return {**_summary(row), **record}

    def count(self, job_id: str) -> int:
        with self._lock:
            (n,) = self._conn.execute("SELECT COUNT(*) FROM rollouts WHERE job_id = ?", (job_id,)).fetchone()
        return int(n)


def _summary(row: sqlite3.Row) -> dict[str, Any]:
    return {"rollout_id": row["rollout_id"], "phase": row["phase"], "step": row["step"], "index": row["idx"],
            "seed": row["seed"], "reward": row["reward"], "turns": row["turns"], "created_at": row["created_at"]}
