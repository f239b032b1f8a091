"""The run history: every job launched from this machine, in a small SQLite file.

``synth-tui history`` lists it; rerun and attach read the payload, the backend and the .env the
job was launched with from it. Secrets are never stored: the payload holds none, the backend is
a URL and the .env is its path, never its contents.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.core.paths import history_db_path, private_sqlite

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    job_id TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    config_path TEXT,
    payload TEXT,
    idempotency_key TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    final_status TEXT,
    last_status TEXT,
    last_metrics TEXT,
    rerun_of TEXT,
    env_path TEXT,
    end_note TEXT
);
"""
# Columns added after the first release, with their types: a file written by an older version
# gets them (ALTER TABLE ... ADD COLUMN) the first time it is opened, and its rows read as NULL.
_ADDED_COLUMNS = (("env_path", "TEXT"), ("end_note", "TEXT"))


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class RunRecord:
    job_id: str
    backend: str
    config_path: str | None
    payload: dict[str, Any] | None
    idempotency_key: str | None
    created_at: str
    updated_at: str
    final_status: str | None
    last_status: str | None
    last_metrics: dict[str, float]
    rerun_of: str | None
    # The .env the job was launched with (its path only), so attach and rerun find its key.
    env_path: str | None = None
    # Why this machine recorded the job's end itself (its embedded backend stopped with the app
    # or the demo), when it did; None when the backend said how the job ended.
    end_note: str | None = None

    @property
    def status(self) -> str:
        return self.final_status or self.last_status or "unknown"


class RunHistory:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or history_db_path()
        self._migrated = False

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        private_sqlite(self.path)  # 0600 before SQLite opens it: its journal inherits the mode
        connection = sqlite3.connect(self.path, timeout=5.0)
        try:
            connection.execute(_SCHEMA)
            if not self._migrated:
                _add_missing_columns(connection)
                self._migrated = True
            yield connection
            connection.commit()
        finally:
            connection.close()

    def record_submission(self, *, job_id: str, backend: str, config_path: str | None,
                          payload: Mapping[str, Any] | None, idempotency_key: str | None,
                          rerun_of: str | None = None, env_path: str | None = None) -> None:
        """A created job (an idempotent replay of the same job keeps its first record).
        ``env_path``: the .env it was launched with, the path only (never a key)."""
        now = utc_now()
        with self._connect() as db:
            db.execute(
                "INSERT OR IGNORE INTO runs (job_id, backend, config_path, payload, idempotency_key, created_at,"
                " updated_at, last_status, rerun_of, env_path) VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?)",
                (job_id, backend, config_path, json.dumps(payload) if payload is not None else None,
                 idempotency_key, now, now, rerun_of, env_path))

    def record_progress(self, job_id: str, *, status: str | None = None,
                        last_metrics: Mapping[str, float] | None = None, final: bool = False,
                        note: str | None = None) -> None:
        """``note``: why the end was recorded here rather than seen on the backend."""
        sets, values = ["updated_at = ?"], [utc_now()]
        if note is not None:
            sets.append("end_note = ?")
            values.append(note)
        if status is not None:
            sets.append("last_status = ?")
            values.append(status)
            if final:
                sets.append("final_status = ?")
                values.append(status)
        if last_metrics:
            sets.append("last_metrics = ?")
            values.append(json.dumps(dict(last_metrics)))
        with self._connect() as db:
            db.execute(f"UPDATE runs SET {', '.join(sets)} WHERE job_id = ?", (*values, job_id))

    def get(self, job_id: str) -> RunRecord | None:
        with self._connect() as db:
            row = db.execute(f"SELECT {_COLUMNS} FROM runs WHERE job_id = ?", (job_id,)).fetchone()
        return _record(row) if row else None

    def list(self, limit: int = 200) -> list[RunRecord]:
        with self._connect() as db:
            rows = db.execute(f"SELECT {_COLUMNS} FROM runs ORDER BY created_at DESC, rowid DESC LIMIT ?",
                              (limit,)).fetchall()
        return [_record(row) for row in rows]


_COLUMNS = ("job_id, backend, config_path, payload, idempotency_key, created_at, updated_at, final_status,"
            " last_status, last_metrics, rerun_of, env_path, end_note")


def _add_missing_columns(db: sqlite3.Connection) -> None:
    """Bring a history written by an older version up to this schema; its rows keep working."""
    present = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    for name, kind in _ADDED_COLUMNS:
        if name in present:
            continue
        try:
            db.execute(f"ALTER TABLE runs ADD COLUMN {name} {kind}")
        except sqlite3.OperationalError as exc:  # another process added it a moment ago
            if "duplicate column" not in str(exc).lower():
                raise


def _record(row: tuple[Any, ...]) -> RunRecord:
    (job_id, backend, config_path, payload, key, created, updated, final, last, metrics, rerun_of, env_path,
     end_note) = row
    return RunRecord(job_id, backend, config_path, json.loads(payload) if payload else None, key, created,
                     updated, final, last, json.loads(metrics) if metrics else {}, rerun_of, env_path, end_note)
