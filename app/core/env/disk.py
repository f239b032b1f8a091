""".env files on disk: read with bounds, decoded, written atomically with their mode kept, and
stamped so a change by another program is noticed (docs/product.md#env-review).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from app.core.atomic import atomic_write_bytes
from app.core.errors import EnvFileError

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
        raise _not_readable(path) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise EnvFileError(
                f"Cannot read {path}: it is a symlink loop (ELOOP): following its links leads back to itself",
                hint="Point the link at the real .env file, or pass that file itself.") from None
        raise EnvFileError(f"Cannot read {path}: {_reason(exc)}", hint="Pass a readable .env file.") from None


def _not_readable(path: Path) -> EnvFileError:
    """Permission denied: chmod is advice only for the user's own file. Another user's (say
    /etc/shadow) is not theirs to change, and not a .env file (docs/hardening.md#8)."""
    try:
        owner: int | None = os.stat(path).st_uid
    except OSError:
        owner = None
    if owner is None or not hasattr(os, "getuid"):
        return EnvFileError(f"Cannot read {path}: permission denied (a folder on its way may not be searched)",
                            hint="Pass a .env file this user can read.")
    if owner != os.getuid():
        return EnvFileError(f"Cannot read {path}: permission denied; it belongs to another user",
                            hint="Pass a .env file of your own (copy the KEY=value lines you need into one).")
    return EnvFileError(f"Cannot read {path}: permission denied",
                        hint=f"It is your file: give yourself read access (for example: chmod 600 {path}).")


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
    """Write ``text`` to ``target`` atomically (``app/core/atomic.py``: a temp file in the same
    directory, fsync, rename, the directory fsynced); return the written file's stamp (taken
    from the temp file: a rename keeps inode and mtime).

    The existing file's mode is kept; a new file gets 0600. On failure the original is untouched
    and the temp file removed. ``exclusive`` refuses to replace an existing file.
    """
    try:
        written = atomic_write_bytes(target, text.encode("utf-8"), keep_existing=True, exclusive=exclusive)
    except OSError as exc:
        if isinstance(exc, FileExistsError) and exclusive:
            raise EnvFileError(
                f"Not writing {display}: the file already exists",
                hint="Choose another path, or edit the existing file instead.",
            ) from None
        raise EnvFileError(
            f"Cannot save {display}: {_reason(exc)}",
            hint=f"Check that {target.parent} exists and is writable and the disk is not full.",
        ) from None
    return _stamp_of(written)
