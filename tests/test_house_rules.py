"""The layout's own limits (issue 38, docs/architecture.md#where-things-live): no module in app/
or widgets/ over 600 lines, and at most 12 modules directly in app/local (its folders say what
their files are for). A module that grows past the limit is cut at a seam before it lands."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 600
MAX_TOP_LEVEL_LOCAL = 12


def test_no_module_is_over_600_lines():
    modules = [path for folder in ("app", "widgets") for path in (REPO / folder).rglob("*.py")]
    long = {str(path.relative_to(REPO)): lines for path in modules
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}, f"cut these at a seam (at most {MAX_LINES} lines): {long}"


def test_app_local_keeps_its_modules_in_folders():
    top = sorted(path.name for path in (REPO / "app" / "local").glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_LOCAL, top
