"""Setup for Pilot and snapshot tests: no blinking cursors, fixed paths, a fixed clock."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual.widgets import Input, TextArea

from app.core.session import LaunchOptions, LaunchSession
from app.tui import SynthTuiApp

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "configs" / "rl"


@pytest.fixture(autouse=True)
def utc_clock(monkeypatch):
    """Event times are shown in local time: pin the zone so snapshots match everywhere."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.fixture(autouse=True)
def no_cursor_blink(monkeypatch):
    """A blinking cursor makes a screenshot depend on when it was taken."""
    for widget in (Input, TextArea):
        monkeypatch.setattr(widget.__dict__["cursor_blink"], "_default", False)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project folder the app runs in; screens show paths relative to it, so snapshots
    do not depend on the temporary folder's name."""
    root = tmp_path / "project"
    (root / "configs").mkdir(parents=True)
    monkeypatch.chdir(root)
    return root


@pytest.fixture
def make_app(project):
    def make(start: str = "picker", *, shell: dict | None = None, **options) -> SynthTuiApp:
        session = LaunchSession(LaunchOptions(cwd=project, **options), shell=shell or {})
        return SynthTuiApp(session, start=start)

    return make
