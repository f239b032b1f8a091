"""Where synth-tui keeps its own state: the run history, run folders, the embedded backend's db.

Everything here may hold secrets or a neighbour's view of our work, so it is private: folders
0700 and files 0600, created that way (whatever the umask) and tightened when found wider.
``private_dir`` and ``open_private`` are the only ways state is created.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import IO, Any

from app.core import shell_env

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
# SQLite's side files; it creates them with the database file's mode.
SQLITE_SIDE_FILES = ("-wal", "-shm", "-journal")


def state_dir() -> Path:
    """``$SYNTH_TUI_STATE_DIR``, else ``$XDG_STATE_HOME/synth-tui``, else ``~/.local/state/synth-tui``."""
    explicit = shell_env.variable("SYNTH_TUI_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = shell_env.variable("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "synth-tui"


def run_dir(job_id: str) -> Path:
    """The folder of one job's files: the full event stream and exports."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in job_id) or "job"
    return state_dir() / "runs" / safe


def history_db_path() -> Path:
    return state_dir() / "history.sqlite"


# --------------------------------------------------------------------------- private files


def private_dir(path: Path) -> Path:
    """``path`` as a folder only its owner can enter.

    Missing folders (parents included) are created 0700. Existing ones are tightened to 0700
    only inside the state folder (ours); a folder the user chose elsewhere keeps its mode.
    """
    path = Path(os.path.abspath(Path(path).expanduser()))
    _make_missing_dirs(path)
    for folder in _state_folders_on(path):
        _tighten(folder, PRIVATE_DIR_MODE)
    return path


def open_private(path: Path, mode: str = "a", **kwargs: Any) -> IO[Any]:
    """Open ``path`` for writing ("w", "a", "wb" or "ab") as a file only its owner can read.

    The file is created 0600 (its folder by ``private_dir``), or tightened to 0600 before
    anything is written if it exists with a wider mode. ``kwargs`` go to ``open``.
    """
    if mode not in ("w", "a", "wb", "ab"):
        raise ValueError(f"open_private writes only: mode {mode!r}")
    path = Path(path).expanduser()
    private_dir(path.parent)
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    fd = os.open(path, flags, PRIVATE_FILE_MODE)
    try:
        _tighten_fd(fd)
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def private_file(path: Path) -> Path:
    """Create ``path`` empty and 0600 if missing, or tighten it; its content is untouched."""
    open_private(path, "ab").close()
    return Path(path).expanduser()


def private_sqlite(path: Path) -> Path:
    """Prepare a SQLite database file before ``sqlite3.connect`` opens it.

    The file is created 0600 first because SQLite gives its -wal, -shm and -journal files the
    database file's mode; side files left wider by an earlier version are tightened too.
    """
    path = private_file(path)
    for suffix in SQLITE_SIDE_FILES:
        side = path.with_name(path.name + suffix)
        if side.exists():
            private_file(side)
    return path


def _make_missing_dirs(path: Path) -> None:
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            continue  # another process made it at the same moment; _tighten decides its mode
        os.chmod(folder, PRIVATE_DIR_MODE)  # exact, whatever the umask


def _state_folders_on(path: Path) -> list[Path]:
    """``path`` and its parents up to the state folder, when ``path`` lies inside it."""
    root = Path(os.path.abspath(state_dir()))
    chain = [path, *path.parents]
    if root not in chain:
        return []
    return chain[: chain.index(root) + 1]


def _tighten(path: Path, mode: int) -> None:
    st = os.stat(path)
    if stat.S_IMODE(st.st_mode) != mode and st.st_uid == os.geteuid():
        os.chmod(path, mode)


def _tighten_fd(fd: int) -> None:
    st = os.fstat(fd)
    # Someone else's file (say, root's) cannot be changed by us; leave it to its owner.
    if stat.S_IMODE(st.st_mode) != PRIVATE_FILE_MODE and st.st_uid == os.geteuid():
        os.fchmod(fd, PRIVATE_FILE_MODE)
