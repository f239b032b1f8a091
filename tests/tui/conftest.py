"""Setup for Pilot and snapshot tests: no blinking cursors, fixed paths, a fixed clock, and
an app opened on a later step of the flow."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Input, TextArea

from app.core.config import discovery, roots
from app.core.config import rl as cfg
from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession
from app.tui import SynthTuiApp
from support.textual_compat import count_parses

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


@pytest.fixture
def project_configs_only(monkeypatch):
    """Discovery also searches the checkout's own configs/ folder; tests look at the project."""
    for module in (roots, discovery, cfg):  # the picker's header asks roots; the search, discovery
        monkeypatch.setattr(module, "project_config_roots", lambda *_cwd: [])


@pytest.fixture
def fixed_home(project, monkeypatch):
    """Show the project as ~/project in every run, so snapshots hold no temporary path."""
    monkeypatch.setenv("HOME", str(project.parent))


@pytest.fixture
def flow_app(make_app, project):
    """Opens the app on ``start`` with the example config and a .env already chosen, as the
    earlier steps would leave the session. The .env holds the keys and the task URL given."""

    def make(start: str, *, backend: str, task_url: str, synth_key: str, env_key: str, **options) -> SynthTuiApp:
        config = project / "configs" / "crafter_qwen4b.toml"
        shutil.copy(EXAMPLES / "crafter_qwen4b.toml", config)
        env = project / ".env"
        env.write_text(f"SYNTH_API_KEY={synth_key}\nENVIRONMENT_API_KEY={env_key}\nTASK_APP_URL={task_url}\n")
        app = make_app(start, config_paths=[str(config)], env_files=[str(env)], backend=backend, **options)
        app.session.choose_config(config, app.session.validate(config))
        app.session.open_env(env, "flag")
        return app

    return make


@pytest.fixture
def parses() -> Iterator[list[tuple[str, Any]]]:
    """The CSS sources parsed while the test runs, below any parsed-CSS cache (the text, where it
    came from): tests/tui/test_css_cache.py, test_css_seed.py."""
    seen, undo = count_parses()
    yield seen
    undo()


@pytest.fixture
def kept(tmp_path: Path) -> Path:
    """Where a test's user cache keeps the parsed CSS (app/screens/css_cache.py)."""
    return tmp_path / "cache" / "synth-tui" / "parsed-css.pickle"
