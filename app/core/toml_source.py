"""TOML config text: parsing with line and column on errors, and line numbers of keys.

Reading a config file never ends in a traceback: a missing, unreadable or non-UTF-8 file is a
ConfigError and a syntax error is a TomlSyntaxError with tomllib's 1-based line and column.
TomlLineIndex finds the line of a dotted key ("training.batch_size"), which tomllib does not
give, so validation problems can say where they are. No Textual import.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from app.core.errors import ConfigError

__all__ = ["TomlLineIndex", "TomlSyntaxError", "load_toml", "parse_toml_text", "read_config_text"]


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


def parse_toml_text(text: str, path: Path | None = None) -> dict[str, Any]:
    """Parse TOML text; a syntax error becomes TomlSyntaxError with line and column."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        detail, line, column = _toml_error_position(exc, text)
        where = str(path) if path else "<config>"
        raise TomlSyntaxError(
            f"{where}: invalid TOML at line {line}, column {column}: {detail}",
            detail=detail,
            line=line,
            column=column,
            path=path,
            hint="fix the TOML syntax at that position",
        ) from None


def read_config_text(path: Path) -> str:
    """The file's text; a missing, unreadable or non-UTF-8 file is a ConfigError with a hint."""
    if not path.exists():
        raise ConfigError(
            f"Config not found: {path}",
            hint="check the path, or run without --config to pick from the discovered configs",
        )
    if path.is_dir():
        raise ConfigError(
            f"Config {path} is a directory, not a TOML file", hint="pass the path of a .toml file"
        )
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text", hint="TOML files must be UTF-8 encoded") from None
    except OSError as exc:
        raise ConfigError(
            f"Cannot read config {path}: {exc.strerror or exc}", hint="check the file's permissions"
        ) from None


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
