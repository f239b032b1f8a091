"""Races between the user and screens being built: a screen closed as it opens, keys typed
before the next screen is shown (docs/architecture.md#threads-and-workers)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from textual.screen import Screen

from app.core.runs.jobs import JobContext
from app.tui import SynthTuiApp
from support.pilot_waits import type_ahead

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


def error() -> Screen:
    from app.screens.dialogs.common import ErrorDialog

    return ErrorDialog("Submit failed", "The backend said no.", "Try again.")


def confirm() -> Screen:
    from app.screens.dialogs.common import ConfirmDialog

    return ConfirmDialog("Quit?", confirm_label="Quit", detail="The job keeps running.")


SCREENS: dict[str, Callable[[], Screen]] = {**SynthTuiApp.STEPS, "dashboard": dashboard, "history": history,
                                            "jobs": jobs, "error": error, "confirm": confirm}


@pytest.mark.parametrize("name", list(SCREENS))
async def test_a_screen_closed_as_it_opens_raises_nothing(flow_app, name):
    """The app ends right after a screen is pushed, before the screen has built its widgets:
    its header and its mount handlers must not look for widgets that never existed (the test
    fails on any exception the app saw)."""
    app = flow_app("picker", backend=UNUSED, task_url=UNUSED, synth_key="sk_test_0123456789abcdef",
                   env_key="env_key_0123456789abcdef0123456789")
    async with app.run_test(size=(120, 36)):
        app.push_screen(SCREENS[name]())


# --------------------------------------------------------------------------- keys typed ahead


@pytest.fixture
def demo_app(project, fixed_home, tmp_path, monkeypatch):
    """`synth-tui demo`'s app: its servers start after the first frame; stopped after the test."""
    import argparse

    from app.commands.demo import DemoServers, waiting_options
    from app.core.launch.session import LaunchSession

    monkeypatch.setenv("SYNTH_TUI_STATE_DIR", str(tmp_path / "state"))
    args = argparse.Namespace(workdir=str(tmp_path / "demo"), poll_interval=0.2, poll_timeout=120.0)
    servers = DemoServers(args)
    try:
        yield SynthTuiApp(LaunchSession(waiting_options(args)), start="picker", preparation=servers.preparation())
    finally:
        servers.stop()


async def test_the_readmes_keys_typed_at_once_reach_the_dashboard(demo_app):
    """Enter c Enter s typed in one go once the demo is ready (as the README says): each key
    reaches the screen it was meant for, though each screen is still being made, or checking,
    when the next key comes."""
    from app.screens.config_picker import ConfigPickerScreen
    from app.screens.dashboard import DashboardScreen
    from support.pilot_waits import wait_for_screen

    app = demo_app
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for_screen(pilot, ConfigPickerScreen, "the picker, searched and ready",
                              where=lambda screen: screen.searched and not app.preparing)
        type_ahead(app, "enter", "c", "enter", "s")
        # verification, preview and submission against the demo's servers: a minute's bound under load
        await wait_for_screen(pilot, DashboardScreen, "the dashboard", limit=3000)


async def test_a_key_and_its_value_typed_at_once_fill_both_fields_of_the_add_key_dialog(make_app, project):
    """`a`, then KEY tab value enter, typed before the dialog is even shown: the name and the
    value land in their own fields and the key is added."""
    from app.screens.env_review import EnvReviewScreen
    from support.pilot_waits import wait_for, wait_for_screen

    (project / ".env").write_text("SYNTH_API_KEY=sk_test_0123456789abcdef\nENVIRONMENT_API_KEY=env_0123456789abcdef\n"
                                  "TASK_APP_URL=http://127.0.0.1:9\n")
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await wait_for_screen(pilot, EnvReviewScreen, where=lambda shown: not shown.loading)
        type_ahead(app, "a", *"MY_KEY", "tab", *"my-value", "enter")
        await wait_for(pilot, lambda: app.screen is screen and "MY_KEY" in screen.edited, what="the key added")
        assert app.session.env is not None and app.session.env.get("MY_KEY") == "my-value"
