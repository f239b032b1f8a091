"""The run history: every job launched from this machine, in a small SQLite file.

``synth-tui history`` lists it; rerun and attach read the payload, the backend and the .env the
job was launched with from it. Secrets are never stored: the payload holds none, the backend is
a URL and the .env is its path, never its contents.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from app.core.paths import history_db_path, private_sqlite
from app.core.state_files import (
    StateFileError,
    damage_reason,
    identity,
    is_damage,
    move_aside,
    path_problem,
    quoted,
)

T = TypeVar("T")

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
    end_note TEXT,
    model_path TEXT
);
"""
# Columns added after the first release, with their types: a file written by an older version
# gets them (ALTER TABLE ... ADD COLUMN) the first time it is opened, and its rows read as NULL.
_ADDED_COLUMNS = (("env_path", "TEXT"), ("end_note", "TEXT"), ("model_path", "TEXT"))
# The columns every version wrote: a runs table without one of them is not ours.
_FIRST_COLUMNS = ("job_id", "backend", "config_path", "payload", "idempotency_key", "created_at", "updated_at",
                  "final_status", "last_status", "last_metrics", "rerun_of")

# What this process did to damaged histories and has not told yet (take_repair_notes): each
# move is told once, by whichever front end asks first.
_notes: list[str] = []
_notes_lock = threading.Lock()


def take_repair_notes() -> list[str]:
    """The notes of the damaged histories moved aside since the last call (then forgotten)."""
    with _notes_lock:
        notes = list(_notes)
        _notes.clear()
    return notes


class _NotOurs(Exception):
    """The file is a database, but its runs table is not the history's."""


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
    # The trained model's folder its end named (artifacts.model_path), as the backend gave it.
    model_path: str | None = None

    @property
    def status(self) -> str:
        return self.final_status or self.last_status or "unknown"


class RunHistory:
    """The history file. A damaged one (SQLite says it is not a database or is malformed; a
    folder, a looping link or a FIFO in its place; a runs table that is not ours) is moved
    aside on first use, kept as it was, a fresh one is started and a note is queued for the
    user (:func:`take_repair_notes`). One that cannot be moved aside, or cannot be opened for
    another reason (permissions, a lock held too long), raises :class:`StateFileError` naming
    the path and what to do (docs/product.md#damaged-state)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or history_db_path()
        self._migrated = False

    def _use(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work`` on an open history; a damaged file is moved aside once and a fresh one used."""
        moved = False
        while True:
            seen = identity(self.path)
            problem = path_problem(self.path)
            if problem is None:
                try:
                    with self._connect() as db:
                        return work(db)
                except sqlite3.Error as exc:
                    if not is_damage(exc):
                        raise self._unusable(exc) from None
                    problem = f"SQLite says: {damage_reason(exc)}"
                except _NotOurs as exc:
                    problem = str(exc)
                except OSError as exc:
                    raise self._unusable(exc) from None
            if moved:  # the fresh file is damaged too: something keeps breaking it, say so once
                raise StateFileError(f"The run history {self.path} is damaged again right after a fresh one was "
                                     f"started ({problem}).",
                                     f"Check the disk and the folder {self.path.parent}, then run again.")
            self._move_aside(problem, seen)
            moved = True
            self._migrated = False

    def _move_aside(self, problem: str, seen: tuple[int, int] | None) -> None:
        if identity(self.path) != seen:
            return  # another synth-tui moved it meanwhile (and told): use what is there now
        try:
            kept = move_aside(self.path)
        except OSError as exc:
            raise StateFileError(
                f"The run history {self.path} is damaged ({problem}) and could not be moved aside: "
                f"{exc.strerror or exc}.",
                f"Move it away yourself (mv {quoted(self.path)} {quoted(self.path.with_name('history.damaged'))}) "
                f"or make {quoted(self.path.parent)} writable; synth-tui then starts a fresh history.") from None
        note = (f"The run history {self.path} was damaged ({problem}): it is kept as {kept}, unchanged, "
                f"and a fresh history was started.")
        with _notes_lock:
            _notes.append(note)

    def _unusable(self, exc: BaseException) -> StateFileError:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if isinstance(exc, sqlite3.OperationalError) and "locked" in reason.lower():
            hint = "Another synth-tui is writing it; try again in a moment."
        else:
            hint = (f"Check that {quoted(self.path)} and its folder belong to you and are writable "
                    f"(ls -l {quoted(self.path)}); or set SYNTH_TUI_STATE_DIR to another folder.")
        return StateFileError(f"The run history {self.path} cannot be used: {reason.rstrip('.')}.", hint)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        private_sqlite(self.path)  # 0600 before SQLite opens it: its journal inherits the mode
        connection = sqlite3.connect(self.path, timeout=5.0)
        try:
            if not self._migrated:
                _check_shape(connection)
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
        self._use(lambda db: db.execute(
            "INSERT OR IGNORE INTO runs (job_id, backend, config_path, payload, idempotency_key, created_at,"
            " updated_at, last_status, rerun_of, env_path) VALUES (?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?)",
            (job_id, backend, config_path, json.dumps(payload) if payload is not None else None,
             idempotency_key, now, now, rerun_of, env_path)))

    def record_progress(self, job_id: str, *, status: str | None = None,
                        last_metrics: Mapping[str, float] | None = None, final: bool = False,
                        note: str | None = None, model_path: str | None = None) -> None:
        """``note``: why the end was recorded here rather than seen on the backend;
        ``model_path``: the model the job's end named (docs/product.md#where-the-model-is)."""
        sets, values = ["updated_at = ?"], [utc_now()]
        if model_path is not None:
            sets.append("model_path = ?")
            values.append(model_path)
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
        self._use(lambda db: db.execute(f"UPDATE runs SET {', '.join(sets)} WHERE job_id = ?", (*values, job_id)))

    def get(self, job_id: str) -> RunRecord | None:
        row = self._use(lambda db: db.execute(f"SELECT {_COLUMNS} FROM runs WHERE job_id = ?", (job_id,)).fetchone())
        return _record(row) if row else None

    def list(self, limit: int = 200) -> list[RunRecord]:
        rows = self._use(lambda db: db.execute(
            f"SELECT {_COLUMNS} FROM runs ORDER BY created_at DESC, rowid DESC LIMIT ?", (limit,)).fetchall())
        return [record for record in map(_record, rows) if record is not None]


_COLUMNS = ("job_id, backend, config_path, payload, idempotency_key, created_at, updated_at, final_status,"
            " last_status, last_metrics, rerun_of, env_path, end_note, model_path")


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


def _check_shape(db: sqlite3.Connection) -> None:
    """A runs table that is not the history's (another program's file, a hand-made table, a
    view) would fail every write: the file counts as damaged. No runs table: a new or empty
    file, created next."""
    row = db.execute("SELECT type FROM sqlite_master WHERE name = 'runs'").fetchone()
    if row is None:
        return
    if row[0] != "table":
        raise _NotOurs(f"its runs is a {row[0]}, not the history's table")
    present = {column[1] for column in db.execute("PRAGMA table_info(runs)")}
    missing = [name for name in _FIRST_COLUMNS if name not in present]
    if missing:
        raise _NotOurs(f"its runs table lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)}")


def _record(row: tuple[Any, ...]) -> RunRecord | None:
    """A row as a record. A value of the wrong type or shape (a file edited by hand, another
    program's write) reads as missing, so one odd row never hides the others; a row without a
    job id is skipped."""
    (job_id, backend, config_path, payload, key, created, updated, final, last, metrics, rerun_of, env_path,
     end_note, model_path) = row
    job_id = _text(job_id)
    if not job_id:
        return None
    return RunRecord(job_id, _text(backend) or "", _text(config_path), _json_object(payload), _text(key),
                     _text(created) or "", _text(updated) or "", _text(final), _text(last), _metrics(metrics),
                     _text(rerun_of), _text(env_path), _text(end_note), _text(model_path))


def _text(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def _json_object(value: object) -> dict[str, Any] | None:
    text = _text(value)
    if not text:
        return None
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


def _metrics(value: object) -> dict[str, float]:
    parsed = _json_object(value) or {}
    return {str(name): float(number) for name, number in parsed.items()
            if isinstance(number, int | float) and not isinstance(number, bool) and math.isfinite(number)}
