"""The Textual idioms the screens and widgets keep to, checked in the source: styles live in
the one stylesheet, code shows and hides widgets with classes, dialogs live in one package and
are not called modals (Modal is the cloud service)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "app").rglob("*.py"), *(ROOT / "widgets").rglob("*.py")])


def offending(pattern: str, *, skip: tuple[str, ...] = ()) -> list[str]:
    found = []
    for path in SOURCES:
        relative = path.relative_to(ROOT).as_posix()
        if relative in skip:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(pattern, line):
                found.append(f"{relative}:{number}: {line.strip()}")
    return found


def test_no_default_css_outside_the_stylesheet():
    assert offending(r"\bDEFAULT_CSS\b") == []


def test_widgets_are_shown_and_hidden_with_classes():
    # The metrics grid's full-size toggle picks charts while it lays them out (not a screen's toggle).
    assert offending(r"\.display = ", skip=("widgets/metrics_grid.py",)) == []


def test_dialogs_are_not_named_modals():
    assert offending(r"class \w+Modal\(") == []
    dialogs = {path.name for path in (ROOT / "app" / "screens" / "dialogs").glob("*.py")}
    assert {"common.py", "env.py", "path_prompt.py", "overlay_picker.py", "json_report.py"} <= dialogs
