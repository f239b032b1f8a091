"""A .env file held in memory, edited key by key and saved only when asked.

docs/product.md#env-review (masked review, explicit byte-preserving saves). An edit replaces one
statement (app/core/env/syntax.py); every edit is re-parsed and checked before it is accepted, so
a save can never change another key. Nothing here prints, logs or reprs a full secret value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

from app.core.env.discovery import user_path
from app.core.env.disk import BOM, DiskStamp, atomic_write, decode_env_bytes, disk_stamp, read_bytes
from app.core.env.syntax import EOL, EnvLine, Parsed, encodings, line_variants, parse_statements
from app.core.errors import EnvFileError

_NEW_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Values we write without quotes: plain enough that shells and other dotenv readers agree too.
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_\-./:@+,%~^]*\Z")


class EnvFile:
    """A .env file held in memory; changes reach the disk only through ``save()``.

    # Differs from the SDK on purpose: the SDK writes every key it finds back into the selected
    # .env (as a bare KEY=value, dropping `export`, quotes and CRLF). We never write on our own.
    """

    def __init__(self, path: Path, text: str = "", *, exists: bool = False,
                 stamp: DiskStamp | None = None) -> None:
        self.path = Path(path)
        self.exists = exists
        self.stamp = stamp  # the file's stamp as of load/save, for changed_on_disk
        self._bom = BOM if text.startswith(BOM) else ""
        self._saved_text = text  # what is on disk (as of load/save); for dirty and clobber checks
        self._apply(parse_statements(text[len(self._bom) :]))

    # ---- reading

    @classmethod
    def load(cls, path: Path) -> EnvFile:
        path = user_path(path)
        stamp = disk_stamp(path)  # before reading, so a write during the read is noticed later
        raw = read_bytes(path)
        if raw is None:
            return cls(path, "", exists=False, stamp=stamp)
        return cls(path, decode_env_bytes(path, raw), exists=True, stamp=stamp)

    @property
    def values(self) -> dict[str, str | None]:
        return dict(self._values)

    @property
    def lines(self) -> tuple[EnvLine, ...]:
        return tuple(self._lines)

    def keys(self) -> list[str]:
        return list(self._values)

    def get(self, key: str) -> str | None:
        return self._values.get(key)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def __repr__(self) -> str:
        return (
            f"EnvFile(path={str(self.path)!r}, exists={self.exists}, keys={self.keys()!r}, "
            f"dirty={self.dirty})"
        )

    def changed_on_disk(self, *, thorough: bool = False) -> bool:
        """Whether the file on disk now differs from the text read (or last saved): created,
        removed, or another text. A stat first; the file is read only when its stamp changed
        (a rewrite with the same text, a ``touch``, is then no change), or always when
        ``thorough`` (a write within the clock's tick, same size, leaves the stamp alone)."""
        now = disk_stamp(self.path)
        if now == self.stamp and not thorough:
            return False
        try:
            raw = read_bytes(self.path)
        except EnvFileError:
            return True  # unreadable or too big now: not what was read
        current = raw.decode("utf-8", errors="replace") if raw is not None else None
        if current != (self._saved_text if self.exists else None):
            return True
        self.stamp = now
        return False

    def reload(self, edits: Mapping[str, str]) -> tuple[EnvFile, list[str]]:
        """The file as it is on disk now, with the user's ``edits`` (key → value) applied
        again. An edited key that changed on disk too is left as the disk has it and
        returned, for the user to decide: neither side is silently dropped."""
        fresh = EnvFile.load(self.path)
        loaded = parse_statements(self._saved_text[len(self._bom):]).values if self.exists else {}
        conflicts = []
        for key, value in edits.items():
            on_disk = fresh.get(key)
            if on_disk == value:
                continue
            if on_disk != loaded.get(key):
                conflicts.append(key)
            else:
                fresh.set(key, value)
        return fresh, conflicts

    # ---- editing (in memory)

    def set(self, key: str, value: str) -> None:
        """Give ``key`` this value by replacing only its (last) line, or appending a new line."""
        _check_value(value)
        index = self._last_line_of(key)
        if index is not None and self._values.get(key) == value:
            return  # already so; leave its bytes alone
        if index is None:
            _check_new_key(key)
        expected = dict(self._values)
        expected[key] = value
        if not self._try_candidates(self._candidates(key, value, index), expected):
            raise EnvFileError(
                f"Cannot store {key} in {self.path} without changing other lines"
                f"{self._error_lines_note()}",
                hint="An earlier line has an unclosed quote; fix or remove it, then try again.",
            )

    def unset(self, key: str) -> None:
        """Remove every line that assigns ``key``."""
        if key not in self._values:
            return
        kept = [line for line in self._lines if line.key != key]
        expected = {k: v for k, v in self._values.items() if k != key}
        if not self._try_candidates(iter([kept]), expected):
            raise EnvFileError(f"Cannot remove {key} from {self.path} without changing other lines")

    @property
    def dirty(self) -> bool:
        return self.render() != self._saved_text

    def render(self) -> str:
        return self._bom + "".join(line.raw for line in self._lines)

    # ---- saving

    def save(self, *, force: bool = False) -> None:
        """Write the file atomically. Refuses to clobber changes made on disk since the load,
        unless ``force``."""
        target = Path(os.path.realpath(self.path))  # follow a symlink: replace its target
        if not force:
            self._check_unchanged_on_disk(target)
        text = self.render()
        self.stamp = atomic_write(target, text, display=self.path, exclusive=False)
        self._saved_text = text
        self.exists = True

    # ---- internals

    def _apply(self, parsed: Parsed) -> None:
        self._lines = parsed.lines
        self._values = parsed.values
        self.warnings = parsed.warnings

    def _last_line_of(self, key: str) -> int | None:
        # python-dotenv lets the last assignment win, so that is the line to edit.
        for i in range(len(self._lines) - 1, -1, -1):
            if self._lines[i].key == key:
                return i
        return None

    def _newline(self) -> str:
        """The line ending the file already uses (its last one), else '\\n'."""
        for line in reversed(self._lines):
            m = EOL.search(line.raw)
            if m:
                return m.group()
        return "\n"

    def _candidates(self, key: str, value: str, index: int | None) -> Iterator[list[EnvLine]]:
        if index is not None:
            for text in line_variants(self._lines[index], key, value):
                yield self._lines[:index] + [_stub(text)] + self._lines[index + 1 :]
            return
        eol = self._newline()
        head = list(self._lines)
        if head and not EOL.search(head[-1].raw):
            head[-1] = _stub(head[-1].raw + eol)
        plain = _PLAIN_VALUE.match(value) is not None
        styles = ("", '"', "'") if plain else ('"', "'", "")
        for enc in encodings(value, styles):
            yield head + [_stub(f"{key}={enc}{eol}")]

    def _try_candidates(self, candidates: Iterator[list[EnvLine]], expected: dict[str, str | None]) -> bool:
        """Accept the first candidate that python-dotenv reads back as exactly ``expected``
        (same keys, same order, same values, no new parse errors)."""
        for lines in candidates:
            parsed = parse_statements("".join(line.raw for line in lines))
            same = list(parsed.values.items()) == list(expected.items())
            if same and len(parsed.warnings) == len(self.warnings):
                self._apply(parsed)
                return True
        return False

    def _error_lines_note(self) -> str:
        numbers = [str(line.lineno) for line in self._lines if line.error]
        return f" (see line {', '.join(numbers)})" if numbers else ""

    def _check_unchanged_on_disk(self, target: Path) -> None:
        try:
            current = target.read_bytes().decode("utf-8", errors="replace")
        except FileNotFoundError:
            current = None
        except OSError:
            return  # the write below reports the real problem
        before = self._saved_text if self.exists else None
        if current != before:
            raise EnvFileChangedOnDisk(
                f"Not saving {self.path}: it changed on disk since it was loaded",
                hint="Reload it from disk: your edits are applied again on top of what it holds now.",
            )


class EnvFileChangedOnDisk(EnvFileError):
    """A save refused because another program changed the file since it was read."""


def _stub(raw: str) -> EnvLine:
    """A placeholder line for a candidate text; it is re-parsed before it is kept."""
    return EnvLine(raw, None, False, "", 0)


def _check_value(value: str) -> None:
    if not isinstance(value, str):
        raise TypeError("env values must be str")
    if "\x00" in value:
        raise EnvFileError("A .env value cannot contain a NUL character")


def _check_new_key(key: str) -> None:
    if not _NEW_KEY.match(key):
        # The name is not echoed: a pasted secret in the wrong field must not be shown.
        raise EnvFileError(
            "Invalid key name",
            hint="Use letters, digits and underscores, not starting with a digit.",
        )


def write_demo_env(path: Path, values: Mapping[str, str]) -> None:
    """Create a NEW env file (mode 0600, atomically) holding ``values``; never overwrites."""
    path = Path(path).expanduser()
    if os.path.lexists(path):
        raise EnvFileError(
            f"Not writing {path}: the file already exists",
            hint="Choose another path, or edit the existing file instead.",
        )
    env = EnvFile(path)
    for key, value in values.items():
        env.set(key, value)
    atomic_write(Path(os.path.realpath(path)), env.render(), display=path, exclusive=True)


