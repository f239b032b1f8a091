"""Every test runs in a folder and environment of its own (conftest.clean_environment): nothing of
the clone (a ./.env the README's commands made, a demo's files) or of the user can reach it."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_a_test_runs_in_an_empty_folder_of_its_own_not_the_clone():
    here = Path.cwd()
    assert here != REPO and REPO not in here.parents
    assert list(here.iterdir()) == []


def test_a_test_has_a_home_and_state_folder_of_its_own():
    home = Path(os.environ["HOME"])
    assert home != Path.home() or "pytest" in str(home)
    assert "pytest" in os.environ["SYNTH_TUI_STATE_DIR"]
    assert "SYNTH_API_KEY" not in os.environ and "ENVIRONMENT_API_KEY" not in os.environ


def test_the_css_cache_of_a_test_is_in_its_own_home():
    """A start keeps its parsed CSS in the user's cache folder (app/screens/css_cache.py): a
    test's is under its own HOME, whatever the shell's XDG_CACHE_HOME."""
    from app.screens.css_cache import cache_path

    assert "XDG_CACHE_HOME" not in os.environ
    assert Path(os.environ["HOME"]) in cache_path().parents
