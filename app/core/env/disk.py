""".env files on disk: read with bounds, decoded, written atomically with their mode kept, and
stamped so a change by another program is noticed (docs/product.md#env-review).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from app.core.errors import EnvFileError
from app.core.paths import fsync_dir

BOM = "\ufeff"
# A .env holds a handful of lines; a bigger file is the wrong file, and parsing it would stall.
MAX_ENV_BYTES = 1024 * 1024



# What a stat says about a file: (device, inode, size, mtime in ns). Cheap to take; any write,
# in place or by rename, changes it (docs/product.md#env-review: the env review polls it).
DiskStamp = tuple[int, int, int, int]


def disk_stamp(path: Path) -> DiskStamp | None:
    """The file's stamp (a symlink followed); None when there is no file or no stat."""
    try:
        return _stamp_of(os.stat(path))
    except OSError:
        return None


def _stamp_of(info: os.stat_result) -> DiskStamp:
    return info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns


# --------------------------------------------------------------------------- file I/O


def read_bytes(path: Path) -> bytes | None:
    """The file's bytes; None if it does not exist. Other problems raise EnvFileError."""
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise EnvFileError(
                f"Cannot read {path}: it is a directory",
                hint=f"Pass the path of the file itself, e.g. {path / '.env'}",
            )
        if not stat.S_ISREG(st.st_mode):
            raise EnvFileError(f"Cannot read {path}: not a regular file", hint="Pass a .env text file.")
        if st.st_size > MAX_ENV_BYTES:
            raise EnvFileError(
                f"Cannot read {path}: it is {st.st_size / 1_048_576:.1f} MB, too large for a .env file",
                hint="Is this really a .env file? It holds a few KEY=value lines.",
            )
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except PermissionError:
        raise EnvFileError(
            f"Cannot read {path}: permission denied",
            hint=f"Check the file's permissions (for example: chmod 600 {path}).",
        ) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise EnvFileError(
                f"Cannot read {path}: it is a symlink loop (ELOOP): following its links leads back to itself",
                hint="Point the link at the real .env file, or pass that file itself.") from None
        raise EnvFileError(f"Cannot read {path}: {_reason(exc)}", hint="Pass a readable .env file.") from None


# Byte-order marks of UTF-16 and UTF-32 text: an editor's "Unicode" save, named as such.
_WIDE_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
              (b"\xfe\xff", "UTF-16"))


def wide_text_kind(raw: bytes) -> str | None:
    """"UTF-16" or "UTF-32" when ``raw`` starts with that encoding's byte-order mark, else None."""
    return next((kind for bom, kind in _WIDE_BOMS if raw.startswith(bom)), None)


def decode_env_bytes(path: Path, raw: bytes) -> str:
    # Differs from the SDK on purpose: the SDK decodes with errors="ignore" and would then
    # rewrite the file without the dropped bytes. We refuse to touch what we cannot read.
    # A UTF-8 byte-order mark is accepted (EnvFile keeps it on save); UTF-16 is named.
    wide = wide_text_kind(raw)
    if wide:
        raise EnvFileError(f"Cannot read {path}: it is {wide} text (it starts with a {wide} byte-order mark), "
                           "not UTF-8",
                           hint="Save it again as UTF-8 (in most editors: Save As, encoding UTF-8).")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EnvFileError(
            f"Cannot read {path}: not UTF-8 text (bad byte at offset {exc.start})",
            hint="Is this really a .env file? Save it as UTF-8 text.",
        ) from None
    if "\x00" in text:
        raise EnvFileError(
            f"Cannot read {path}: it holds a NUL byte (on line {text.count(chr(10), 0, text.index(chr(0))) + 1}): "
            "it looks like a binary file",
            hint="Is this really a .env file?",
        )
    return text


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def atomic_write(target: Path, text: str, *, display: Path, exclusive: bool) -> DiskStamp:
    """Write ``text`` to ``target`` via a temp file in the same directory and a rename; return
    the written file's stamp (taken from the temp file: a rename keeps inode and mtime).

    The existing file's mode is kept; a new file gets 0600. On failure the original is untouched
    and the temp file removed. ``exclusive`` refuses to replace an existing file.
    """
    import secrets

    directory = target.parent
    tmp = directory / f".{target.name}.{secrets.token_hex(4)}.tmp"
    fd = -1
    try:
        mode, owner = _existing_mode(target)
        if exclusive and owner is not None:
            raise FileExistsError(17, "file exists")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        _write_all(fd, text.encode("utf-8"))
        os.fchmod(fd, mode)  # exact mode, whatever the umask
        if owner is not None and owner != (os.getuid(), os.getgid()):
            _try_chown(fd, owner)
        os.fsync(fd)
        stamp = _stamp_of(os.fstat(fd))
        os.close(fd)
        fd = -1
        if exclusive:
            _link_new(tmp, target)
        else:
            os.replace(tmp, target)
    except OSError as exc:
        if fd >= 0:
            os.close(fd)
        _remove_quietly(tmp)
        if isinstance(exc, FileExistsError) and exclusive:
            raise EnvFileError(
                f"Not writing {display}: the file already exists",
                hint="Choose another path, or edit the existing file instead.",
            ) from None
        raise EnvFileError(
            f"Cannot save {display}: {_reason(exc)}",
            hint=f"Check that {directory} exists and is writable and the disk is not full.",
        ) from None
    fsync_dir(directory)
    return stamp


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _existing_mode(target: Path) -> tuple[int, tuple[int, int] | None]:
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return 0o600, None  # new files hold secrets: owner-only
    return stat.S_IMODE(st.st_mode), (st.st_uid, st.st_gid)


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
            raise FileExistsError(17, "file exists") from None
        os.replace(tmp, target)
        return
    _remove_quietly(tmp)


def _remove_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
