"""SQLite state of the embedded backend: jobs, their events, metrics and kept rollouts, idempotency keys.

One connection guarded by a lock: the backend writes from its event loop and tests or tools
may read from other threads. WAL keeps readers from blocking the writer. Every write is one
short transaction, so a crash never leaves half a job behind, and a restart loses nothing.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from app.core.paths import private_sqlite
from app.core.state_files import StateFileError, damage_reason, is_damage, path_problem, quoted
from app.local.state.rollout_store import RolloutStore

ACTIVE_STATUSES = ("queued", "running")
TERMINAL_STATUSES = ("succeeded", "failed", "cancelled")

RESTART_MESSAGE = (
    "The embedded backend restarted while the job was running and could not resume it: {why}. "
    "Submit it again to retrain."
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    status TEXT NOT NULL,
    payload TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    policy TEXT,
    checkpoint TEXT,
    idempotency_key TEXT,
    body_hash TEXT NOT NULL,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    error TEXT
);
CREATE INDEX IF NOT EXISTS jobs_created ON jobs (created_at);
CREATE TABLE IF NOT EXISTS events (
    job_id TEXT NOT NULL REFERENCES jobs (id),
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    level TEXT NOT NULL,
    message TEXT NOT NULL,
    data TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (job_id, seq)
);
CREATE TABLE IF NOT EXISTS metrics (
    job_id TEXT NOT NULL REFERENCES jobs (id),
    name TEXT NOT NULL,
    step INTEGER NOT NULL CHECK (step >= 0),
    value REAL NOT NULL,
    epoch INTEGER,
    phase TEXT,
    data TEXT NOT NULL,
    created_at TEXT NOT NULL,
    UNIQUE (job_id, name, step)
);
CREATE TABLE IF NOT EXISTS idempotency (
    key TEXT PRIMARY KEY,
    body_hash TEXT NOT NULL,
    job_id TEXT NOT NULL REFERENCES jobs (id)
);
"""


# PRAGMA user_version of the store this code writes; a file with a larger one was written by a
# newer synth-tui and is not opened (its changes could be undone). 0: written before versions.
SCHEMA_VERSION = 1
# The tables and jobs columns every version wrote: a file without them is not a backend's.
_FIRST_TABLES = ("jobs", "events", "metrics", "idempotency")
_FIRST_JOB_COLUMNS = ("id", "status", "payload", "metadata", "idempotency_key", "body_hash", "created_at",
                      "updated_at", "error")


class UnusableStore(StateFileError):
    """The backend's database cannot be opened as it is: damaged, not a backend's, or from a
    newer synth-tui. The file is left exactly as found (docs/product.md#damaged-state)."""


def refusal(path: Path, problem: str, elsewhere: str | None = None) -> UnusableStore:
    """The error the backend stops with: the path, what is wrong, and what to do."""
    side = " and its -wal/-shm files" if any(os.path.lexists(f"{path}{s}") for s in ("-wal", "-shm")) else ""
    other = f", or {elsewhere}" if elsewhere else ""
    return UnusableStore(
        f"The backend's database {path} cannot be used: {problem}. It was left as it is.",
        f"Move it aside to keep it (mv {quoted(path)} {quoted(path.with_name(path.name + '.damaged'))}{side}) "
        f"and start again with a new one{other}.")


def check_store_file(path: Path, *, elsewhere: str | None = None) -> None:
    """Refuse, before a server starts, a database :class:`Store` would refuse (the same checks,
    with nothing created or written); ``elsewhere``: the caller's other way out ("pass --db
    PATH")."""
    path = Path(path)
    problem = path_problem(path)
    if problem is not None:
        raise refusal(path, problem, elsewhere)
    if not path.exists():
        return  # a new database: created by Store
    # Without a -wal file the database file is all there is: read it as immutable, so that not
    # even a -shm file is made beside it. With one, its committed pages count: read-only.
    wal = os.path.lexists(f"{path}-wal")
    try:
        connection = sqlite3.connect(f"{path.absolute().as_uri()}?{'mode=ro' if wal else 'immutable=1'}", uri=True,
                                     timeout=10.0)
    except sqlite3.Error:
        return  # cannot even open it read-only: Store's own open says why
    try:
        _check_contents(connection)
    except sqlite3.Error as exc:
        if is_damage(exc):
            raise refusal(path, f"SQLite says: {damage_reason(exc)}", elsewhere) from None
    except _NotOurs as exc:
        raise refusal(path, str(exc), elsewhere) from None
    finally:
        connection.close()


class _NotOurs(Exception):
    """A database, but not one this backend wrote (or one a newer synth-tui wrote)."""


def _check_contents(db: sqlite3.Connection, *, every_page: bool = True) -> None:
    """Reads only: SQLite's damage shows on the first page read; then the tables and version,
    and (`every_page`) the damage a read of page 1 does not show (_quick_check)."""
    tables = {name: kind for name, kind in db.execute("SELECT name, type FROM sqlite_master")}
    (version,) = db.execute("PRAGMA user_version").fetchone()
    if version > SCHEMA_VERSION:
        raise _NotOurs(f"a newer synth-tui wrote it (schema version {version}; this one reads up to "
                       f"{SCHEMA_VERSION}), and opening it here could undo its changes")
    if not tables:
        return  # empty: a new database
    if tables.get("jobs") != "table":
        shown = ", ".join(sorted(tables)[:5]) + (", …" if len(tables) > 5 else "")
        raise _NotOurs(f"it is a SQLite database but not a synth-tui backend's (no jobs table; it holds {shown})")
    missing = [name for name in _FIRST_TABLES if tables.get(name) != "table"]
    columns = {row[1] for row in db.execute("PRAGMA table_info(jobs)")}
    missing += [f"jobs.{name}" for name in _FIRST_JOB_COLUMNS if name not in columns]
    if missing:
        raise _NotOurs(f"it lacks what every synth-tui backend database has ({', '.join(missing)})")
    if every_page:
        _quick_check(db)


def _quick_check(db: sqlite3.Connection) -> None:
    """SQLite's own check of every page (PRAGMA quick_check: the b-trees, not the indexes'
    contents; linear in the file's size). A file garbled in its middle pages opened fine, was
    written to, and answered 500 on every list (issue 41): only its first page had been read."""
    findings = [row[0] for row in db.execute("PRAGMA quick_check(3)")]
    if findings != ["ok"]:
        shown = " ".join(" ".join(str(finding) for finding in findings).split())
        shown = shown if len(shown) <= 160 else shown[:160].rstrip() + "…"
        raise sqlite3.DatabaseError(f"database disk image is malformed (PRAGMA quick_check: {shown})")


def _allow_step_zero(db: sqlite3.Connection) -> None:
    """A state file from before the step-0 evaluation (docs/embedded-policy.md#evaluation) refuses
    metrics at step 0 (CHECK step >= 1): its metrics table is rebuilt with the new check, every
    row kept. SQLite cannot change a CHECK in place. The file stays readable by older versions."""
    (sql,) = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'metrics'").fetchone()
    if "step >= 1" not in sql:
        return
    with db:
        db.execute("ALTER TABLE metrics RENAME TO metrics_before_step_zero")
        db.executescript(_SCHEMA)  # the new metrics table (the others exist)
        db.execute("INSERT INTO metrics SELECT * FROM metrics_before_step_zero")
        db.execute("DROP TABLE metrics_before_step_zero")


def utc_now() -> str:
    """ISO-8601 UTC with microseconds, so two status changes never share a timestamp."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _later_than(previous: str) -> str:
    # The SDK's streamer prints a status only when updated_at changes: force it to move.
    now = datetime.now(UTC)
    before = datetime.fromisoformat(previous)
    if now <= before:
        now = before + timedelta(microseconds=1)
    return now.isoformat(timespec="microseconds")


class IdempotencyConflict(Exception):
    """The Idempotency-Key was already used with another request body."""

    def __init__(self, key: str, job_id: str) -> None:
        super().__init__(key, job_id)
        self.key = key
        self.job_id = job_id


class UnknownCursor(Exception):
    """A job list's ``after`` names no job of this backend."""

    def __init__(self, after: str) -> None:
        super().__init__(after)
        self.after = after


class Store:
    def __init__(self, path: Path) -> None:
        """Open (or create) the database. One SQLite reports damaged, one that is not a
        backend's or is from a newer synth-tui raises :class:`UnusableStore` before anything
        is written to it: a user's jobs are never deleted or changed (docs/product.md#damaged-state)."""
        path = Path(path)
        check_store_file(path)
        # 0600 before SQLite opens it: the -wal and -shm files it creates inherit that mode.
        path = private_sqlite(path)
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(str(path), check_same_thread=False, timeout=10.0)
        self._conn.row_factory = sqlite3.Row
        try:
            with self._lock:
                # Again on this connection, nothing written before it (its pages: check_store_file, above).
                _check_contents(self._conn, every_page=False)
                self._conn.execute("PRAGMA journal_mode=WAL")
                self._conn.execute("PRAGMA synchronous=NORMAL")
                self._conn.execute("PRAGMA foreign_keys=ON")
                self._conn.executescript(_SCHEMA)
                columns = {r["name"] for r in self._conn.execute("PRAGMA table_info(jobs)")}
                if "checkpoint" not in columns:  # a state file from before checkpoints
                    self._conn.execute("ALTER TABLE jobs ADD COLUMN checkpoint TEXT")
                _allow_step_zero(self._conn)
                self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            self.rollouts = RolloutStore(self._conn, self._lock)  # the inspector's rollouts: rollout_store.py
            # Jobs a previous run of the backend left queued or running: the backend resumes them.
            self.interrupted = self._interrupted_jobs()
        except (sqlite3.Error, _NotOurs) as exc:
            self._conn.close()
            if isinstance(exc, _NotOurs):
                raise refusal(path, str(exc)) from None
            if is_damage(exc):
                raise refusal(path, f"SQLite says: {damage_reason(exc)}") from None
            raise

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    # -- jobs ---------------------------------------------------------------------------

    def create_job(
        self, job_id: str, payload: dict[str, Any], body_hash: str, idempotency_key: str | None
    ) -> tuple[dict[str, Any], bool]:
        """Insert a queued job; with a known key and the same body, return that job instead.

        Returns (job, created). Raises IdempotencyConflict for a known key with another body.
        """
        with self._lock, self._conn:
            if idempotency_key is not None:
                row = self._conn.execute(
                    "SELECT body_hash, job_id FROM idempotency WHERE key = ?", (idempotency_key,)
                ).fetchone()
                if row is not None:
                    if row["body_hash"] != body_hash:
                        raise IdempotencyConflict(idempotency_key, row["job_id"])
                    return self._existing_job(row["job_id"]), False
            now = utc_now()
            self._conn.execute(
                "INSERT INTO jobs (id, status, payload, idempotency_key, body_hash, created_at,"
                " updated_at) VALUES (?, 'queued', ?, ?, ?, ?, ?)",
                (job_id, json.dumps(payload), idempotency_key, body_hash, now, now),
            )
            if idempotency_key is not None:
                self._conn.execute(
                    "INSERT INTO idempotency (key, body_hash, job_id) VALUES (?, ?, ?)",
                    (idempotency_key, body_hash, job_id),
                )
            return self._existing_job(job_id), True

    def get_job(self, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            return self._job(job_id)

    def list_jobs(self, *, limit: int, status: str | None = None, after: str | None = None) -> list[dict[str, Any]]:
        """Newest first; ``after`` (a job id) starts below that job: the next page of a listing
        (docs/wire-contract.md#job-list). An unknown ``after`` raises UnknownCursor."""
        conditions: list[str] = []
        args: list[Any] = []
        with self._lock:
            if after is not None:
                row = self._conn.execute("SELECT created_at, rowid FROM jobs WHERE id = ?", (after,)).fetchone()
                if row is None:
                    raise UnknownCursor(after)
                conditions.append("(created_at < ? OR (created_at = ? AND rowid < ?))")
                args += [row["created_at"], row["created_at"], row["rowid"]]
            if status:
                conditions.append("status = ?")
                args.append(status)
            query = "SELECT * FROM jobs"
            if conditions:
                query += " WHERE " + " AND ".join(conditions)
            query += " ORDER BY created_at DESC, rowid DESC LIMIT ?"
            args.append(limit)
            return [_job_dict(r) for r in self._conn.execute(query, args)]

    def set_running(self, job_id: str) -> bool:
        """queued → running; False if the job already left the queue (e.g. cancelled)."""
        with self._lock, self._conn:
            job = self._job(job_id)
            if job is None or job["status"] != "queued":
                return False
            self._conn.execute(
                "UPDATE jobs SET status = 'running', updated_at = ? WHERE id = ?",
                (_later_than(job["updated_at"]), job_id),
            )
            return True

    def requeue(self, job_id: str) -> bool:
        """running → queued: a job a restarted backend resumes waits for a slot again
        (app/local/training/admission.py); False if it is not running."""
        with self._lock, self._conn:
            job = self._job(job_id)
            if job is None or job["status"] != "running":
                return False
            self._conn.execute(
                "UPDATE jobs SET status = 'queued', updated_at = ? WHERE id = ?",
                (_later_than(job["updated_at"]), job_id),
            )
            return True

    def set_metadata(self, job_id: str, metadata: dict[str, Any]) -> None:
        # Progress is not a status change: updated_at stays, so pollers print no new line.
        with self._lock, self._conn:
            self._conn.execute(
                "UPDATE jobs SET metadata = ? WHERE id = ?", (json.dumps(metadata), job_id)
            )

    def get_policy(self, job_id: str) -> dict[str, Any] | None:
        """The table of a job that finished before checkpoints existed (the chat endpoint's fallback)."""
        with self._lock:
            row = self._conn.execute("SELECT policy FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return json.loads(row["policy"]) if row is not None and row["policy"] else None

    def finish_job(
        self,
        job_id: str,
        status: str,
        *,
        event_type: str,
        message: str,
        level: str = "info",
        data: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> dict[str, Any] | None:
        """Move an active job to a terminal status and store its terminal event, atomically.

        Returns the event, or None if the job had already finished (so there is never a
        second terminal event, whatever races between cancel, failure and completion).
        """
        assert status in TERMINAL_STATUSES
        with self._lock, self._conn:
            job = self._job(job_id)
            if job is None or job["status"] not in ACTIVE_STATUSES:
                return None
            self._conn.execute(
                "UPDATE jobs SET status = ?, updated_at = ?, error = ? WHERE id = ?",
                (status, _later_than(job["updated_at"]), error, job_id),
            )
            return self._insert_event(job_id, event_type, level, message, data or {})

    def _interrupted_jobs(self) -> list[str]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT id FROM jobs WHERE status IN ('queued', 'running') ORDER BY created_at, rowid"
            ).fetchall()
        return [row["id"] for row in rows]

    def fail_interrupted(self, job_id: str, why: str) -> dict[str, Any] | None:
        """A job left running that cannot be resumed: failed, saying why."""
        job = self.get_job(job_id)
        message = RESTART_MESSAGE.format(why=why)
        return self.finish_job(job_id, "failed", event_type="rl.job.failed", level="error", message=message,
                               data={"reason": "backend_restarted",
                                     "previous_status": job["status"] if job else None},
                               error=message)

    # -- checkpoints --------------------------------------------------------------------

    def commit_step(self, job_id: str, events: list[dict[str, Any]], checkpoint: dict[str, Any] | None,
                    metrics: tuple[int, list[dict[str, Any]]] | None = None) -> list[dict[str, Any]]:
        """A step's events (each {type, message, level?, data?}), its metrics (step, points)
        and the checkpoint that resumes after it, in one transaction: a backend killed at
        any moment has recorded all of them or none (docs/embedded-policy.md#checkpoints).
        `checkpoint` None: a step recorded before its checkpoint is written, or without one
        (`[training] save_every`); the job still resumes from the last one."""
        with self._lock, self._conn:
            stored = [self._insert_event(job_id, e["type"], e.get("level", "info"), e["message"],
                                         e.get("data") or {}) for e in events]
            if metrics is not None:
                self._insert_metrics(job_id, *metrics)
            if checkpoint is not None:
                self._conn.execute("UPDATE jobs SET checkpoint = ? WHERE id = ?", (json.dumps(checkpoint), job_id))
        return stored

    def last_recorded_step(self, job_id: str) -> int:
        """The last step whose `rl.train.step` event is stored: a resumed job replays the steps
        after its checkpoint and records none of them twice."""
        with self._lock:
            row = self._conn.execute(
                "SELECT MAX(CAST(json_extract(data, '$.step') AS INTEGER)) FROM events"
                " WHERE job_id = ? AND type = 'rl.train.step'", (job_id,)).fetchone()
        return int(row[0]) if row is not None and row[0] is not None else 0

    def get_checkpoint(self, job_id: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute("SELECT checkpoint FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return json.loads(row["checkpoint"]) if row is not None and row["checkpoint"] else None

    def _job(self, job_id: str) -> dict[str, Any] | None:
        row = self._conn.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return _job_dict(row) if row is not None else None

    def _existing_job(self, job_id: str) -> dict[str, Any]:
        """A job the caller knows is there (just inserted, or referenced by a key's row)."""
        job = self._job(job_id)
        if job is None:  # the schema's REFERENCES and the lock make this unreachable
            raise LookupError(f"job {job_id} vanished from the store")
        return job

    # -- events and metrics -------------------------------------------------------------

    def append_event(
        self,
        job_id: str,
        event_type: str,
        message: str,
        *,
        level: str = "info",
        data: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        with self._lock, self._conn:
            return self._insert_event(job_id, event_type, level, message, data or {})

    def _insert_event(
        self, job_id: str, event_type: str, level: str, message: str, data: dict[str, Any]
    ) -> dict[str, Any]:
        # Caller holds the lock and the transaction, so MAX(seq)+1 cannot race.
        (seq,) = self._conn.execute(
            "SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE job_id = ?", (job_id,)
        ).fetchone()
        event = {
            "job_id": job_id,
            "seq": seq,
            "type": event_type,
            "level": level,
            "message": message,
            "data": data,
            "created_at": utc_now(),
        }
        self._conn.execute(
            "INSERT INTO events (job_id, seq, type, level, message, data, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?)",
            (job_id, seq, event_type, level, message, json.dumps(data), event["created_at"]),
        )
        return event

    def events(self, job_id: str, *, since_seq: int, limit: int) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT * FROM events WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (job_id, since_seq, limit),
            ).fetchall()
        return [{**dict(r), "data": json.loads(r["data"])} for r in rows]

    def add_metrics(self, job_id: str, step: int, points: list[dict[str, Any]]) -> None:
        """Store all of a step's points in one transaction: the 0.2.22 streamer asks for
        steps after the largest step it has seen of ANY metric, so a step published in two
        halves would lose the second half."""
        with self._lock, self._conn:
            self._insert_metrics(job_id, step, points)

    def _insert_metrics(self, job_id: str, step: int, points: list[dict[str, Any]]) -> None:
        now = utc_now()
        rows = [(job_id, p["name"], step, float(p["value"]), p.get("epoch"), p.get("phase"),
                 json.dumps(p.get("data") or {}), now) for p in points]
        self._conn.executemany(
            "INSERT INTO metrics (job_id, name, step, value, epoch, phase, data, created_at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )

    def metrics(self, job_id: str, *, after_step: int, limit: int) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT job_id, name, value, step, epoch, phase, data, created_at FROM metrics"
                " WHERE job_id = ? AND step > ? ORDER BY step, name LIMIT ?",
                (job_id, after_step, limit),
            ).fetchall()
        return [{**dict(r), "data": json.loads(r["data"])} for r in rows]


def _job_dict(row: sqlite3.Row) -> dict[str, Any]:
    job = dict(row)
    job["payload"] = json.loads(job["payload"])
    job["metadata"] = json.loads(job["metadata"])
    job.pop("policy", None)  # a table from before checkpoints (get_policy); can be large
    job.pop("checkpoint", None)  # get_checkpoint
    return job
