"""The project's own configs: the configs/ of the synth-tui checkout the user works in, of the
checkout this code runs from, or the wheel's bundled copies. The picker's first frame names
them (its header), so this module makes no dataclass and compiles one pattern: the search
itself (app/core/config/discovery.py) is imported by the worker that runs it
(docs/performance.md#first-paint)."""

from __future__ import annotations

import re
from pathlib import Path

_REPO_ROOT = Path(__file__).resolve().parents[3]
_BUNDLED_CONFIGS = Path(__file__).resolve().parents[2] / "bundled_configs"


# The project's name in its pyproject.toml: how a synth-tui checkout is told from any other project.
_PROJECT_NAME_LINE = re.compile(r"""^name\s*=\s*["']synth-tui["']\s*$""", re.MULTILINE)


def _is_checkout(folder: Path) -> bool:
    """A synth-tui source tree: its pyproject.toml names the project and it has configs/."""
    try:
        text = (folder / "pyproject.toml").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return (folder / "configs").is_dir() and _PROJECT_NAME_LINE.search(text) is not None


def checkout_around(cwd: Path) -> Path | None:
    """The synth-tui checkout holding cwd (cwd itself or a folder above it), or None."""
    start = resolved(cwd)
    if start is None:
        return None
    for folder in (start, *start.parents):
        if _is_checkout(folder):
            return folder
    return None


def project_config_roots(cwd: Path | None = None) -> list[Path]:
    """The project's own configs, one folder (docs/wire-contract.md#config-discovery): the
    configs/ of the synth-tui checkout the user works in (cwd or above), else of the checkout
    this code runs from (an editable install), else the wheel's app/bundled_configs.

    The working tree's copy wins: run from a clone with a non-editable install, the bundled
    copies inside the virtual environment's site-packages are the same files under a long path.
    """
    checkout = checkout_around(Path.cwd() if cwd is None else cwd)
    if checkout is None and _is_checkout(_REPO_ROOT):
        checkout = _REPO_ROOT
    if checkout is not None:
        return [checkout / "configs"]
    return [_BUNDLED_CONFIGS] if _BUNDLED_CONFIGS.is_dir() else []


def bundled_config_label(path: Path) -> str | None:
    """A short name for a config shipped inside the wheel ("rl/demo.toml (bundled)"), or None
    for any other file: its real path lies deep in site-packages and says nothing."""
    try:
        relative = Path(path).relative_to(_BUNDLED_CONFIGS)
    except ValueError:
        return None
    return f"{relative} (bundled)"


def resolved(path: Path) -> Path | None:
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError):
        return None
