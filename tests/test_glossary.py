"""The words of docs/architecture.md#words keep one meaning each: the phrases that gave a word a
second meaning do not come back into the code, the docs or what users read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# phrase -> the word the glossary uses instead
RETIRED = {
    r"\blm trainer\b": "the lm policy",
    r"\bembedded trainer\b": "the embedded backend",
    r"\blocal backend\b": "the embedded backend",
    r"\btrainer_choice\b": "policy_kind",
    r"\bTRAINER_CHOICES\b": "POLICY_KINDS",
    r"\bclass Trainer\b": "JobRunner (the job runner)",
}


def _sources() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for folder in ("app", "widgets"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return files


def test_the_glossary_is_in_the_architecture_map():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert "## Words" in text
    for word in ("| trainer |", "| job runner |", "| policy kind |", "| embedded backend |", "| local |"):
        assert word in text, f"docs/architecture.md#words lost the row {word}"


@pytest.mark.parametrize("phrase", sorted(RETIRED))
def test_a_retired_phrase_does_not_come_back(phrase: str):
    found = []
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        if path.name == "architecture.md":
            text = text.split("## Words", 1)[0] + text.split("## Words", 1)[1].split("\n## ", 1)[-1]
        for number, line in enumerate(text.splitlines(), 1):
            if re.search(phrase, line, flags=re.IGNORECASE if phrase.islower() else 0):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:100]}")
    assert not found, f"say {RETIRED[phrase]!r} (docs/architecture.md#words):\n" + "\n".join(found)
