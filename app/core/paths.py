"""Where synth-tui keeps its own state: the run history, run folders, the embedded backend's db."""

from __future__ import annotations

import os
from pathlib import Path


def state_dir() -> Path:
    """``$SYNTH_TUI_STATE_DIR``, else ``$XDG_STATE_HOME/synth-tui``, else ``~/.local/state/synth-tui``."""
    explicit = os.environ.get("SYNTH_TUI_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "synth-tui"


def run_dir(job_id: str) -> Path:
    """The folder of one job's files: the full event stream and exports."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in job_id) or "job"
    return state_dir() / "runs" / safe


def history_db_path() -> Path:
    return state_dir() / "history.sqlite"
