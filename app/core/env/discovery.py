""".env files: where they are looked for (below the working folder, the demo's state folder),
and a path as the user typed it. docs/wire-contract.md#env-files.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from app.core import shell_env

_SKIP_DIRS = frozenset({".git", ".venv", "node_modules", "__pycache__"})
# A scan from a huge cwd (say, $HOME) must not freeze the TUI; the SDK's glob has no bound.
_MAX_DIRS_SCANNED = 5000


def user_path(raw: str | os.PathLike[str]) -> Path:
    """A path as the user typed it, with ``~`` expanded. ``~name`` of an unknown user stays
    literal, as in a shell (a folder so named in the working directory), instead of raising."""
    path = Path(raw)
    try:
        return path.expanduser()
    except RuntimeError:
        return Path.cwd() / path


def resolved_user_path(raw: str | os.PathLike[str]) -> Path:
    """``user_path``, made absolute with symlinks resolved where possible: a symlink loop
    (RuntimeError in Python 3.11) stays unresolved, and reading the file then says why."""
    path = user_path(raw)
    try:
        return path.resolve()
    except (RuntimeError, OSError):
        return Path(os.path.abspath(path))


def demo_state_env_path(state_dir: Path | None = None) -> Path | None:
    """``ENV_FILE_PATH`` from ``<state dir>/demo.json`` if it names an existing file.

    Like the SDK, an unreadable or malformed state file is ignored rather than reported.
    """
    if state_dir is None:
        home = shell_env.variable("SYNTH_AI_HOME")
        state_dir = Path(home).expanduser() if home else Path.home() / ".synth-ai"
    import json

    try:
        data = json.loads((state_dir / "demo.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    raw = data.get("ENV_FILE_PATH") if isinstance(data, dict) else None
    if not isinstance(raw, str) or not raw.strip():
        return None
    path = Path(raw.strip()).expanduser()
    return path if path.is_file() else None


def discover_env_files(
    cwd: Path,
    *,
    config_path: Path | None = None,
    extra_roots: Sequence[Path] = (),
    limit: int = 20,
) -> list[Path]:
    """Candidate .env files in docs/wire-contract.md#env-files order, resolved and de-duplicated.

    ``limit`` bounds the scan under ``cwd`` (as in the SDK); the config dir and extra roots
    are still added after it.
    """
    found: list[Path] = []
    for path in _scan_tree(cwd, limit):
        _add_unique(found, path)
    if config_path is not None:
        _add_unique(found, config_path.parent / ".env")
    for root in extra_roots:
        _add_unique(found, root / ".env")
    return found


def _scan_tree(cwd: Path, limit: int) -> Iterator[Path]:
    """cwd/.env first, then .env files below it, in a stable (sorted) walk order."""
    yield cwd / ".env"
    count = 0
    scanned = 0
    # Differs from the SDK on purpose: we prune .git as well and never descend into the skipped
    # directories at all (the SDK globs through node_modules and filters afterwards).
    for dirpath, dirnames, filenames in os.walk(cwd):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        scanned += 1
        if Path(dirpath) != cwd and ".env" in filenames:
            count += 1
            yield Path(dirpath) / ".env"
        if count >= limit or scanned >= _MAX_DIRS_SCANNED:
            return


def _add_unique(found: list[Path], path: Path) -> None:
    try:
        if not path.is_file():
            return
        resolved = path.resolve()
    except OSError:
        return
    if resolved not in found:
        found.append(resolved)


