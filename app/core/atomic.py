"""Atomic file replacement, written once: a reader (or a restart after a crash, of the process
or of the machine) sees the old file or the new one, never half of one.

Every state file, .env, saved policy's JSON and rendezvous file is written through
:func:`atomic_write_bytes` / :func:`atomic_write_text`; a folder put in place whole (a
checkpoint's step) goes through :func:`replace_durably`.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

# A new file holds secrets or a user's model: owner-only, whatever the umask.
NEW_FILE_MODE = 0o600


def atomic_write_bytes(path: Path, data: bytes, *, mode: int = NEW_FILE_MODE, keep_existing: bool = False,
                       exclusive: bool = False) -> os.stat_result:
    """Replace ``path`` with ``data``: a unique temp file in the same folder (``mkstemp``), all
    of ``data`` written, its mode set exactly, fsynced, renamed over ``path``, then the folder
    fsynced so that the rename survives a crash of the machine.

    The file gets ``mode``; with ``keep_existing`` an existing file keeps its mode and (best
    effort, when root writes someone else's file) its owner, and only a new one gets ``mode``.
    ``exclusive`` puts the file in place only if nothing is at ``path`` (FileExistsError then).
    On any failure the temp file is removed, ``path`` is untouched and the error propagates.
    Returns the written file's stat, taken before the rename (which keeps inode and mtime)."""
    target = Path(path)
    directory = target.parent
    owner: tuple[int, int] | None = None
    if keep_existing or exclusive:
        try:
            existing = os.stat(target)
        except FileNotFoundError:
            pass
        else:
            if exclusive:
                raise FileExistsError(errno.EEXIST, "file exists", str(target))
            mode, owner = stat.S_IMODE(existing.st_mode), (existing.st_uid, existing.st_gid)
    fd, name = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        try:
            _write_all(fd, data)
            os.fchmod(fd, mode)  # exact, whatever the umask
            if owner is not None and owner != (os.getuid(), os.getgid()):
                _try_chown(fd, owner)
            os.fsync(fd)
            written = os.fstat(fd)
        finally:
            os.close(fd)
        if exclusive:
            _link_new(tmp, target)
        else:
            os.replace(tmp, target)
    except BaseException:
        _remove_quietly(tmp)
        raise
    fsync_dir(directory)
    return written


def atomic_write_text(path: Path, text: str, *, encoding: str = "utf-8", mode: int = NEW_FILE_MODE,
                      keep_existing: bool = False, exclusive: bool = False) -> os.stat_result:
    """:func:`atomic_write_bytes` of ``text`` encoded."""
    return atomic_write_bytes(path, text.encode(encoding), mode=mode, keep_existing=keep_existing,
                              exclusive=exclusive)


def replace_durably(source: Path, target: Path) -> None:
    """Rename ``source`` (a file or a folder made whole beside it) over ``target``, then fsync
    the target's folder: for what is not one file written at once (a checkpoint's folder)."""
    os.replace(source, target)
    fsync_dir(Path(target).parent)


def fsync_dir(directory: Path) -> None:
    """Make a rename inside `directory` durable (it survives a crash of the machine, not only
    of the process). Best effort: the new file is already in place, and some filesystems
    refuse to fsync a directory."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _try_chown(fd: int, owner: tuple[int, int]) -> None:
    # Keep the owner when root edits someone else's file; harmless if not allowed.
    try:
        os.fchown(fd, *owner)
    except OSError:
        pass


def _link_new(tmp: Path, target: Path) -> None:
    """Put ``tmp`` at ``target`` only if nothing is there (no window for a clobber)."""
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise
    except OSError:
        # Some filesystems have no hard links; fall back to check-then-rename.
        if os.path.lexists(target):
            raise FileExistsError(errno.EEXIST, "file exists", str(target)) from None
        os.replace(tmp, target)
        return
    _remove_quietly(tmp)


def _remove_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


__all__ = ["NEW_FILE_MODE", "atomic_write_bytes", "atomic_write_text", "fsync_dir", "replace_durably"]
