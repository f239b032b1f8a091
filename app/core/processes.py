"""Signalling a process group, written once: a served tab's process (app/web/tab.py) and the
embedded backend's rank launcher (app/local/parallel/launch.py) each lead a group of their own
(``start_new_session``), and ending them reaches whatever they started.
"""

from __future__ import annotations

import os
import signal


def signal_group(pgid: int, signum: int | signal.Signals) -> bool:
    """Send ``signum`` to the process group ``pgid`` (a child started with
    ``start_new_session=True``: its pid is its group's id). A group that is already gone, or
    that is no longer ours to signal, is not an error: False then, True when sent.

    ``pgid`` 0 or 1 is refused (ValueError): 0 is this process's own group, and a group id
    never is 1 for a child of ours."""
    if pgid <= 1:
        raise ValueError(f"not a child's process group: {pgid}")
    try:
        os.killpg(pgid, signum)
    except OSError:  # ProcessLookupError (gone), PermissionError (its pid reused by another user's)
        return False
    return True


__all__ = ["signal_group"]
