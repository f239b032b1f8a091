"""The screens' title line: Textual's Header, safe on a screen that closes as it opens."""

from __future__ import annotations

from textual.events import Mount
from textual.widgets import Header


class AppHeader(Header):
    """A screen removed right after it was shown (a key typed ahead, a browser tab closed at once,
    a quit in the first second) prunes its header before the header composes, so the header has
    no title widget; Textual's Header would still look for it on mount and raise (a traceback on
    the terminal). Such a header has nothing to show: its mount is skipped."""

    def _on_mount(self, event: Mount) -> None:
        if not self.children:
            event.prevent_default()
