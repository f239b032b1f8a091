"""Read, edit and save ``.env`` files; discover them; resolve the keys a train run needs.

docs/wire-contract.md#env-files (discovery, resolution, aliases, masking) and docs/product.md#env-review (masked
review, explicit byte-preserving saves).

How a file is held: the text is cut into ``EnvLine`` pieces along the statements python-dotenv
itself finds (``dotenv.parser.parse_stream``, the parser under ``dotenv_values``), so values,
quoting, escapes, ``export`` and multi-line values mean exactly what python-dotenv says, and the
pieces concatenate back to the original text byte for byte. An edit replaces one piece; every
edit is re-parsed and checked before it is accepted, so a save can never change another key.

Nothing here prints, logs or reprs a full secret value.
"""

from __future__ import annotations

import errno
import io
import os
import re
import stat
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from app.core import shell_env
from app.core.errors import EnvFileError
from app.core.redact import is_secret_name, looks_like_secret, mask_secret, redact_url, url_secrets

# python-dotenv, json and secrets are imported where used: the first screen reads no .env
# (docs/performance.md#first-paint).
if TYPE_CHECKING:
    from dotenv.parser import Binding

REQUIRED_KEYS: tuple[str, ...] = ("SYNTH_API_KEY", "ENVIRONMENT_API_KEY", "TASK_APP_URL")

# Differs from the SDK on purpose: the SDK tries dev_environment_api_key before
# DEV_ENVIRONMENT_API_KEY; we try the conventional upper-case spelling first. This only matters
# when both are set to different values.
KEY_ALIASES: dict[str, tuple[str, ...]] = {
    "ENVIRONMENT_API_KEY": ("DEV_ENVIRONMENT_API_KEY", "dev_environment_api_key"),
    "TASK_APP_URL": ("TASK_APP_BASE_URL",),
}

# The command-line flag that can supply a key; used as ResolvedKey.origin for source "flag".
FLAG_NAMES: dict[str, str] = {"TASK_APP_URL": "--task-url"}

UNSET = "<unset>"
_BOM = "\ufeff"
_SKIP_DIRS = frozenset({".git", ".venv", "node_modules", "__pycache__"})
# A scan from a huge cwd (say, $HOME) must not freeze the TUI; the SDK's glob has no bound.
_MAX_DIRS_SCANNED = 5000
# A .env holds a handful of lines; a bigger file is the wrong file, and parsing it would stall.
MAX_ENV_BYTES = 1024 * 1024
_NEW_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Values we write without quotes: plain enough that shells and other dotenv readers agree too.
_PLAIN_VALUE = re.compile(r"[A-Za-z0-9_\-./:@+,%~^]*\Z")
_PHYSICAL_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
_LEADING_SPACE = re.compile(r"\s*")
_EOL = re.compile(r"(?:\r\n|\r|\n)\Z")
# The head of an assignment, with the same pieces python-dotenv's parser reads in order.
_ASSIGN_HEAD = re.compile(
    r"(?P<lead>[^\S\r\n]*)(?P<export>export[^\S\r\n]+)?(?P<key>'[^']+'|[^=#\s]+)"
    r"(?P<ws>[^\S\r\n]*)(?P<eq>=[^\S\r\n]*)?"
)
_SINGLE_QUOTED = re.compile(r"'((?:\\.|[^'\\])*)'", re.DOTALL)
_DOUBLE_QUOTED = re.compile(r'"((?:\\.|[^"\\])*)"', re.DOTALL)


# --------------------------------------------------------------------------- masking


def is_secret_key(name: str) -> bool:
    """A name that says its value is a secret (KEY, TOKEN, PASSWORD…: redact.SECRET_NAME_WORDS)."""
    # Differs from the SDK on purpose: the SDK masks every value, TASK_APP_URL too. A URL or a
    # project name is not a secret, and seeing it in full is what makes a wrong one obvious.
    return is_secret_name(name)


def hides_value(name: str, value: str | None) -> bool:
    """Whether ``value`` is shown only as its mask: a secret's name, or a value like a key."""
    return bool(value) and (is_secret_key(name) or looks_like_secret(value))


def secret_parts(name: str, value: str | None) -> list[str]:
    """What of ``value`` is secret, for the redaction of messages: all of it, a URL's
    credentials, or nothing."""
    if not value:
        return []
    return [value] if hides_value(name, value) else url_secrets(value)


# The SDK's ``mask_value``; one implementation, shared with the redaction of messages.
mask_value = mask_secret


def display_value(name: str, value: str | None) -> str:
    """The value as shown (docs/product.md#secrets): a secret's mask, else in full with a
    URL's credentials replaced by ``****``."""
    if not value:
        return UNSET
    return mask_value(value) if hides_value(name, value) else redact_url(value)


# --------------------------------------------------------------------------- header keys

# Keys sent as HTTP header values (Authorization: Bearer ..., X-API-Key). A header value must
# be printable ASCII, or the HTTP library fails while encoding the request; a space or a line
# break inside a key is a paste accident that would fail authentication anyway.
HEADER_KEYS: tuple[str, ...] = ("SYNTH_API_KEY", "ENVIRONMENT_API_KEY")


def header_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be sent as an API key in an HTTP header, or None. Names the first
    bad character's position and kind, never the character or the value."""
    for position, char in enumerate(value, start=1):
        kind = _bad_character_kind(char)
        if kind:
            return f"character {position} of {len(value)} is {kind}"
    return None


def _bad_character_kind(char: str) -> str | None:
    code = ord(char)
    if char in "\r\n":
        return "a line break"
    if char == "\t":
        return "a tab"
    if char == " ":
        return "a space"
    if code < 32 or code == 127:
        return "a control character"
    if code > 126:
        return "a non-ASCII space" if char.isspace() else "not ASCII (an accented letter, a curly quote or an emoji?)"
    return None


# --------------------------------------------------------------------------- discovery


def user_path(raw: str | os.PathLike[str]) -> Path:
    """A path as the user typed it, with ``~`` expanded. ``~name`` of an unknown user stays
    literal, as in a shell (a folder so named in the working directory), instead of raising."""
    path = Path(raw)
    try:
        return path.expanduser()
    except RuntimeError:
        return Path.cwd() / path


def resolved_user_path(raw: str | os.PathLike[str]) -> Path:
    """``user_path``, made absolute with symlinks resolved where possible: a symlink loop
    (RuntimeError in Python 3.11) stays unresolved, and reading the file then says why."""
    path = user_path(raw)
    try:
        return path.resolve()
    except (RuntimeError, OSError):
        return Path(os.path.abspath(path))


def demo_state_env_path(state_dir: Path | None = None) -> Path | None:
    """``ENV_FILE_PATH`` from ``<state dir>/demo.json`` if it names an existing file.

    Like the SDK, an unreadable or malformed state file is ignored rather than reported.
    """
    if state_dir is None:
        home = shell_env.variable("SYNTH_AI_HOME")
        state_dir = Path(home).expanduser() if home else Path.home() / ".synth-ai"
    import json

    try:
        data = json.loads((state_dir / "demo.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    raw = data.get("ENV_FILE_PATH") if isinstance(data, dict) else None
    if not isinstance(raw, str) or not raw.strip():
        return None
    path = Path(raw.strip()).expanduser()
    return path if path.is_file() else None


def discover_env_files(
    cwd: Path,
    *,
    config_path: Path | None = None,
    extra_roots: Sequence[Path] = (),
    limit: int = 20,
) -> list[Path]:
    """Candidate .env files in docs/wire-contract.md#env-files order, resolved and de-duplicated.

    ``limit`` bounds the scan under ``cwd`` (as in the SDK); the config dir and extra roots
    are still added after it.
    """
    found: list[Path] = []
    for path in _scan_tree(cwd, limit):
        _add_unique(found, path)
    if config_path is not None:
        _add_unique(found, config_path.parent / ".env")
    for root in extra_roots:
        _add_unique(found, root / ".env")
    return found


def _scan_tree(cwd: Path, limit: int) -> Iterator[Path]:
    """cwd/.env first, then .env files below it, in a stable (sorted) walk order."""
    yield cwd / ".env"
    count = 0
    scanned = 0
    # Differs from the SDK on purpose: we prune .git as well and never descend into the skipped
    # directories at all (the SDK globs through node_modules and filters afterwards).
    for dirpath, dirnames, filenames in os.walk(cwd):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        scanned += 1
        if Path(dirpath) != cwd and ".env" in filenames:
            count += 1
            yield Path(dirpath) / ".env"
        if count >= limit or scanned >= _MAX_DIRS_SCANNED:
            return


def _add_unique(found: list[Path], path: Path) -> None:
    try:
        if not path.is_file():
            return
        resolved = path.resolve()
    except OSError:
        return
    if resolved not in found:
        found.append(resolved)


# --------------------------------------------------------------------------- parsing


@dataclass
class EnvLine:
    """One statement of the file: a blank line, a comment, an assignment or an unparsable line.

    ``raw`` is the exact original text, line ending included; a multi-line quoted value is one
    EnvLine spanning several physical lines.
    """

    raw: str
    key: str | None
    export: bool
    quote: str
    lineno: int
    error: bool = False

    def __repr__(self) -> str:
        # raw holds the value; never show it.
        return (
            f"EnvLine(key={self.key!r}, export={self.export}, quote={self.quote!r}, "
            f"lineno={self.lineno}, error={self.error}, chars={len(self.raw)})"
        )


@dataclass
class _Parsed:
    lines: list[EnvLine]
    values: dict[str, str | None]
    warnings: list[str]


def _parse(body: str) -> _Parsed:
    """Cut ``body`` (text without BOM) into EnvLines along python-dotenv's own statements.

    Values are the same as ``dotenv_values(stream=io.StringIO(body), interpolate=False)``:
    first-seen key order, last value wins. We read the parser directly (not dotenv_values) so
    we also learn where each statement sits, and python-dotenv logs nothing for bad lines.
    """
    spans = _statement_spans(body)
    lines: list[EnvLine] = []
    values: dict[str, str | None] = {}
    warnings: list[str] = []
    span_i = 0
    lineno = 0
    pending: tuple[str, int] | None = None  # text collected for the current statement, its lineno
    for m in _PHYSICAL_LINE.finditer(body):
        lineno += 1
        start, end = m.span()
        while span_i < len(spans) and spans[span_i][1] <= start:
            span_i += 1
        inside = span_i < len(spans) and spans[span_i][0] < end
        if not inside:
            lines.append(EnvLine(m.group(), None, False, "", lineno))
            continue
        text, first = pending if pending else ("", lineno)
        pending = (text + m.group(), first)
        if end >= spans[span_i][1]:
            lines.append(_statement_line(pending[0], pending[1], spans[span_i][2], values, warnings))
            pending = None
    if pending:  # only reachable if the parser ever stopped mid-line; keep the bytes anyway
        lines.append(EnvLine(pending[0], None, False, "", pending[1]))
    return _Parsed(lines, values, warnings)


def _statement_spans(body: str) -> list[tuple[int, int, Binding]]:
    """(start, end, binding) of each non-blank statement, start skipping leading whitespace."""
    from dotenv.parser import parse_stream

    spans: list[tuple[int, int, Binding]] = []
    offset = 0
    for binding in parse_stream(io.StringIO(body)):
        text = binding.original.string
        leading = _LEADING_SPACE.match(text)  # \s* always matches, if only the empty string
        lead = leading.end() if leading else 0
        if lead < len(text):
            spans.append((offset + lead, offset + len(text), binding))
        offset += len(text)
    return spans


def _statement_line(raw: str, lineno: int, binding: Binding, values: dict[str, str | None],
                    warnings: list[str]) -> EnvLine:
    if binding.error:
        # The line's text may hold a secret (a mistyped assignment), so only its number is told.
        warnings.append(f"line {lineno}: could not parse this line; python-dotenv ignores it")
        return EnvLine(raw, None, False, "", lineno, error=True)
    if binding.key is None:
        return EnvLine(raw, None, False, "", lineno)
    values[binding.key] = binding.value
    head = _ASSIGN_HEAD.match(raw)
    export = bool(head and head.group("export"))
    quote = ""
    if head and head.group("eq"):
        nxt = raw[head.end() : head.end() + 1]
        quote = nxt if nxt in ("'", '"') else ""
    return EnvLine(raw, binding.key, export, quote, lineno)


# --------------------------------------------------------------------------- encoding values


def _encode(value: str, quote: str) -> str | None:
    """``value`` written in one quote style, or None if that style cannot hold it."""
    if quote == '"':
        escaped = (
            value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
        )
        return f'"{escaped}"'
    if "\n" in value or "\r" in value:
        return None  # keep every new value on one physical line
    if quote == "'":
        # python-dotenv decodes only \\ and \' inside single quotes.
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return value  # unquoted; whether it reads back is checked by the caller


def _line_variants(line: EnvLine, key: str, value: str) -> Iterator[str]:
    """New texts for ``line`` holding ``value``, best first: same quote style and comment first."""
    head = _ASSIGN_HEAD.match(line.raw)
    eol_m = _EOL.search(line.raw)
    eol = eol_m.group() if eol_m else ""
    if not head:  # not expected for a parsed key line; write a plain assignment
        yield from (f"{key}={enc}{eol}" for enc in _encodings(value, ("", '"', "'")))
        return
    prefix = head.group("lead") + (head.group("export") or "") + head.group("key") + head.group("ws")
    eq = head.group("eq") or "="
    comment = _trailing_comment(line.raw[head.end() :], line.quote) if head.group("eq") else ""
    tails = [comment + eol, eol] if comment else [eol]
    styles = [line.quote] + [q for q in ("", '"', "'") if q != line.quote]
    for enc in _encodings(value, styles):
        for tail in tails:
            yield prefix + eq + enc + tail


def _encodings(value: str, styles: Iterable[str]) -> Iterator[str]:
    for style in styles:
        enc = _encode(value, style)
        if enc is not None:
            yield enc


def _trailing_comment(rest: str, quote: str) -> str:
    """The inline comment after the value (with its leading spaces), so an edit keeps it."""
    rest = _EOL.sub("", rest)
    if quote:
        m = (_DOUBLE_QUOTED if quote == '"' else _SINGLE_QUOTED).match(rest)
        return rest[m.end() :] if m else ""
    m = re.search(r"\s+#.*", rest)
    return m.group() if m else ""


# --------------------------------------------------------------------------- the file


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
        self._bom = _BOM if text.startswith(_BOM) else ""
        self._saved_text = text  # what is on disk (as of load/save); for dirty and clobber checks
        self._apply(_parse(text[len(self._bom) :]))

    # ---- reading

    @classmethod
    def load(cls, path: Path) -> EnvFile:
        path = user_path(path)
        stamp = disk_stamp(path)  # before reading, so a write during the read is noticed later
        raw = _read_bytes(path)
        if raw is None:
            return cls(path, "", exists=False, stamp=stamp)
        return cls(path, _decode(path, raw), exists=True, stamp=stamp)

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
            raw = _read_bytes(self.path)
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
        loaded = _parse(self._saved_text[len(self._bom):]).values if self.exists else {}
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
        self.stamp = _atomic_write(target, text, display=self.path, exclusive=False)
        self._saved_text = text
        self.exists = True

    # ---- internals

    def _apply(self, parsed: _Parsed) -> None:
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
            m = _EOL.search(line.raw)
            if m:
                return m.group()
        return "\n"

    def _candidates(self, key: str, value: str, index: int | None) -> Iterator[list[EnvLine]]:
        if index is not None:
            for text in _line_variants(self._lines[index], key, value):
                yield self._lines[:index] + [_stub(text)] + self._lines[index + 1 :]
            return
        eol = self._newline()
        head = list(self._lines)
        if head and not _EOL.search(head[-1].raw):
            head[-1] = _stub(head[-1].raw + eol)
        plain = _PLAIN_VALUE.match(value) is not None
        styles = ("", '"', "'") if plain else ('"', "'", "")
        for enc in _encodings(value, styles):
            yield head + [_stub(f"{key}={enc}{eol}")]

    def _try_candidates(self, candidates: Iterator[list[EnvLine]], expected: dict[str, str | None]) -> bool:
        """Accept the first candidate that python-dotenv reads back as exactly ``expected``
        (same keys, same order, same values, no new parse errors)."""
        for lines in candidates:
            parsed = _parse("".join(line.raw for line in lines))
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


# --------------------------------------------------------------------------- file I/O


def _read_bytes(path: Path) -> bytes | None:
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


def _decode(path: Path, raw: bytes) -> str:
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


def _atomic_write(target: Path, text: str, *, display: Path, exclusive: bool) -> DiskStamp:
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
    _fsync_dir(directory)
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


def _fsync_dir(directory: Path) -> None:
    # Makes the rename durable. Best effort: the new file is already in place, and some
    # filesystems refuse to fsync a directory.
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
    _atomic_write(Path(os.path.realpath(path)), env.render(), display=path, exclusive=True)


# --------------------------------------------------------------------------- resolution

# "modal": fetched from Modal for this session (app/core/modal.py, docs/modal.md), never
# written to the .env unless the user saves it; ``origin`` says from where, e.g. "Modal secret NAME".
Source = Literal["flag", "shell", "file", "alias", "modal", "missing"]


@dataclass(frozen=True, repr=False)
class ResolvedKey:
    """Where one key's effective value comes from.

    ``origin``: the flag name (source "flag"), the env file path ("file"), the alias key name
    ("alias"), where in Modal it was read ("modal", e.g. "Modal secret NAME"), else None.
    ``shell_overrides_file``: the shell and the file both set the key to different values (so
    the file's value is not the one used).
    """

    name: str
    value: str | None
    source: Source
    origin: str | None
    required: bool
    shell_overrides_file: bool

    @property
    def display(self) -> str:
        return display_value(self.name, self.value)

    @property
    def where(self) -> str:
        """Where the value comes from, in words, for messages."""
        return {
            "flag": f"the {self.origin} flag",
            "shell": "the shell environment",
            "file": str(self.origin),
            "alias": f"its alias {self.origin}",
            "modal": str(self.origin),
        }.get(self.source, "nowhere")

    def __repr__(self) -> str:
        return (
            f"ResolvedKey(name={self.name!r}, value={self.display!r}, source={self.source!r}, "
            f"origin={self.origin!r}, required={self.required}, "
            f"shell_overrides_file={self.shell_overrides_file})"
        )

    __str__ = __repr__


def resolve_keys(
    env_file: EnvFile | None,
    *,
    shell: Mapping[str, str],
    flags: Mapping[str, str] | None = None,
) -> list[ResolvedKey]:
    """One entry per REQUIRED_KEYS key, then every other key of the file in file order.

    Precedence: flag > shell KEY > file KEY > shell alias > file alias. ``flags`` maps key
    names (e.g. "TASK_APP_URL") to the flag's value. Empty values count as missing.
    """
    file_values = env_file.values if env_file is not None else {}
    file_origin = str(env_file.path) if env_file is not None else None
    flags = flags or {}
    names = list(REQUIRED_KEYS) + [k for k in file_values if k not in REQUIRED_KEYS]
    return [
        _resolve_one(name, name in REQUIRED_KEYS, file_values, file_origin, shell, flags)
        for name in names
    ]


def _resolve_one(
    name: str,
    required: bool,
    file_values: Mapping[str, str | None],
    file_origin: str | None,
    shell: Mapping[str, str],
    flags: Mapping[str, str],
) -> ResolvedKey:
    shell_value = shell.get(name) or None
    file_value = file_values.get(name) or None
    overrides = bool(shell_value and file_value and shell_value != file_value)

    def make(value: str | None, source: Source, origin: str | None) -> ResolvedKey:
        return ResolvedKey(name, value, source, origin, required, overrides)

    if flags.get(name):
        return make(flags[name], "flag", FLAG_NAMES.get(name, "--" + name.lower().replace("_", "-")))
    # Shell before file: the SDK preloads file keys into the environment only when unset there.
    if shell_value:
        return make(shell_value, "shell", None)
    if file_value:
        return make(file_value, "file", file_origin)
    aliases = KEY_ALIASES.get(name, ())
    # Differs from the SDK on purpose: the SDK reads aliases from the file only; an alias
    # exported in the shell counts here too (after the file's own KEY, before the file's alias).
    for alias in aliases:
        if shell.get(alias):
            return make(shell[alias], "alias", alias)
    for alias in aliases:
        if file_values.get(alias):
            return make(file_values[alias], "alias", alias)
    return make(None, "missing", None)


def missing_required(resolved: Sequence[ResolvedKey], *, optional: Iterable[str] = ()) -> list[str]:
    """Names of required keys that have no value (``optional`` ones excepted)."""
    skip = set(optional)
    return [r.name for r in resolved if r.required and not r.value and r.name not in skip]


__all__ = [
    "FLAG_NAMES",
    "HEADER_KEYS",
    "KEY_ALIASES",
    "REQUIRED_KEYS",
    "EnvFile",
    "EnvFileChangedOnDisk",
    "EnvLine",
    "ResolvedKey",
    "Source",
    "DiskStamp",
    "demo_state_env_path",
    "discover_env_files",
    "disk_stamp",
    "display_value",
    "header_value_problem",
    "hides_value",
    "is_secret_key",
    "mask_value",
    "missing_required",
    "resolve_keys",
    "secret_parts",
    "user_path",
    "write_demo_env",
]
