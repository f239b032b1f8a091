"""TOML config text: parsing with line and column on errors, and line numbers of keys.

Reading a config file never ends in a traceback: a missing, unreadable, oversized or non-UTF-8
file is a ConfigError and a syntax error is a TomlSyntaxError with tomllib's 1-based line and
column. Hostile text is refused before tomllib sees it: deep nesting makes tomllib recurse past
Python's limit, and long dotted keys make it use memory quadratic in their length.
TomlLineIndex finds the line of a dotted key ("training.batch_size"), which tomllib does not
give, so validation problems can say where they are. No Textual import.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Any

from app.core.errors import ConfigError

__all__ = [
    "MAX_CONFIG_BYTES",
    "MAX_TOML_DEPTH",
    "TOML_LOCATION",
    "TomlLineIndex",
    "TomlSyntaxError",
    "load_toml",
    "parse_toml_text",
    "read_config_text",
]

# Where a problem of the TOML itself (not of a field) is reported.
TOML_LOCATION = "<toml>"
# RL configs are a few kilobytes. The bound keeps a wrong file (a log, a data dump) from
# stalling the picker: tomllib needs seconds and hundreds of MB for a few MB of dotted keys.
MAX_CONFIG_BYTES = 256 * 1024
# Real configs nest three or four levels; anything past this is not a config.
MAX_TOML_DEPTH = 32


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------


class TomlSyntaxError(ConfigError):
    """The file is not valid TOML. `.line`/`.column` are 1-based, as tomllib counts them."""

    def __init__(
        self,
        message: str,
        *,
        detail: str,
        line: int | None,
        column: int | None,
        path: Path | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint)
        self.detail = detail
        self.line = line
        self.column = column
        self.path = path


# ---------------------------------------------------------------------------------------
# Loading TOML
# ---------------------------------------------------------------------------------------

_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_TOML_AT_END = re.compile(r"\s*\(at end of document\)\s*$")


def _toml_error_position(exc: tomllib.TOMLDecodeError, text: str) -> tuple[str, int, int]:
    """(message without position, line, column). Python 3.11 only has them in the text."""
    message = str(exc)
    line = getattr(exc, "lineno", None)
    column = getattr(exc, "colno", None)
    found = _TOML_POSITION.search(message)
    if found:
        message = message[: found.start()]
        line = line or int(found.group(1))
        column = column or int(found.group(2))
    elif _TOML_AT_END.search(message):
        message = _TOML_AT_END.sub("", message)
    if line is None or column is None:
        # tomllib reports "end of document" without numbers; compute them its way.
        line = text.count("\n") + 1
        column = len(text) - text.rfind("\n")
    return message, line, column


def _syntax_error(
    detail: str, line: int | None, column: int | None, path: Path | None, hint: str
) -> TomlSyntaxError:
    where = str(path) if path else "<config>"
    at = ""
    if line is not None:
        at = f" at line {line}" + (f", column {column}" if column is not None else "")
    return TomlSyntaxError(
        f"{where}: invalid TOML{at}: {detail}", detail=detail, line=line, column=column, path=path, hint=hint
    )


def _line_and_column(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column of a character offset, counted as tomllib counts them."""
    line_start = text.rfind("\n", 0, offset) + 1
    return text.count("\n", 0, offset) + 1, offset - line_start + 1


def parse_toml_text(text: str, path: Path | None = None) -> dict[str, Any]:
    """Parse TOML text; a syntax error becomes TomlSyntaxError with line and column. A leading
    UTF-8 byte-order mark is dropped, as read_config_text drops it."""
    text = text.removeprefix(_UTF8_BOM)
    _refuse_deep_text(text, path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        detail, line, column = _toml_error_position(exc, text)
        raise _syntax_error(detail, line, column, path, "fix the TOML syntax at that position") from None
    except RecursionError:  # a backstop: _refuse_deep_text should have caught it
        raise _too_deep(None, None, path) from None
    except ValueError as exc:  # tomllib lets Python's int() refuse numbers over 4,300 digits
        raise _number_error(exc, text, path) from None
    _refuse_deep_data(data, text, path)
    return data


def _number_error(exc: ValueError, text: str, path: Path | None) -> TomlSyntaxError:
    long_number = re.search(r"[0-9](?:_?[0-9]){4300}", text)
    line, column = _line_and_column(text, long_number.start()) if long_number else (None, None)
    detail = "a number has more than 4,300 digits" if "digits" in str(exc) else f"a value cannot be read ({exc})"
    return _syntax_error(detail, line, column, path, "write the number with fewer digits (or as a string)")


def _too_deep(line: int | None, column: int | None, path: Path | None) -> TomlSyntaxError:
    return _syntax_error(
        f"nested too deeply (more than {MAX_TOML_DEPTH} levels of arrays, inline tables or dotted keys)",
        line, column, path, "an RL config nests only a few levels; is this the right file?",
    )


# Tokens for the nesting scan: comments and strings are skipped whole (a bracket or a dot in
# them means nothing), brackets and braces nest, and bare or quoted words joined by dots form
# one dotted key. Anything else ends a dotted key.
_SCAN_TOKEN = re.compile(
    r'(?P<skip>#[^\n]*)'
    r'|(?P<word>"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|[A-Za-z0-9_+\-]+)'
    r'|(?P<open>[\[{])|(?P<close>[\]}])|(?P<dot>\.)|(?P<space>[ \t]+)|(?P<other>.)',
    re.DOTALL,
)


def _refuse_deep_text(text: str, path: Path | None) -> None:
    """Raise TomlSyntaxError at the first place nested more than MAX_TOML_DEPTH levels: by
    arrays and inline tables, or by the parts of one dotted key or table header."""
    depth = 0
    parts = 0  # words in the dotted key being read
    after_dot = False
    for token in _SCAN_TOKEN.finditer(text):
        kind = token.lastgroup
        if kind == "space":
            continue
        if kind == "word":
            parts = parts + 1 if after_dot else 1
            after_dot = False
        elif kind == "dot" and parts and not after_dot:
            after_dot = True
            continue
        else:
            parts, after_dot = 0, False
            if kind == "open":
                depth += 1
            elif kind == "close":
                depth = max(0, depth - 1)
        if depth > MAX_TOML_DEPTH or parts > MAX_TOML_DEPTH:
            raise _too_deep(*_line_and_column(text, token.start()), path)


def _refuse_deep_data(data: dict[str, Any], text: str, path: Path | None) -> None:
    """The scan bounds each kind of nesting alone; a table header, a dotted key and arrays
    together can still nest deeper, and the code that walks the data later may recurse."""
    stack: list[tuple[Any, tuple[str | None, ...]]] = [(data, ())]  # None: a step into an array
    while stack:
        value, keys = stack.pop()
        if len(keys) > MAX_TOML_DEPTH:
            table_keys = keys[: keys.index(None)] if None in keys else keys
            line = TomlLineIndex(text).line_for(".".join(table_keys)) if table_keys else None  # type: ignore[arg-type]
            raise _too_deep(line, None, path)
        if isinstance(value, dict):
            stack.extend((child, (*keys, str(key))) for key, child in value.items() if isinstance(child, (dict, list)))
        elif isinstance(value, list):
            stack.extend((child, (*keys, None)) for child in value if isinstance(child, (dict, list)))


# Many editors start a UTF-8 file with a byte-order mark; TOML forbids it (tomllib reports
# "Invalid statement" at 1:1), but the text is the one the user wrote: it is dropped on reading,
# as for the .env (docs/product.md#exit-codes).
_UTF8_BOM = "\ufeff"
_WIDE_BOMS = ((b"\xff\xfe\x00\x00", "UTF-32"), (b"\x00\x00\xfe\xff", "UTF-32"), (b"\xff\xfe", "UTF-16"),
              (b"\xfe\xff", "UTF-16"))


def read_config_text(path: Path) -> str:
    """The file's text, without a leading UTF-8 byte-order mark; a missing, unreadable,
    oversized, non-regular, non-UTF-8 (UTF-16 is named) or NUL-holding file is a ConfigError
    with a hint."""
    raw = _read_config_bytes(path)
    wide = next((kind for bom, kind in _WIDE_BOMS if raw.startswith(bom)), None)
    if wide:
        raise ConfigError(f"{path}: it is {wide} text (it starts with a {wide} byte-order mark), not UTF-8",
                          hint="TOML files must be UTF-8: save it again as UTF-8 (in most editors: Save As).")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{path}: not UTF-8 text (the first bad byte is on line {line})",
            hint="TOML files must be UTF-8 text; is this really a config?",
        ) from None
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise ConfigError(f"{path}: it holds a NUL byte (on line {line}): it looks like a binary file",
                          hint="TOML files are text; is this really a config?")
    return text.removeprefix(_UTF8_BOM)


def config_not_found(path: Path) -> ConfigError:
    """A config path where there is no file: nothing to fix in it (exit 2 in both front ends)."""
    return ConfigError(f"Config not found: {path}",
                       hint="check the path, or run without --config to pick from the discovered configs")


def _read_config_bytes(path: Path) -> bytes:
    try:
        # O_NONBLOCK: opening a named pipe must not wait for a writer; then fstat says what
        # was opened, so nothing can be swapped in between a check and the read.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise config_not_found(path) from None
    except (OSError, ValueError) as exc:  # ValueError: a path the OS cannot take (a NUL byte)
        if isinstance(exc, OSError) and exc.errno == errno.ELOOP:
            raise ConfigError(f"Config {path} is a symlink loop (ELOOP): following its links leads back to itself",
                              hint="point the link at the real .toml file, or pass that file itself") from None
        raise _unreadable(path, exc) from None
    try:
        info = os.fstat(fd)
        _check_config_kind(path, info)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise _unreadable(path, exc) from None
    finally:
        os.close(fd)
    if len(raw) > MAX_CONFIG_BYTES:  # it grew after the fstat
        raise _too_large(path, len(raw))
    return raw


def _check_config_kind(path: Path, info: os.stat_result) -> None:
    if stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"Config {path} is a directory, not a TOML file", hint="pass the path of a .toml file")
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(
            f"Config {path} is not a regular file (a pipe, socket or device)", hint="pass the path of a .toml file"
        )
    if info.st_size > MAX_CONFIG_BYTES:
        raise _too_large(path, info.st_size)


def _too_large(path: Path, size: int) -> ConfigError:
    return ConfigError(
        f"Config {path} is too large for a config ({size / 1_048_576:.1f} MB; at most "
        f"{MAX_CONFIG_BYTES // 1024} KB)",
        hint="RL configs are a few kilobytes; is this the right file?",
    )


def _unreadable(path: Path, exc: OSError | ValueError) -> ConfigError:
    reason = getattr(exc, "strerror", None) or exc
    return ConfigError(f"Cannot read config {path}: {reason}", hint="check the path and the file's permissions")


def load_toml(path: Path) -> dict[str, Any]:
    """Read and parse a TOML file; every failure is a ConfigError, never a traceback."""
    path = Path(path)
    return parse_toml_text(read_config_text(path), path)


# ---------------------------------------------------------------------------------------
# Line numbers: tomllib gives none, so we scan the text for headers and `key =` lines.
# ---------------------------------------------------------------------------------------

_HEADER_LINE = re.compile(r"^\s*\[\[?(?P<name>[^\[\]]*)\]\]?\s*(?:#.*)?$")
_HEADER_NAME = re.compile(r"""^[\sA-Za-z0-9_\-."']+$""")
_KEY_LINE = re.compile(
    r"""^\s*(?P<key>(?:[A-Za-z0-9_\-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_\-]+|"[^"]*"|'[^']*'))*)\s*="""
)
_KEY_PART = re.compile(r""""([^"]*)"|'([^']*)'|([A-Za-z0-9_\-]+)""")
_STRING_LITERAL = re.compile(r""""(?:[^"\\]|\\.)*"|'[^']*'""")


def _split_dotted(name: str) -> list[str]:
    return [next(group for group in match.groups() if group is not None) for match in _KEY_PART.finditer(name)]


def _bracket_balance(value: str) -> int:
    """Open minus closed brackets/braces in a value, ignoring strings and comments."""
    code = _STRING_LITERAL.sub("", value).split("#", 1)[0]
    return code.count("[") + code.count("{") - code.count("]") - code.count("}")


def _opens_multiline_string(line: str) -> str | None:
    for delimiter in ('"""', "'''"):
        if line.count(delimiter) % 2 == 1:
            return delimiter
    return None


class TomlLineIndex:
    """Maps dotted locations ("training.batch_size", "compute.topology") to 1-based lines."""

    def __init__(self, text: str) -> None:
        # Explicit: a header or a key is written there. Implied: a parent of one, e.g.
        # "compute" from [compute.topology]; used only when nothing explicit exists.
        self._explicit: dict[str, int] = {}
        self._implied: dict[str, int] = {}
        self._scan(text)

    def _remember(self, parts: list[str], line: int) -> None:
        for depth in range(1, len(parts)):
            self._implied.setdefault(".".join(parts[:depth]), line)
        self._explicit.setdefault(".".join(parts), line)

    def _scan(self, text: str) -> None:
        table: list[str] = []
        open_brackets = 0
        in_string: str | None = None
        for number, line in enumerate(text.splitlines(), start=1):
            if in_string:
                if in_string in line:
                    in_string = None
                continue
            if open_brackets > 0:  # inside a multi-line array: no headers or keys here
                open_brackets += _bracket_balance(line)
                continue
            header = _HEADER_LINE.match(line)
            if header and _HEADER_NAME.match(header.group("name")):
                table = _split_dotted(header.group("name"))
                self._remember(table, number)
                continue
            key = _KEY_LINE.match(line)
            if key:
                value = line[key.end() :]
                self._remember([*table, *_split_dotted(key.group("key"))], number)
                open_brackets = max(0, _bracket_balance(value))
                in_string = _opens_multiline_string(value)

    def line_for(self, location: str) -> int | None:
        """The line of the location, else of its nearest parent (a missing key -> its section)."""
        parts = location.split(".")
        while parts:
            location_key = ".".join(parts)
            found = self._explicit.get(location_key, self._implied.get(location_key))
            if found is not None:
                return found
            parts.pop()
        return None
