"""Textual's Footer, recomposed only when the keys it shows change.

Textual's Footer rebuilds every key whenever the screen's bindings are refreshed (a focus
change, a stack change, a ``refresh_bindings`` call), even when the keys it would show are the
same, and each new key of a compact footer restyles itself once mounted. On a screen that moves
focus often that was a tenth of the TUI's CPU for a picture that did not change. This footer
remembers what it composed (each shown key, its description, whether it is enabled, the palette
key) and skips a refresh that would compose the same; a compact footer's keys carry their
``-compact`` class from the start.

Every key must show at 80 columns (docs/product.md#keys): when the keys do not fit in one row,
the footer lays them out in a grid of two rows (three if need be), each column as wide as its
widest key, reading left to right, then the next row (its CSS: ``SteadyFooter.-rows`` in
styles.tcss).

A screen's spare keys (its ``NARROW_FOOTER_LEAVES``: the dashboard's ``n``, ``e``, ``M``, ``end``)
show in the footer from ``WIDE_FOOTER`` columns, as the help lists them; below that they would
cost the footer a row, so they are left to the help, which says so (docs/product.md#keys).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from rich.cells import cell_len
from textual import events, on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer

from widgets.compat.textual_compat import FooterKey, footer_bindings_ready

MAX_ROWS = 3
WIDE_FOOTER = 110  # columns from which a screen's spare keys show in its footer (the dashboard's -wide)
PALETTE_KEY_WIDTH = len("▏^p Commands")  # its border, key and description (and a padding column unless compact)


def key_width(key_display: str, description: str, *, compact: bool) -> int:
    """The columns a FooterKey takes: Textual's padding (or a compact key's margin) included."""
    return cell_len(key_display) + cell_len(description) + (2 if compact else 3)


def spare_actions(screen: Screen) -> frozenset[str]:
    """The actions of `screen`'s spare keys (its NARROW_FOOTER_LEAVES), none unless it names some."""
    spare: frozenset[str] = getattr(screen, "NARROW_FOOTER_LEAVES", frozenset())
    return spare


def left_out(screen: Screen, width: int) -> frozenset[str]:
    """The actions of `screen`'s spare keys its footer leaves out at `width` columns (the help names them)."""
    return frozenset() if width >= WIDE_FOOTER else spare_actions(screen)


def declared_keys(screen: Screen) -> dict[str, Binding]:
    """The keys `screen`'s own BINDINGS declare (each of a binding's comma-separated keys), in
    their order, with their binding: not those of its focused widget."""
    return {key.strip(): binding for binding in type(screen).BINDINGS if isinstance(binding, Binding)
            for key in binding.key.split(",")}


# Textual's own keys the help leaves out: super+c copies as ctrl+c does (its row says so).
HELP_LEFT_OUT = frozenset({"screen.copy_text"})
# The app's quit (ctrl+q, and a screen's ctrl+q standing for it): left out of the help when a key
# of the screen already says the same (the picker's and the dashboard's q Quit), so quit is listed
# once, as on the screens whose q and ctrl+q share one action (history, jobs).
APP_QUIT_ACTIONS = frozenset({"quit", "app.quit"})


# A spare key's row in the help, below WIDE_FOOTER columns, ends with this mark, and the help says
# once, under its rows, what the mark means (SPARE_NOTE): at 80 columns the words on every row
# were cut ("Previous chart (not in the footer below 110…", the walk).
SPARE_MARK = "*"
SPARE_NOTE = f"{SPARE_MARK} not in the footer below {WIDE_FOOTER} columns"


def help_rows(screen: Screen) -> tuple[list[tuple[str, str]], str | None]:
    """The help's rows for `screen` (key, what it does), in help_order: each action once, the
    spare keys its footer leaves out at this width marked with SPARE_MARK; and the note under
    the rows (SPARE_NOTE), when a row is marked (docs/product.md#keys)."""
    app = screen.app
    rows: list[tuple[str, str]] = []
    seen: set[tuple[str, str]] = set()
    labels: set[str] = set()
    any_marked = False
    spare = left_out(screen, app.size.width)
    screen_keys = declared_keys(screen)
    for active in sorted(screen.active_bindings.values(), key=help_order(screen)):
        binding = active.binding
        if binding.action == "select_cursor" and binding.key in screen_keys:
            # A focused table's enter selects the row, which the screen acts on: the help names
            # the screen's key once (the walk: the env review listed ⏎ Select and enter Edit).
            binding = screen_keys[binding.key]
        label = binding.description or binding.action
        if not label or (binding.action, label) in seen or binding.action in HELP_LEFT_OUT:
            continue
        if binding.action in APP_QUIT_ACTIONS and label in labels:
            continue  # q Quit is listed: ^q Quit is the same (the walk: the picker listed both)
        seen.add((binding.action, label))
        labels.add(label)
        marked = binding.action in spare
        any_marked = any_marked or marked
        rows.append((app.get_key_display(binding), f"{label} {SPARE_MARK}" if marked else label))
    return rows, SPARE_NOTE if any_marked else None


def help_order(screen: Screen) -> Callable[[Any], tuple[int, int]]:
    """The help's order: the screen's own keys first, as its BINDINGS declare them (a key a
    focused widget answers instead keeps that place: the log's `end`), then the app's,
    then a focused widget's scroll keys. The screen's keys are what the dialog shows
    without scrolling (issue 37: `z`, `M`, `n` and `end` fell below the fold)."""
    declared = {key: index for index, key in enumerate(declared_keys(screen))}

    def order(active: Any) -> tuple[int, int]:
        key = active.binding.key
        if key in declared:
            return 0, declared[key]
        return (1 if isinstance(active.node, (Screen, App)) else 2), 0

    return order


def footer_rows_class(count: int) -> str:
    """The class of a screen whose footer has `count` rows (2 or more): its toasts stand above them."""
    return f"-footer-rows-{count}"


def footer_rows_classes(screen: Screen) -> list[str]:
    """The footer-rows class `screen` has, if any (a dialog over it takes it: widgets/build_guard.py)."""
    return [name for count in range(2, MAX_ROWS + 1) if screen.has_class(name := footer_rows_class(count))]


def rows_needed(widths: list[int], room: int) -> int:
    """The fewest rows (up to MAX_ROWS) whose grid of auto-sized columns fits in `room` columns."""
    for rows in range(1, MAX_ROWS + 1):
        columns = math.ceil(len(widths) / rows) if widths else 1
        grid = sum(max(widths[column::columns]) for column in range(columns)) if widths else 0
        if grid <= room:
            return rows
    return MAX_ROWS


class SteadyFooter(Footer):
    def __init__(self, *, compact: bool = False) -> None:
        super().__init__(compact=compact)
        self._composed: tuple | None = None

    def shown_keys(self, screen: Screen) -> tuple:
        """What compose would show for `screen` now: each shown binding as drawn, and the palette key."""
        keys = tuple((binding.key, binding.action, binding.description, binding.group, enabled, tooltip)
                     for binding, enabled, tooltip in self._shown(screen))
        return keys, self.show_command_palette, self.app.ENABLE_COMMAND_PALETTE

    def _shown(self, screen: Screen) -> Iterator[tuple[Binding, bool, str]]:
        """`screen`'s active bindings the footer shows at this width: shown ones, spare keys
        left out below WIDE_FOOTER."""
        leave = left_out(screen, self.app.size.width)
        for _, binding, enabled, tooltip in screen.active_bindings.values():
            if binding.show and binding.action not in leave:
                yield binding, enabled, tooltip

    def compose(self) -> ComposeResult:
        if footer_bindings_ready(self) and self.is_attached:
            self._composed = self.shown_keys(self.screen)
        leave = left_out(self.screen, self.app.size.width) if self.is_attached else frozenset()
        widgets = [widget for widget in super().compose()
                   if not (isinstance(widget, FooterKey) and widget.action in leave)]
        yield from self._with_compact_class(self._spare_keys_in_place(widgets) if self.is_attached else widgets)
        if footer_bindings_ready(self) and self.is_attached:
            self._set_rows()  # after Textual's compose, which sets the grid's columns to the keys' count

    def _spare_keys_in_place(self, widgets: list[Widget]) -> list[Widget]:
        """A focused widget's spare key (the log's own `end`, standing for the dashboard's) shows
        where the screen declares that key, not first as the focused widget's keys do."""
        spare = spare_actions(self.screen)
        declared = list(declared_keys(self.screen))
        moved = [widget for widget in widgets if isinstance(widget, FooterKey) and widget.action in spare
                 and widget.key in declared and self.screen.active_bindings[widget.key].node is not self.screen]
        for widget in moved:
            widgets.remove(widget)
            place = declared.index(widget.key)
            after = next((index for index, other in enumerate(widgets) if isinstance(other, FooterKey)
                          and other.key in declared and declared.index(other.key) > place), None)
            if after is None:  # the last of the screen's keys: before the palette's key
                after = next((index for index, other in enumerate(widgets)
                              if isinstance(other, FooterKey) and other.has_class("-command-palette")), len(widgets))
            widgets.insert(after, widget)
        return widgets

    def _set_rows(self) -> None:
        """One row when every key fits in it, else a grid of as few rows as fit (docs/product.md#keys)."""
        keys = [(self.app.get_key_display(binding), binding.description)
                for binding, _enabled, _tooltip in self._shown_bindings()]
        widths = [key_width(shown, description, compact=self.compact) for shown, description in keys]
        room = self.app.size.width - (PALETTE_KEY_WIDTH + (not self.compact) if self.show_command_palette else 0)
        rows = rows_needed(widths, room)
        self.set_class(rows > 1, "-rows")
        self.styles.height = rows
        for count in range(2, MAX_ROWS + 1):  # the toasts sit above every row (styles.tcss: ToastRack)
            self.screen.set_class(rows == count, footer_rows_class(count))
        self.styles.grid_size_columns = math.ceil(len(widths) / rows) if widths else 1

    def _shown_bindings(self) -> list[tuple]:
        seen: dict[str, tuple] = {}  # Textual's Footer shows one key per action
        for binding, enabled, tooltip in self._shown(self.screen):
            seen.setdefault(binding.action, (binding, enabled, tooltip))
        return list(seen.values())

    @on(events.Resize)
    def _rows_for_new_width(self, event: events.Resize) -> None:  # beside FlowFooter's own on_resize
        if self._composed is not None and self.is_attached:
            if self.shown_keys(self.screen) != self._composed:  # spare keys come or go (WIDE_FOOTER)
                self.bindings_changed(self.screen)
            else:
                self._set_rows()

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
