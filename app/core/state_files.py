"""State files found damaged: what is wrong with one, and how one is moved aside.

The run history (app/core/runs/history.py) is ours and a convenience, so a damaged one is moved
aside (kept, renamed with the time) and a fresh one started; the embedded backend's database
(app/local/state/store.py) holds a user's jobs, so a damaged one stops the backend from starting and
is never touched. docs/product.md#damaged-state says what the user sees in each case.

Only what SQLite itself reports as damage counts (SQLITE_CORRUPT, SQLITE_NOTADB), plus a path
that is no file at all (a folder, a symbolic link that loops, a FIFO): a locked or unreadable
database is a different problem and is never moved.
"""

from __future__ import annotations

import errno
import os
import shlex
import sqlite3
import stat
from datetime import UTC, datetime
from pathlib import Path

from app.core.errors import ExitCode, SynthTuiError
from app.core.paths import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE, SQLITE_SIDE_FILES

# SQLite's primary result codes for damage (extended codes carry them in their low byte).
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26


class StateFileError(SynthTuiError):
    """A state file synth-tui needs at start cannot be used: damaged and not movable (the run
    history), or damaged at all (the backend's database, never changed by us). The message
    names the path, the hint what to do. Exit 2, as every file that cannot be read
    (docs/product.md#files-that-cannot-be-read)."""

    exit_code = ExitCode.USAGE


def is_damage(exc: BaseException) -> bool:
    """SQLite said the file is not a database, or a damaged one."""
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return (code & 0xFF) in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    text = str(exc).lower()  # a Python without the error codes
    return "not a database" in text or "malformed" in text


def damage_reason(exc: BaseException) -> str:
    """SQLite's words for the damage, as the note quotes them."""
    return str(exc).strip().rstrip(".") or "SQLite reports it damaged"


def path_problem(path: Path) -> str | None:
    """Why ``path`` cannot be a database file at all, or None (a regular file, missing, or a
    symbolic link to one: SQLite decides about its contents)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None  # missing, or a link to nowhere: created on first use
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "it is a symbolic link that loops"
        return None  # unreadable, not damaged: the caller's open says why
    if stat.S_ISDIR(st.st_mode):
        return "it is a folder, not a file"
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file (a FIFO, socket or device)"
    return None


def identity(path: Path) -> tuple[int, int] | None:
    """What ``path`` is now (device, inode of the entry itself), to tell whether another
    process moved it aside meanwhile."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def aside_name(path: Path, when: datetime | None = None) -> Path:
    """``history.sqlite`` -> ``history.corrupt-20261204T181500Z.sqlite`` (then -2, -3… when
    taken), in the same folder."""
    stamp = (when or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    base = f"{path.stem}.corrupt-{stamp}"
    candidate = path.with_name(base + path.suffix)
    number = 2
    while _taken(candidate):
        candidate = path.with_name(f"{base}-{number}{path.suffix}")
        number += 1
    return candidate


def move_aside(path: Path) -> Path:
    """Rename ``path`` (and SQLite's side files beside it, which belong to it: a journal left
    next to a fresh database would be played into it) to :func:`aside_name`; the content is
    kept byte for byte, the mode made private (0600, a folder 0700). Returns the new path;
    raises OSError when the folder does not allow it."""
    target = aside_name(path)
    os.rename(path, target)
    for suffix in SQLITE_SIDE_FILES:
        side = path.with_name(path.name + suffix)
        if os.path.lexists(side):
            try:
                os.rename(side, target.with_name(target.name + suffix))
            except OSError:
                pass  # the database itself is aside; a side file left is SQLite's to ignore or reuse
    _make_private(target)
    return target


def quoted(path: Path) -> str:
    return shlex.quote(str(path))


def _taken(path: Path) -> bool:
    if os.path.lexists(path):
        return True
    return any(os.path.lexists(path.with_name(path.name + suffix)) for suffix in SQLITE_SIDE_FILES)


def _make_private(path: Path) -> None:
    try:
        st = os.lstat(path)
        if st.st_uid != os.geteuid() or stat.S_ISLNK(st.st_mode):
            return  # a link keeps its own mode; someone else's file is theirs
        os.chmod(path, PRIVATE_DIR_MODE if stat.S_ISDIR(st.st_mode) else PRIVATE_FILE_MODE)
    except OSError:
        pass  # moved and kept; its mode is as it was


__all__ = ["StateFileError", "aside_name", "damage_reason", "identity", "is_damage", "move_aside", "path_problem",
           "quoted"]
