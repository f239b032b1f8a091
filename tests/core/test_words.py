"""Counts in words (app/core/text.py): one copy, so no header reads "1 jobs"."""

from __future__ import annotations

import pytest

from app.core.text import counted, plural


@pytest.mark.parametrize(("count", "expected"), [(0, "0 jobs"), (1, "1 job"), (2, "2 jobs"), (1200, "1,200 jobs")])
def test_counted_agrees_in_number(count, expected):
    assert counted(count, "job") == expected


def test_an_irregular_plural_is_given():
    assert counted(1, "entry", "entries") == "1 entry" and counted(3, "entry", "entries") == "3 entries"
    assert plural(1, "key") == "key" and plural(2, "key") == "keys"
