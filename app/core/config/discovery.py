"""Where the RL configs are: discovery below the working folder and the project's own configs,
and the last config chosen, shared with the SDK's state file. No schema here: the picker's first
screen is drawn before the config schema (pydantic) is imported (docs/performance.md#first-paint).
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from app.core import shell_env
from app.core.atomic import atomic_write_text
from app.core.config.kind import ConfigKind, infer_config_type
from app.core.config.roots import bundled_config_label as bundled_config_label  # roots.py's, named here too
from app.core.config.roots import checkout_around as checkout_around
from app.core.config.roots import project_config_roots as project_config_roots
from app.core.config.roots import resolved as _resolved
from app.core.errors import ConfigError

# The project's own configs are found by roots.py, so that the picker's first frame imports no
# search and makes no dataclass (docs/performance.md#first-paint).

# ---------------------------------------------------------------------------------------
# Discovery (docs/wire-contract.md#config-discovery)
# ---------------------------------------------------------------------------------------

# The SDK's skip list plus virtualenv/tooling folders that only ever hold other projects'
# TOML files. Any hidden directory (name starting with ".") below a search root is skipped
# as well; the root itself is never skipped, whatever its name.
# Differs from the SDK on purpose: the SDK tests the *absolute* path's parts, so working
# inside e.g. ~/build/project found nothing at all. We only test parts below the root.
# Test fixture folders hold configs written to be broken or odd, not ones to train; the `o`
# path prompt (or --config) still opens any file.
SKIP_DIR_NAMES = frozenset(
    {".git", ".venv", "node_modules", "__pycache__", "dist", "build", "venv", "site-packages",
     "fixtures", "test_fixtures", "testdata", "test_data", "__snapshots__"}
)



@dataclass(frozen=True)
class ConfigCandidate:
    path: Path
    kind: ConfigKind | Literal["broken"]  # broken: listed only to show its syntax error
    last_used: bool = False


# A test suite's data folder (tests/data, test/data) holds fixtures too, under a plainer name.
TEST_FOLDER_NAMES = frozenset({"tests", "test"})


def _is_skipped_dir(parent: str, name: str) -> bool:
    """A folder never searched: by its name, a test suite's data folder, or a virtual
    environment of any name (it holds a pyvenv.cfg), whose site-packages would list other
    projects' configs."""
    return (name in SKIP_DIR_NAMES or name.startswith(".")
            or (name == "data" and os.path.basename(parent) in TEST_FOLDER_NAMES)
            or os.path.isfile(os.path.join(parent, name, "pyvenv.cfg")))


def iter_toml_files(root: Path) -> Iterator[Path]:
    """Every *.toml below root, pruning skipped directories instead of walking into them."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(name for name in dirnames if not _is_skipped_dir(dirpath, name))
        for name in sorted(filenames):
            if name.endswith(".toml"):
                yield Path(dirpath) / name


def _same_file_found(path: Path, found: Sequence[Path]) -> bool:
    """A bundled config another root already holds (same name, same bytes): listed once."""
    try:
        content = path.read_bytes()
        return any(other.name == path.name and other.read_bytes() == content for other in found)
    except OSError:
        return False


def _kind_of_file(path: Path) -> ConfigKind | Literal["broken"]:
    """The config's kind, or "broken" for a file that cannot be read or parsed as TOML."""
    from app.core.config.toml_source import load_toml  # tomllib: not before the first frame (docs/performance.md)

    try:
        return infer_config_type(load_toml(path))
    except (ConfigError, ValueError, RecursionError):
        return "broken"


def _last_used_first(candidates: list[ConfigCandidate], last_config: Path | None) -> list[ConfigCandidate]:
    wanted = _resolved(last_config) if last_config else None
    for index, candidate in enumerate(candidates):
        if wanted is not None and candidate.path == wanted:
            marked = dataclasses.replace(candidate, last_used=True)
            return [marked, *candidates[:index], *candidates[index + 1 :]]
    return candidates


def discover_configs(
    cwd: Path,
    *,
    extra_roots: Sequence[Path] | None = None,
    kind: str | None = "rl",
    last_config: Path | None = None,
    include_broken: bool = False,
) -> list[ConfigCandidate]:
    """Configs below cwd and the project's configs folder, of the requested kind.

    Sorted by (path depth, path) as in the SDK; the last-used config first and marked.
    `kind=None` (or "auto") keeps every recognised kind. The SDK skips TOML files it cannot
    parse; `include_broken` lists them too (kind "broken"), so the picker can show the
    syntax error instead of the file silently missing.
    """
    roots = [Path(cwd), *(project_config_roots(cwd) if extra_roots is None else extra_roots)]
    wanted_kind = None if kind in (None, "auto") else kind
    seen: set[Path] = set()
    candidates: list[ConfigCandidate] = []
    for root in roots:
        if not Path(root).is_dir():
            continue
        for path in iter_toml_files(Path(root)):
            resolved = _resolved(path)
            if resolved is None or resolved in seen:
                continue
            seen.add(resolved)
            if bundled_config_label(resolved) is not None and _same_file_found(resolved, list(seen - {resolved})):
                continue
            found_kind = _kind_of_file(resolved)
            if found_kind == "broken" and include_broken:
                candidates.append(ConfigCandidate(path=resolved, kind="broken"))
                continue
            if found_kind in ("unknown", "broken") or (wanted_kind and found_kind != wanted_kind):
                continue
            candidates.append(ConfigCandidate(path=resolved, kind=found_kind))
    candidates.sort(key=lambda c: (len(c.path.parts), str(c.path)))
    return _last_used_first(candidates, last_config)


# ---------------------------------------------------------------------------------------
# The remembered last choice (docs/wire-contract.md#last-config): ~/.synth-ai/train_cli.json, key LAST_CONFIG
# ---------------------------------------------------------------------------------------

LAST_CONFIG_KEY = "LAST_CONFIG"


def train_cli_state_path() -> Path:
    """The SDK's own state file, so both tools agree on the last config."""
    home = shell_env.variable("SYNTH_AI_HOME")
    base = Path(home).expanduser() if home else Path.home() / ".synth-ai"
    return base / "train_cli.json"


_MISSING = object()
_UNREADABLE = object()
# The SDK's state file holds a few paths; one larger than this is not it.
_STATE_MAX_BYTES = 1 << 20


def _read_state(path: Path) -> object:
    """The parsed JSON, _MISSING when there is no file, _UNREADABLE when it can't be used."""
    import json  # json and tomllib load with the search, after the first frame (docs/performance.md)

    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > _STATE_MAX_BYTES:
            return _UNREADABLE  # a FIFO would block the read, a huge file fill the memory
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return _MISSING
    except (OSError, UnicodeDecodeError):
        return _UNREADABLE
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: arrays nested deeper than Python's stack
        return _UNREADABLE


def read_last_config(state_path: Path | None = None) -> Path | None:
    """The remembered config, or None when unset, stale (file gone) or the state is corrupt."""
    state = _read_state(state_path or train_cli_state_path())
    if not isinstance(state, dict):
        return None
    raw = state.get(LAST_CONFIG_KEY)
    if not isinstance(raw, str) or not raw.strip():
        return None
    remembered = _resolved(Path(raw))
    return remembered if remembered is not None and remembered.is_file() else None


def _write_json_atomically(path: Path, data: dict[str, Any]) -> None:
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")  # a new file each time: 0600


def write_last_config(config_path: Path, state_path: Path | None = None) -> bool:
    """Remember config_path, keeping every other key. False (never an exception) on failure.

    A state file that is not a JSON object is left untouched rather than overwritten: it may
    hold something the user cares about. (The SDK silently replaces a non-object with {}.)
    """
    path = state_path or train_cli_state_path()
    state = _read_state(path)
    # Differs from the SDK on purpose: a corrupt or non-object file is not replaced.
    if state is _MISSING:
        state = {}
    if not isinstance(state, dict):
        return False
    resolved = _resolved(Path(config_path))
    if resolved is None:
        return False
    try:
        _write_json_atomically(path, {**state, LAST_CONFIG_KEY: str(resolved)})
    except OSError:
        return False
    return True
