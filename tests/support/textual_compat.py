"""Textual's private names the tests rely on, in one place (docs/testing.md#textual-internals).

``share_parsed_css``: every App parses its stylesheet again (the app's styles.tcss and each
widget's DEFAULT_CSS): about 15 % of an app's start in a Pilot test, hundreds of times a run.
Parsing is a pure function of the CSS text, where it came from and the theme's variables, so
the rules parsed once are shared by every App in the test process. Textual keeps the same cache
per stylesheet (``Stylesheet._parse_cache``, keyed without the variables, cleared when they
change); this one adds the variables to the key. tests/test_textual_compat.py fails loudly when
Textual's ``Stylesheet._parse_rules`` changes shape.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from textual.css.stylesheet import Stylesheet

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
