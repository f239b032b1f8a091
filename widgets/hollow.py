"""Boxes with nothing of their own inside: a screen's background, a pane's border around its
children. Every row of such a box between its top and bottom edges draws the same, so it draws
one of them and repeats it (docs/performance.md#first-paint): Textual draws each row on its own,
and the picker's first frame drew about 150 identical rows of its screen, its two panes and the
container they sit in, about 3 % of the instructions of the whole start.

The rows are Textual's own (``Widget.render_lines`` on a one-row crop): the same border, title,
background, tint and line filters (NO_COLOR's monochrome, ANSI colours), row for row.
tests/tui/test_hollow.py compares every row with Textual's for each widget that uses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.containers import Horizontal, Vertical
from textual.geometry import Region
from textual.screen import Screen
from textual.widget import Widget

if TYPE_CHECKING:
    from textual.strip import Strip

    _Base = Widget
else:
    _Base = object


class Hollow(_Base):
    """Mix into a widget that draws no content of its own (a container, a screen): its inner
    rows are drawn once. A box whose rows can differ (keylines between its children, a hatch
    pattern, a screen seen through a translucent background) draws every row as Textual does."""

    def render_lines(self, crop: Region) -> list[Strip]:
        height = self.outer_size.height
        if crop.height < 4 or not self.rows_repeat():
            return super().render_lines(crop)
        rows: list[Strip] = []
        inner: Strip | None = None
        for y in crop.line_range:
            if y == 0 or y == height - 1:  # the edges: a border, its title or subtitle
                rows.extend(super().render_lines(Region(crop.x, y, crop.width, 1)))
                continue
            if inner is None:
                inner = super().render_lines(Region(crop.x, y, crop.width, 1))[0]
            rows.append(inner)
        return rows

    def rows_repeat(self) -> bool:
        """Whether every inner row draws the same (else each is drawn as Textual draws it)."""
        styles = self.styles
        if styles.keyline[0] != "none" or styles.has_rule("hatch"):
            return False
        # A screen with a translucent background draws the screen beneath it (a dialog).
        return not isinstance(self, Screen) or styles.background.a >= 1


class HollowVertical(Hollow, Vertical):
    """A Vertical (a pane around its children) whose own rows are drawn once."""


class HollowHorizontal(Hollow, Horizontal):
    """A Horizontal whose own rows are drawn once."""
