"""Races between the user and screens being built: a screen closed as it opens, keys typed
before the next screen is shown (docs/architecture.md#threads-and-workers)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from textual.screen import Screen

from app.core.jobs import JobContext
from app.tui import SynthTuiApp

UNUSED = "http://127.0.0.1:9"


def dashboard() -> Screen:
    from app.screens.dashboard import DashboardScreen

    return DashboardScreen(JobContext("job_x"))


def history() -> Screen:
    from app.screens.history import HistoryScreen

    return HistoryScreen()


def jobs() -> Screen:
    from app.screens.jobs import JobsScreen

    return JobsScreen()


SCREENS: dict[str, Callable[[], Screen]] = {**SynthTuiApp.STEPS, "dashboard": dashboard, "history": history,
                                            "jobs": jobs}


@pytest.mark.parametrize("name", list(SCREENS))
async def test_a_screen_closed_as_it_opens_raises_nothing(flow_app, name):
    """The app ends right after a screen is pushed, before the screen has built its widgets:
    its header and its mount handlers must not look for widgets that never existed (the test
    fails on any exception the app saw)."""
    app = flow_app("picker", backend=UNUSED, task_url=UNUSED, synth_key="sk_test_0123456789abcdef",
                   env_key="env_key_0123456789abcdef0123456789")
    async with app.run_test(size=(120, 36)):
        app.push_screen(SCREENS[name]())
