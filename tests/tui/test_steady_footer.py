"""widgets/steady_footer.py: the footer composes again only when the keys it shows change, and a
compact footer's keys are compact from their first frame."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Input

from app.screens.config_picker import ConfigPickerScreen
from app.screens.dialogs.common import HelpDialog
from support.pilot_waits import wait_for, wait_for_screen
from support.screen_text import footer_text
from widgets.compat.textual_compat import FooterKey
from widgets.steady_footer import SteadyFooter


class CountingFooter(SteadyFooter):
    def __init__(self, *, compact: bool = False) -> None:
        super().__init__(compact=compact)
        self.composes = 0

    def compose(self) -> ComposeResult:
        self.composes += 1
        yield from super().compose()


class FooterApp(App[None]):
    BINDINGS = [Binding("f2", "flip", "Flip", id="flip"), Binding("f3", "noop", "Stay", id="stay")]

    def __init__(self, *, compact: bool = False) -> None:
        super().__init__()
        self.compact = compact
        self.flipped = False

    def compose(self) -> ComposeResult:
        yield Input(id="one")
        yield Input(id="two")
        yield CountingFooter(compact=self.compact)

    def action_flip(self) -> None:
        self.flipped = not self.flipped
        self.refresh_bindings()

    def action_noop(self) -> None:
        pass

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return None if action == "noop" and self.flipped else True  # None: shown, disabled


def keys_shown(app: FooterApp) -> list[tuple[str, bool]]:
    return [(key.key, key.has_class("-disabled")) for key in app.query(FooterKey)]


async def test_a_focus_change_that_shows_the_same_keys_does_not_compose_the_footer_again():
    app = FooterApp()
    async with app.run_test(size=(80, 10)) as pilot:
        footer = app.query_one(CountingFooter)
        await wait_for(pilot, lambda: ("f2", False) in keys_shown(app), what="the footer's keys")
        composed = footer.composes
        for _ in range(3):
            app.query_one("#two", Input).focus()
            app.query_one("#one", Input).focus()
            app.refresh_bindings()
        await pilot.pause()
        await pilot.pause()
        assert footer.composes == composed


async def test_a_key_that_changes_composes_the_footer_again_and_shows_it():
    app = FooterApp()
    async with app.run_test(size=(80, 10)) as pilot:
        await wait_for(pilot, lambda: ("f3", False) in keys_shown(app), what="the footer's keys")
        app.set_focus(None)
        await pilot.press("f2")
        await wait_for(pilot, lambda: ("f3", True) in keys_shown(app), what="f3 shown disabled")
        await pilot.press("f2")
        await wait_for(pilot, lambda: ("f3", False) in keys_shown(app), what="f3 enabled again")


async def test_a_compact_footers_keys_are_compact_when_first_styled():
    app = FooterApp(compact=True)
    async with app.run_test(size=(80, 10)) as pilot:
        await wait_for(pilot, lambda: bool(keys_shown(app)), what="the footer's keys")
        assert all(key.has_class("-compact") for key in app.query(FooterKey))


class ManyKeysApp(App[None]):
    """Twelve keys: one row at 200 columns, not at 80 (docs/product.md#keys)."""

    CSS_PATH = str(Path(__file__).resolve().parents[2] / "styles.tcss")  # the footer's rows are styled there

    BINDINGS = [Binding(f"f{n}", f"noop({n})", f"Key {n}", id=f"key{n}") for n in range(1, 13)]

    def compose(self) -> ComposeResult:
        yield SteadyFooter(compact=True)

    def action_noop(self, number: int) -> None:
        pass


def footer_rows(app: App) -> int:
    return app.query_one(SteadyFooter).region.height


def every_key_whole(app: App) -> bool:
    width = app.size.width
    keys = [key for key in app.query(FooterKey) if not key.has_class("-command-palette")]
    return len(keys) == 12 and all(key.region.width and key.region.right <= width for key in keys)


async def test_keys_that_do_not_fit_in_one_row_take_two_and_one_again_when_they_fit():
    app = ManyKeysApp()
    async with app.run_test(size=(200, 10)) as pilot:
        await wait_for(pilot, lambda: every_key_whole(app), what="the keys")
        assert footer_rows(app) == 1
        await pilot.resize_terminal(80, 10)
        await wait_for(pilot, lambda: footer_rows(app) == 2 and every_key_whole(app), what="two rows at 80")
        await pilot.resize_terminal(200, 10)
        await wait_for(pilot, lambda: footer_rows(app) == 1 and every_key_whole(app), what="one row again")


@pytest.mark.usefixtures("project_configs_only")
@pytest.mark.parametrize("key", ["f1", "question_mark"])
async def test_the_pickers_help_lists_quit_once(make_app, key):
    """The walk: the config picker's help listed both `q Quit` and `^q Quit`. The help lists
    quit once, as the history's and the jobs view's do (widgets/steady_footer.help_rows)."""
    app = make_app("picker")
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ConfigPickerScreen) and "^q Quit" in footer_text(app),
                       what="the picker's footer")
        await pilot.press(key)
        help_screen = await wait_for_screen(pilot, HelpDialog)
        assert [row for row in help_screen.rows if row[1] == "Quit"] == [("q", "Quit")]
