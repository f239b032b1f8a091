"""The shell's environment enters the core here, and only here.

Every other module of ``app.core`` is given the variables it needs (a session's ``shell``,
an ``env=`` mapping) or asks this module. Each call reads the environment as it is now, so a
changed variable (``SYNTH_TUI_STATE_DIR`` in a test, say) takes effect on the next call.
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def snapshot() -> dict[str, str]:
    """A copy of the shell's variables as they are now: what a launch session is given."""
    return dict(os.environ)


def variable(name: str) -> str | None:
    """One variable of the shell, read now (None when unset)."""
    return os.environ.get(name)


def given_or_shell(env: Mapping[str, str] | None) -> Mapping[str, str]:
    """``env`` when a caller passed its variables on, else the shell's, read now."""
    return os.environ if env is None else env
