"""The private names of Textual that tests/support/textual_compat.py relies on are still there
(written against Textual 8.2.8; what the app relies on: tests/compat/test_textual_names.py)."""

from __future__ import annotations

from textual.app import App
from textual.widgets import Static

from support.textual_compat import (
    PARSE_RULES_PARAMETERS,
    compositor,
    key_for_character,
    on_each_layout,
    parse_rules_signature,
)


def test_textuals_parse_rules_has_the_shape_the_shared_cache_wraps():
    assert parse_rules_signature() == PARSE_RULES_PARAMETERS


async def test_two_apps_with_other_variables_get_their_own_rules():
    """The shared cache keys on the theme's variables: a dark and a light app differ."""

    class Themed(App):
        CSS = "Static { background: $primary; }"

        def compose(self):
            yield Static("x")

    colours = []
    for theme in ("textual-dark", "textual-light"):
        app = Themed()
        app.theme = theme
        async with app.run_test() as pilot:
            await pilot.pause()
            colours.append(app.query_one(Static).styles.background)
    assert colours[0] != colours[1]


async def test_the_screens_drawing_a_keys_name_and_its_layouts_are_reachable():
    """compositor, key_for_character, on_each_layout (support/textual_compat.py): Textual 8.2.8's
    ``Screen._compositor``, ``textual.keys._character_to_key``, ``Screen._refresh_layout``."""

    class Drawn(App):
        def compose(self):
            yield Static("hello")

    assert key_for_character("?") == "question_mark", "textual.keys._character_to_key changed"
    app = Drawn()
    async with app.run_test(size=(20, 3)) as pilot:
        await pilot.pause()
        drawn = compositor(app.screen)
        assert [strip.text for strip in drawn.render_strips()][0].startswith("hello"), "Screen._compositor changed"
        assert app.query_one(Static) in drawn.visible_widgets, "Compositor.visible_widgets changed"
        layouts = []
        on_each_layout(app.screen, lambda: layouts.append(1))
        await app.query_one(Static).remove()
        await pilot.pause()
        assert layouts, "Screen._refresh_layout changed: a removed widget laid the screen out without it"
