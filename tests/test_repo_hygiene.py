"""What the README's own commands leave in the clone is ignored by git (.gitignore): a user who
follows the README and then runs `git status` or `git add .` sees no keys, logs or models."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Made in the clone by the README's commands (issue 37): keys, the tiny model, logs.
MADE_BY_THE_README = (".env", "lm.env", "tiny-qwen3/", "taskapp.log", "backend.log", "lab.log")


def _ignore_patterns() -> list[str]:
    lines = (REPO / ".gitignore").read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def ignored(path: str) -> bool:
    """git's rule for the patterns .gitignore uses: a pattern without a slash (but a trailing one,
    which means a folder) matches a name at any depth."""
    is_dir = path.endswith("/")
    name = path.rstrip("/").rsplit("/", 1)[-1]
    for pattern in _ignore_patterns():
        if pattern.endswith("/") and not is_dir:
            continue
        if fnmatch.fnmatchcase(name, pattern.rstrip("/").lstrip("/")):
            return True
    return False


def _readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def files_the_readme_writes() -> set[str]:
    """Redirect targets (`> lm.env`, `2>backend.log`) and the folder of `tiny-model DIR`."""
    written: set[str] = set()
    for line in _readme_commands():
        written.update(re.findall(r"\d?>\s*([\w.\-/]+)", line))
        written.update(folder.rstrip("/") + "/" for folder in re.findall(r"\btiny-model\s+([\w.\-/]+)", line))
    return {path for path in written if not path.startswith("/dev/")}


@pytest.mark.parametrize("path", MADE_BY_THE_README)
def test_what_the_readme_makes_is_ignored(path):
    assert ignored(path), f"{path} is made by the README's commands in the clone but not in .gitignore"


def test_every_file_a_readme_command_writes_is_ignored():
    written = files_the_readme_writes()
    assert "tiny-qwen3/" in written  # the README's walk still makes its model in the clone
    assert [path for path in sorted(written) if not ignored(path)] == []


def test_the_sources_are_not_ignored():
    for path in ("app/cli/dispatch.py", "configs/rl/lm_press.toml", "README.md", "styles.tcss", "tests/"):
        assert not ignored(path), path
