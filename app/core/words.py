"""Counts in words: ``counted(1, "job")`` is "1 job", ``counted(2, "job")`` "2 jobs". The one
copy every front end uses, so no header reads "1 jobs".

No Textual import: the screens, the widgets, the headless runs and app.core use it.
"""

from __future__ import annotations


def plural(count: int, noun: str, many: str | None = None) -> str:
    """The noun as it reads after ``count``: ``many`` (default: noun + "s") unless count is 1."""
    return noun if count == 1 else (many or f"{noun}s")


def counted(count: int, noun: str, many: str | None = None) -> str:
    """``count`` and the noun in the matching number, with thousands separated: "1 job", "0 jobs",
    "1,200 jobs"; ``many`` for an irregular plural ("1 entry", "2 entries")."""
    return f"{count:,} {plural(count, noun, many)}"
