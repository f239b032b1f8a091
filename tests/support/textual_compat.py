"""Textual's private names the tests rely on, in one place (docs/testing.md#other-libraries-internals).
Written against Textual 8.2.8; those the app relies on are in widgets/compat/textual_compat.py.

``compositor``, ``key_for_character``, ``on_each_layout``: what a test reads or watches that
Textual keeps private (the screen as drawn, a key's name, a screen's layouts).

``share_parsed_css``: every App parses its stylesheet again (the app's styles.tcss and each
widget's DEFAULT_CSS): about 15 % of an app's start in a Pilot test, hundreds of times a run.
Parsing is a pure function of the CSS text, where it came from and the theme's variables, so
the rules parsed once are shared by every App in the test process. Textual keeps the same cache
per stylesheet (``Stylesheet._parse_cache``, keyed without the variables, cleared when they
change); this one adds the variables to the key. tests/compat/test_textual_compat.py fails loudly when
Textual's ``Stylesheet._parse_rules`` changes shape.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from textual._compositor import Compositor
from textual.css.stylesheet import Stylesheet
from textual.keys import _character_to_key
from textual.screen import Screen

from app.screens.stylesheet import stylesheet_path

PARSE_RULES_PARAMETERS = ("self", "css", "read_from", "is_default_rules", "tie_breaker", "scope")
_shared: dict[tuple[Any, ...], Any] = {}


def parse_rules_signature() -> tuple[str, ...]:
    return tuple(inspect.signature(Stylesheet._parse_rules).parameters)


def share_parsed_css() -> Callable[[], None]:
    """Patch Stylesheet._parse_rules to share parsed rules across apps; returns the undo."""
    if parse_rules_signature() != PARSE_RULES_PARAMETERS:
        raise RuntimeError(f"Textual's Stylesheet._parse_rules changed: {parse_rules_signature()}; "
                           "update tests/support/textual_compat.py")
    original = Stylesheet._parse_rules

    def parse_rules(self: Stylesheet, css: str, read_from: Any, is_default_rules: bool = False,
                    tie_breaker: int = 0, scope: str = "") -> Any:
        key = (css, read_from, is_default_rules, tie_breaker, scope, tuple(sorted(self._variables.items())))
        try:
            return _shared[key]
        except KeyError:
            rules = _shared[key] = original(self, css, read_from, is_default_rules, tie_breaker, scope)
            return rules

    Stylesheet._parse_rules = parse_rules  # type: ignore[method-assign]

    def undo() -> None:
        Stylesheet._parse_rules = original  # type: ignore[method-assign]

    return undo


# Where styles.tcss's first-frame part says it came from, as count_parses records it.
FIRST_PART = (str(stylesheet_path()), "")


def count_parses() -> tuple[list[tuple[str, Any]], Callable[[], None]]:
    """Record each source that reaches the ``Stylesheet._parse_rules`` installed now (the CSS
    text, where it came from), from stylesheets that did not find it in a cache wrapped on top
    later; returns the record and the undo."""
    below = Stylesheet._parse_rules
    seen: list[tuple[str, Any]] = []

    def parse_rules(self: Stylesheet, css: str, read_from: Any, is_default_rules: bool = False,
                    tie_breaker: int = 0, scope: str = "") -> Any:
        seen.append((css, read_from))
        return below(self, css, read_from, is_default_rules, tie_breaker, scope)

    Stylesheet._parse_rules = parse_rules  # type: ignore[method-assign]

    def undo() -> None:
        Stylesheet._parse_rules = below  # type: ignore[method-assign]

    return seen, undo


def compositor(screen: Screen) -> Compositor:
    """What `screen` last laid out and drew: its strips as the terminal shows them
    (``render_strips``), each widget's region (``visible_widgets``) (``Screen._compositor``)."""
    return screen._compositor


def key_for_character(character: str) -> str:
    """The key's name Textual gives a typed character that is not a letter or a digit ("?" is
    "question_mark"), as its terminal driver names it (``textual.keys._character_to_key``)."""
    return _character_to_key(character)


def on_each_layout(screen: Screen, call: Callable[[], object]) -> None:
    """Call `call` each time `screen` lays out its widgets again (``Screen._refresh_layout``)."""
    original = screen._refresh_layout

    def refresh_layout(*args: Any, **kwargs: Any) -> Any:
        call()
        return original(*args, **kwargs)

    screen._refresh_layout = refresh_layout  # type: ignore[method-assign]
