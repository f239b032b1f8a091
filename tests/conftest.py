"""Shared test setup: a clean environment for every test, and loopback servers."""

from __future__ import annotations

import os

import pytest

from fakes import FaultyBackend, TinyTaskApp

# Variables that would make tests depend on the developer's shell or terminal.
_LEAKY_VARS = (
    "NO_COLOR", "TEXTUAL_THEME", "SYNTH_API_KEY", "ENVIRONMENT_API_KEY", "DEV_ENVIRONMENT_API_KEY",
    "dev_environment_api_key", "ENVIRONMENT_API_KEY_ALIASES", "TASK_APP_URL", "TASK_APP_BASE_URL",
    "BACKEND_BASE_URL", "BACKEND_OVERRIDE", "SYNTH_BACKEND_URL_OVERRIDE", "LOCAL_BACKEND_URL", "DEV_BACKEND_URL",
    "PROD_BACKEND_URL", "SDK_EXPERIMENTAL", "SDK_EXPERIMENTAL_MODELS", "SYNTH_AI_HOME", "SYNTH_TUI_STATE_DIR",
    "XDG_STATE_HOME",
)


@pytest.fixture(autouse=True)
def clean_environment(tmp_path_factory, monkeypatch):
    """Every test gets its own HOME and state folders and none of the shell's secrets."""
    for name in _LEAKY_VARS:
        monkeypatch.delenv(name, raising=False)
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SYNTH_AI_HOME", str(home / ".synth-ai"))
    monkeypatch.setenv("SYNTH_TUI_STATE_DIR", str(home / "state"))
    yield home


@pytest.fixture
def faulty_backend():
    with FaultyBackend() as backend:
        yield backend


@pytest.fixture
def tiny_task_app():
    with TinyTaskApp() as app:
        yield app


def pytest_configure(config):
    os.environ.pop("NO_COLOR", None)
    os.environ.pop("TEXTUAL_THEME", None)
