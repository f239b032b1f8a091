"""The private names of Textual that tests/support/textual_compat.py relies on are still there."""

from __future__ import annotations

from textual.app import App
from textual.widgets import Static

from support.textual_compat import PARSE_RULES_PARAMETERS, parse_rules_signature


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
