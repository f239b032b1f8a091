"""widgets/textual_speedups.py: rule sets hashed in C are the same set members as Textual's own
identity hash, and Textual's hash is still identity (else the stand-in would change meaning)."""

from __future__ import annotations

from textual.css.model import RuleSet
from textual.css.stylesheet import Stylesheet

from widgets import textual_speedups


def test_textuals_own_rule_set_hash_is_identity() -> None:
    rule = RuleSet()
    assert textual_speedups.TEXTUALS_RULESET_HASH(rule) == id(rule)
    assert textual_speedups.TEXTUALS_RULESET_HASH(RuleSet()) != textual_speedups.TEXTUALS_RULESET_HASH(rule)


def test_equal_rule_sets_stay_distinct_members_and_each_is_found() -> None:
    textual_speedups.identity_hashed_rule_sets()
    textual_speedups.identity_hashed_rule_sets()  # idempotent
    first, twin = RuleSet(), RuleSet()
    assert first == twin  # a dataclass: equal fields; membership still goes by identity
    members = {first}
    assert first in members
    assert hash(first) == hash(first) and hash(first) != hash(twin)
    assert {first, twin} == {first, twin} and len({first, twin}) == 2


def test_a_stylesheet_applies_the_same_rules_with_either_hash() -> None:
    css = "Static { color: red; } .warn { color: yellow; } #one { width: 3; } * { height: 1; }"

    def parsed_selectors() -> list[str]:
        sheet = Stylesheet()
        sheet.add_source(css, read_from=("test", ""))
        names = {"Static", ".warn", "#one", "*"}
        limit = {rule for name in sheet.rules_map.keys() & names for rule in sheet.rules_map[name]}
        return [rule.css for rule in reversed(sheet.rules) if rule in limit]

    textual_speedups.identity_hashed_rule_sets()
    fast = parsed_selectors()
    RuleSet.__hash__ = textual_speedups.TEXTUALS_RULESET_HASH  # type: ignore[method-assign]
    try:
        textuals = parsed_selectors()
    finally:
        textual_speedups.identity_hashed_rule_sets()
    assert fast == textuals and len(fast) == 4
