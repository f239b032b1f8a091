"""Textual's Footer, recomposed only when the keys it shows change.

Textual's Footer rebuilds every key whenever the screen's bindings are refreshed (a focus
change, a stack change, a ``refresh_bindings`` call), even when the keys it would show are the
same, and each new key of a compact footer restyles itself once mounted. On a screen that moves
focus often that was a tenth of the TUI's CPU for a picture that did not change. This footer
remembers what it composed (each shown key, its description, whether it is enabled, the palette
key) and skips a refresh that would compose the same; a compact footer's keys carry their
``-compact`` class from the start.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer

from widgets.compat.textual_compat import FooterKey, footer_bindings_ready


class SteadyFooter(Footer):
    def __init__(self, *, compact: bool = False) -> None:
        super().__init__(compact=compact)
        self._composed: tuple | None = None

    def shown_keys(self, screen: Screen) -> tuple:
        """What compose would show for `screen` now: each shown binding as drawn, and the palette key."""
        keys = tuple((binding.key, binding.action, binding.description, binding.group, enabled, tooltip)
                     for _, binding, enabled, tooltip in screen.active_bindings.values() if binding.show)
        return keys, self.show_command_palette, self.app.ENABLE_COMMAND_PALETTE

    def compose(self) -> ComposeResult:
        if footer_bindings_ready(self) and self.is_attached:
            self._composed = self.shown_keys(self.screen)
        yield from self._with_compact_class(super().compose())

    def _with_compact_class(self, widgets: Iterable[Widget]) -> Iterator[Widget]:
        for widget in widgets:
            if self.compact and isinstance(widget, FooterKey) and not widget.has_class("-command-palette"):
                widget.add_class("-compact", update=False)  # as its data binding would, before its first styling
            yield widget

    def bindings_changed(self, screen: Screen) -> None:
        if (self._composed is not None and screen.app.app_focus and self.is_attached and screen is self.screen
                and self.shown_keys(screen) == self._composed):
            return
        super().bindings_changed(screen)
