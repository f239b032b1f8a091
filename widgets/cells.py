"""Table cells that never break a word in two (docs/product.md#tables).

A cell narrower than its text either wraps at spaces, with a word longer than the whole
column cut with "…", or stays on one line cut with "…". Rich's default ("fold") splits a
word at the column's edge, so `/rl/verify_task_app` read as `/rl/verify_task_` + `app`.
The same rule for Textual's own lists (OptionList) is the `text-overflow: ellipsis` in
styles.tcss.
"""

from __future__ import annotations

from rich.console import JustifyMethod
from rich.style import Style
from rich.text import Text

__all__ = ["cell", "wrapped_cell"]


def cell(value: str | Text, style: str | Style = "", *, justify: JustifyMethod | None = None) -> Text:
    """One line, cut with "…" when the column is narrower (DataTable rows are one line high)."""
    text = value.copy() if isinstance(value, Text) else Text(value, style=style)
    text.no_wrap, text.overflow, text.end = True, "ellipsis", ""
    if justify is not None:
        text.justify = justify
    return text


def wrapped_cell(value: str | Text, style: str | Style = "") -> Text:
    """Wrapped at spaces over as many lines as it needs; only a word wider than the column
    is cut, with "…"."""
    text = value.copy() if isinstance(value, Text) else Text(value, style=style)
    text.no_wrap, text.overflow = False, "ellipsis"
    return text
