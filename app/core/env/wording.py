"""The env review's file questions in words: how the .env was chosen, and why a typed path
cannot be used as the .env. No Textual import.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from app.core.env import envfile
from app.core.errors import EnvFileError
from app.core.text import display_path

__all__ = ["HOW_CHOSEN", "env_path_problem", "how_chosen"]

# How the .env was chosen (EnvChoice.how), in the user's words.
HOW_CHOSEN = {
    "flag": "from --env-file",
    "discovered": "found in the project",
    "chosen": "chosen by you",
    "none": "none found",
    "created": "created here",  # none was found, and the env review's ctrl+s created it
}


def how_chosen(how: str) -> str:
    if how.startswith("demo state"):
        return "from ~/.synth-ai/demo.json"
    return HOW_CHOSEN.get(how, how)


def env_path_problem(path: Path, cwd: Path) -> str | None:
    """Why ``path`` cannot be used as the .env, or None. Blocking: call from a worker."""
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return f"{display_path(path, cwd)} is a symlink loop (ELOOP): following its links leads back to itself"
        return f"No file at {display_path(path, cwd)}"
    except ValueError:  # a path the OS cannot take (a NUL byte)
        return f"No file at {display_path(path, cwd)}"
    try:
        envfile.EnvFile.load(path)
    except EnvFileError as error:
        return f"{error.message}. {error.hint}" if error.hint else error.message
    return None
