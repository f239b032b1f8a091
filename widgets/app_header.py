"""The screens' title line: Textual's Header, safe on a screen that closes as it opens."""

from __future__ import annotations

from textual.css.query import NoMatches
from textual.dom import NoScreen
from textual.events import Mount
from textual.widgets import Header

# The title line is the one child Header has of that type.
from widgets.compat.textual_compat import HeaderTitle


class AppHeader(Header):
    """Textual's Header updates its title widget from a callback queued at mount and on each
    title change. A screen removed as it opens (a key typed ahead, a browser tab closed at once,
    a quit in the first second) removes that widget first, or never builds it, and the queued
    update raised (a traceback on the terminal). Here the update runs at once and skips a title
    widget that is not there: a header being removed has nothing to show."""

    def on_mount(self, event: Mount) -> None:
        event.prevent_default()  # in place of Header's own, which would queue the raising update
        for obj, name in ((self.app, "title"), (self.app, "sub_title"), (self.screen, "title"),
                          (self.screen, "sub_title")):
            self.watch(obj, name, self._show_title)

    def _show_title(self) -> None:
        try:
            self.query_one(HeaderTitle).update(self.format_title())
        except (NoMatches, NoScreen):
            pass
