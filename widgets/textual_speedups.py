"""A faster, exact stand-in for the hash of Textual's CSS rule sets.

Profiled on Pilot runs of the env review and the picker: a third of an app's CPU is Textual
applying CSS to each widget, and most of that goes to hashing rule sets. For every node it
collects the rules that may match into a set and filters the stylesheet's whole rule list
through it, a few hundred hashes per node. ``RuleSet.__hash__`` is written in Python as
``id(self)``: identity, at the cost of a Python call each time. ``object.__hash__`` is
identity too, computed in C. Sets and dicts of rule sets hold and find the same members
either way (the hash value is never shown or stored); only the cost changes, about a quarter
of a Pilot test's CPU (docs/testing.md#other-libraries-internals). tests/tui/test_textual_speedups.py
fails when Textual's own hash stops being identity, so the stand-in would stop being exact.
"""

from __future__ import annotations

from textual.css.model import RuleSet

TEXTUALS_RULESET_HASH = RuleSet.__hash__


def identity_hashed_rule_sets() -> None:
    """Hash rule sets by identity in C, as Textual does in Python; idempotent."""
    RuleSet.__hash__ = object.__hash__  # type: ignore[method-assign]
