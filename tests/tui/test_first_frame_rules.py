"""What the picker's first frame waits for (docs/performance.md#first-paint): it is styled with
styles.tcss's part above the first-frame line, the later steps' rules parsed after it, and they
change nothing the first frame showed; the preview's parts, empty until a config is shown, are
mounted after it."""

from __future__ import annotations

import pytest

from app.screens.config_picker import ConfigPickerScreen
from app.screens.dialogs.common import ErrorDialog
from app.screens.stylesheet import FIRST_FRAME_LINE, LATER_RULES, stylesheet_parts, stylesheet_path
from app.tui import SynthTuiApp
from support.pilot_waits import wait_until
from widgets.config_preview import ConfigPreview

pytestmark = pytest.mark.usefixtures("project_configs_only", "fixed_home")


def later_rules_in(app: SynthTuiApp) -> bool:
    return any(where == LATER_RULES for _path, where in app.stylesheet.source)


def selectors(app: SynthTuiApp) -> set[str]:
    return {rule.selectors for rule in app.stylesheet.rules}


def styles_by_node(app: SynthTuiApp) -> dict[int, list[str]]:
    return {id(node): node.styles.base.css_lines for node in app.screen.walk_children(with_self=True)}


def test_styles_tcss_has_the_first_frame_line_and_its_parts_keep_their_line_numbers():
    css = stylesheet_path().read_text(encoding="utf-8")
    assert FIRST_FRAME_LINE in css
    first, later = stylesheet_parts(css)
    assert first + later.lstrip("\n") == css
    assert later[:later.index(FIRST_FRAME_LINE)].count("\n") == css[:css.index(FIRST_FRAME_LINE)].count("\n")
    assert "#env-status" in later and "#env-status" not in first  # the env review's rules come later
    assert "#picker-list" in first


# Rules nothing in the picker's first frame draws: the dialogs (pushed screens get the later part
# first: SynthTuiApp.push_screen), the preview's parts (mounted after the frame), the picker found
# empty (after its search), and the shared colour classes the later screens use.
LATER_SELECTORS = ("ModalScreen.dialog", ".error-dialog", ".help-dialog", ".path-prompt", "#preview-verdict",
                   "#verdict-problems", ".labelled-row", "#preview-facts", "ConfigPickerScreen.-empty", ".muted")


def test_the_first_part_holds_only_what_the_pickers_first_frame_draws():
    first, later = stylesheet_parts(stylesheet_path().read_text(encoding="utf-8"))
    for selector in LATER_SELECTORS:
        assert selector in later and selector not in first, selector


async def test_a_dialog_pushed_before_the_first_frames_callbacks_is_styled_by_the_later_rules(make_app, monkeypatch):
    on_mount = SynthTuiApp.on_mount

    def mount_then_fail(app: SynthTuiApp) -> None:
        on_mount(app)
        app.show_error("Could not start", RuntimeError("at once"))  # before _add_later_rules has run

    monkeypatch.setattr(SynthTuiApp, "on_mount", mount_then_fail)
    app = make_app()
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_until(pilot, lambda: isinstance(app.screen, ErrorDialog) and app.screen.is_mounted, "the dialog")
        body = app.screen.query_one("#dialog-body")
        assert body.styles.border.top[0] == "thick"  # `.dialog #dialog-body`, a later rule
        assert body.styles.max_width is not None and body.styles.max_width.value == 100
        assert later_rules_in(app)


async def test_the_pickers_first_frame_waits_for_none_of_the_later_rules_and_they_change_nothing_it_shows(
        make_app, monkeypatch):
    seen: dict[str, object] = {}
    add_later_rules = SynthTuiApp._add_later_rules

    def record(app: SynthTuiApp) -> None:
        if "before" not in seen:
            seen.update(screen=type(app.screen), before=styles_by_node(app), later_in=later_rules_in(app),
                        env_rules="#env-status" in selectors(app))
        add_later_rules(app)
        after = styles_by_node(app)
        seen.setdefault("after", {node: after[node] for node in seen["before"]})

    monkeypatch.setattr(SynthTuiApp, "_add_later_rules", record)
    app = make_app()
    assert not later_rules_in(app)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_until(pilot, lambda: "after" in seen, "the later rules after the first frame")
        assert seen["screen"] is ConfigPickerScreen
        assert seen["later_in"] is False and seen["env_rules"] is False
        assert later_rules_in(app) and "#env-status" in selectors(app)
        # Every widget of the first frame is styled as it would be with the whole file.
        assert seen["after"] == seen["before"]


@pytest.mark.parametrize("start", ["history", "env"])
def test_a_first_screen_other_than_the_picker_has_every_rule_from_the_start(make_app, start):
    app = make_app(start)
    assert later_rules_in(app)
    app._add_later_rules()  # nothing left to add: the same source, once
    assert sum(where == LATER_RULES for _path, where in app.stylesheet.source) == 1


def test_the_preview_composes_nothing_for_the_first_frame():
    assert list(ConfigPreview().compose()) == []


async def test_the_previews_parts_are_there_after_the_first_frame_with_nothing_shown(make_app):
    app = make_app()
    async with app.run_test(size=(160, 45)) as pilot:
        preview = app.screen.query_one(ConfigPreview)
        await wait_until(pilot, lambda: preview.built, "the preview's parts")
        for part in ("#preview-verdict", "#verdict-heading", "#verdict-problems", "#preview-facts", "#preview-source"):
            assert len(preview.query(part)) == 1, part
        preview.build()  # once
        assert len(preview.query("#preview-source")) == 1


async def test_the_pickers_message_is_not_there_until_it_has_words(make_app, monkeypatch):
    monkeypatch.setattr(ConfigPickerScreen, "action_reload", lambda _screen: None)  # no search: nothing to say
    app = make_app()
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_until(pilot, lambda: later_rules_in(app), "the first frame drawn")
        assert not app.screen.query("#picker-message")  # nothing to style or lay out in the first frame
        app.screen._show_message("Looking for RL configs…")
        await pilot.pause()
        message = app.screen.query_one("#picker-message")
        assert message.display and message.region.height > 0
