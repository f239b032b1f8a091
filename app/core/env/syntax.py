"""A .env text cut into statements, and values encoded back into it.

The text is cut into ``EnvLine`` pieces along the statements python-dotenv itself finds
(``dotenv.parser.parse_stream``, the parser under ``dotenv_values``), so values, quoting,
escapes, ``export`` and multi-line values mean exactly what python-dotenv says, and the pieces
concatenate back to the original text byte for byte.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

# python-dotenv, json and secrets are imported where used: the first screen reads no .env
# (docs/performance.md#first-paint).
if TYPE_CHECKING:
    from dotenv.parser import Binding


_PHYSICAL_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
_LEADING_SPACE = re.compile(r"\s*")
EOL = re.compile(r"(?:\r\n|\r|\n)\Z")
# The head of an assignment, with the same pieces python-dotenv's parser reads in order.
_ASSIGN_HEAD = re.compile(
    r"(?P<lead>[^\S\r\n]*)(?P<export>export[^\S\r\n]+)?(?P<key>'[^']+'|[^=#\s]+)"
    r"(?P<ws>[^\S\r\n]*)(?P<eq>=[^\S\r\n]*)?"
)
_SINGLE_QUOTED = re.compile(r"'((?:\\.|[^'\\])*)'", re.DOTALL)
_DOUBLE_QUOTED = re.compile(r'"((?:\\.|[^"\\])*)"', re.DOTALL)




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
class Parsed:
    lines: list[EnvLine]
    values: dict[str, str | None]
    warnings: list[str]


def parse_statements(body: str) -> Parsed:
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
    return Parsed(lines, values, warnings)


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


def line_variants(line: EnvLine, key: str, value: str) -> Iterator[str]:
    """New texts for ``line`` holding ``value``, best first: same quote style and comment first."""
    head = _ASSIGN_HEAD.match(line.raw)
    eol_m = EOL.search(line.raw)
    eol = eol_m.group() if eol_m else ""
    if not head:  # not expected for a parsed key line; write a plain assignment
        yield from (f"{key}={enc}{eol}" for enc in encodings(value, ("", '"', "'")))
        return
    prefix = head.group("lead") + (head.group("export") or "") + head.group("key") + head.group("ws")
    eq = head.group("eq") or "="
    comment = _trailing_comment(line.raw[head.end() :], line.quote) if head.group("eq") else ""
    tails = [comment + eol, eol] if comment else [eol]
    styles = [line.quote] + [q for q in ("", '"', "'") if q != line.quote]
    for enc in encodings(value, styles):
        for tail in tails:
            yield prefix + eq + enc + tail


def encodings(value: str, styles: Iterable[str]) -> Iterator[str]:
    for style in styles:
        enc = _encode(value, style)
        if enc is not None:
            yield enc


def _trailing_comment(rest: str, quote: str) -> str:
    """The inline comment after the value (with its leading spaces), so an edit keeps it."""
    rest = EOL.sub("", rest)
    if quote:
        m = (_DOUBLE_QUOTED if quote == '"' else _SINGLE_QUOTED).match(rest)
        return rest[m.end() :] if m else ""
    m = re.search(r"\s+#.*", rest)
    return m.group() if m else ""


