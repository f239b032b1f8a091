"""widgets/hollow.py: a box that draws its inner rows once draws every row as Textual does,
whole or cropped, with a border, titles, padding, focus and line filters; a box whose rows can
differ (keylines, a translucent screen) is drawn by Textual row by row."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from textual.app import App, ComposeResult
from textual.filter import LineFilter, Monochrome
from textual.geometry import Region
from textual.screen import ModalScreen
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Static

from app.screens.base import FlowScreen
from widgets.config_preview import ConfigPreview
from widgets.hollow import Hollow, HollowHorizontal, HollowVertical

CSS = """
.pane { border: round $primary 50%; padding: 0 1; }
.pane:focus-within { border: round $primary; }
#keylined { layout: grid; grid-size: 2; keyline: thin $accent; }
"""


class Boxes(FlowScreen):
    def compose(self) -> ComposeResult:
        with HollowHorizontal(id="body"):
            with HollowVertical(id="pane", classes="pane"):
                yield Static("a child row", id="child")
            yield ConfigPreview(id="preview", classes="pane")
        with HollowVertical(id="keylined"):
            yield Static("one")
            yield Static("two")


class Translucent(Hollow, ModalScreen[None]):
    DEFAULT_CSS = "Translucent { background: $background 60%; }"


class BoxesApp(App[None]):
    CSS = CSS
    monochrome = False  # NO_COLOR's filter on every row

    def get_line_filters(self) -> Sequence[LineFilter]:
        return [*super().get_line_filters(), *([Monochrome()] if self.monochrome else [])]

    def get_default_screen(self) -> Boxes:
        return Boxes()


def texts(strips: list[Strip]) -> list[tuple[str, list[object]]]:
    """Each row's characters and styles, as a terminal receives them."""
    return [(strip.text, [segment.style for segment in strip]) for strip in strips]


def textuals_rows(widget: Widget, crop: Region) -> list[Strip]:
    return Widget.render_lines(widget, crop)


def hollow_rows(widget: Widget, crop: Region) -> list[Strip]:
    return widget.render_lines(crop)


def crops(widget: Widget) -> Iterator[Region]:
    width, height = widget.outer_size
    yield Region(0, 0, width, height)  # a whole frame
    yield Region(2, 1, width - 3, height - 2)  # an update of part of it, the edges cut
    yield Region(0, height - 5, width, 5)  # the last rows, with the bottom edge


@pytest.mark.parametrize("selector", ["#body", "#pane", "#preview", "Boxes"])
async def test_every_row_is_textuals_own(selector: str) -> None:
    app = BoxesApp()
    async with app.run_test(size=(60, 20)) as pilot:
        await pilot.pause()
        widget = app.screen if selector == "Boxes" else app.query_one(selector)
        widget.border_title, widget.border_subtitle = "Title", "subtitle"
        for focused in (False, True):
            if focused:
                app.query_one("#preview").focus()
                await pilot.pause()
            for crop in crops(widget):
                assert texts(hollow_rows(widget, crop)) == texts(textuals_rows(widget, crop)), (selector, crop)
        app.monochrome = True
        whole = Region(0, 0, *widget.outer_size)
        assert texts(hollow_rows(widget, whole)) == texts(textuals_rows(widget, whole))


async def test_boxes_whose_rows_differ_are_drawn_row_by_row() -> None:
    app = BoxesApp()
    async with app.run_test(size=(60, 20)) as pilot:
        await pilot.pause()
        keylined = app.query_one("#keylined", HollowVertical)
        assert not keylined.rows_repeat()
        whole = Region(0, 0, *keylined.outer_size)
        assert texts(hollow_rows(keylined, whole)) == texts(textuals_rows(keylined, whole))
        assert app.query_one("#pane", HollowVertical).rows_repeat()
        dialog = Translucent()
        await app.push_screen(dialog)
        await pilot.pause()
        assert not dialog.rows_repeat()  # it shows the screen beneath through its background
        assert app.screen_stack[0].rows_repeat()
