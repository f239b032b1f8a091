"""Discovery with a non-editable install: the wheel's bundled configs live in a virtual
environment's site-packages, often inside the very checkout the user runs from (the README's
`python3 -m venv .venv && .venv/bin/pip install .`). Each config is listed once, the working
tree's copy wins, and nothing inside a virtual environment is walked."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.commands import demo
from app.core.config import roots
from app.core.config.discovery import bundled_config_label, checkout_around, discover_configs, project_config_roots
from app.core.config.picker import load_config_entry
from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession

REPO = Path(__file__).resolve().parents[3]
RL_TOML = '[algorithm]\ntype = "online"\nmethod = "policy_gradient"\nvariety = "gspo"\n'
PYPROJECT = '[project]\nname = "synth-tui"\nversion = "0.1.0"\n'
SITE = Path(".venv/lib/python3.11/site-packages")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def clone(tmp_path, monkeypatch):
    """A checkout with its venv inside, the code running from that venv's site-packages."""
    root = (tmp_path / "synth-tui").resolve()
    write(root / "pyproject.toml", PYPROJECT)
    write(root / "configs" / "rl" / "demo.toml", RL_TOML)
    write(root / ".venv" / "pyvenv.cfg", "home = /usr/bin\n")
    site = root / SITE
    bundled = site / "app" / "bundled_configs"
    write(bundled / "rl" / "demo.toml", RL_TOML)
    monkeypatch.setattr(roots, "_REPO_ROOT", site)
    monkeypatch.setattr(roots, "_BUNDLED_CONFIGS", bundled)
    return root


def paths(cwd: Path) -> list[Path]:
    return [c.path for c in discover_configs(cwd)]


def test_from_the_checkout_each_config_is_listed_once_from_the_working_tree(clone):
    assert paths(clone) == [clone / "configs" / "rl" / "demo.toml"]
    assert project_config_roots(clone) == [clone / "configs"]


def test_from_a_folder_inside_the_checkout_the_working_tree_copy_is_used(clone):
    (clone / "app").mkdir()
    assert checkout_around(clone / "app") == clone
    assert paths(clone / "app") == [clone / "configs" / "rl" / "demo.toml"]


def test_outside_a_checkout_the_bundled_copy_is_listed_once_with_a_short_name(clone, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    bundled = clone / SITE / "app" / "bundled_configs" / "rl" / "demo.toml"
    assert paths(elsewhere) == [bundled]
    assert bundled_config_label(bundled) == "rl/demo.toml (bundled)"
    assert bundled_config_label(clone / "configs" / "rl" / "demo.toml") is None


def test_the_picker_labels_a_bundled_config_by_its_short_name(clone, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    session = LaunchSession(LaunchOptions(cwd=elsewhere), shell={})
    entry = load_config_entry(session, clone / SITE / "app" / "bundled_configs" / "rl" / "demo.toml")
    assert entry.label == "rl/demo.toml (bundled)"
    assert "site-packages" not in entry.label


def test_a_copy_of_a_bundled_config_in_the_working_folder_hides_the_bundled_one(clone, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    copy = write(elsewhere / "demo.toml", RL_TOML)
    assert paths(elsewhere) == [copy.resolve()]


def test_an_edited_copy_is_a_different_config(clone, tmp_path):
    edited = write(tmp_path / "elsewhere" / "demo.toml", RL_TOML + "# mine\n")
    assert len(paths(tmp_path / "elsewhere")) == 2
    assert edited.resolve() in paths(tmp_path / "elsewhere")


def test_a_virtual_environment_of_any_name_is_not_walked(clone):
    write(clone / "env311" / "pyvenv.cfg", "home = /usr/bin\n")
    write(clone / "env311" / "lib" / "python3.11" / "site-packages" / "other" / "rl.toml", RL_TOML)
    write(clone / "vendor" / "site-packages" / "pkg" / "rl.toml", RL_TOML)
    assert paths(clone) == [clone / "configs" / "rl" / "demo.toml"]


def test_another_project_is_not_taken_for_a_synth_tui_checkout(clone, tmp_path):
    other = tmp_path / "other"
    write(other / "pyproject.toml", '[project]\nname = "synth-tui-plugins"\n')
    (other / "configs").mkdir()
    assert checkout_around(other) is None
    assert project_config_roots(other) == [clone / SITE / "app" / "bundled_configs"]


def test_the_demo_opens_the_checkouts_config_as_the_readme_says(clone, tmp_path, monkeypatch):
    assert demo.demo_config_path(clone) == clone / "configs" / "rl" / "demo.toml"
    monkeypatch.chdir(clone)
    assert demo.demo_config_path() == clone / "configs" / "rl" / "demo.toml"
    monkeypatch.chdir(tmp_path)
    assert demo.demo_config_path() == clone / SITE / "app" / "bundled_configs" / "rl" / "demo.toml"


def test_the_demo_run_from_this_repository_opens_configs_rl_demo_toml(clone, monkeypatch):
    # The real checkout, with the code pretending to run from an installed wheel.
    monkeypatch.chdir(REPO)
    assert demo.demo_config_path() == REPO / "configs" / "rl" / "demo.toml"
