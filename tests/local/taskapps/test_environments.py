"""Each reference task app names the environment it serves in /task_info, and each shipped config
written for one of them names that environment in [rollout] env_name: verification compares the
two (docs/product.md#verification), so a shipped pair never warns and a mismatched pair does."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.local.taskapps.crafter import create_crafter_taskapp
from app.local.taskapps.gridworld_app import create_taskapp
from app.local.taskapps.press import create_press_taskapp

REPO = Path(__file__).resolve().parents[3]
KEY = "env_key_0123456789abcdef0123456789abcdef"

APPS = {"demo.toml": create_taskapp, "lm_press.toml": create_press_taskapp, "crafter_lite.toml": create_crafter_taskapp}


def _served(make) -> str:
    with TestClient(make(env_api_keys=[KEY])) as http:
        answer = http.get("/task_info", headers={"X-API-Key": KEY})
    assert answer.status_code == 200
    return answer.json()["taskset"]["environment"]


@pytest.mark.parametrize("config", sorted(APPS))
def test_a_shipped_config_names_the_environment_its_task_app_serves(config: str):
    env_name = tomllib.loads((REPO / "configs" / "rl" / config).read_text(encoding="utf-8"))["rollout"]["env_name"]
    assert _served(APPS[config]) == env_name


def test_the_reference_apps_serve_different_environments():
    """The demo's gridworld app and lm_press.toml differ, so `synth-tui demo` with lm_press.toml
    chosen is warned (issue 37)."""
    assert len({_served(make) for make in APPS.values()}) == len(APPS)
