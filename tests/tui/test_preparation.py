"""Work the flow waits for after its first frame (the demo's servers): the picker says what is
being started, lets nothing be chosen meanwhile, and searches with the options it brings."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
from textual.widgets import Static

from app.core.errors import ExitCode, UsageError
from app.core.launch.options import LaunchOptions, Preparation
from app.core.launch.session import LaunchSession
from app.screens.config_picker import ConfigPickerScreen
from app.screens.dialogs.common import ErrorDialog
from app.tui import SynthTuiApp
from support.pilot_waits import wait_for_screen, wait_until
from support.screen_text import notifications

REPO = Path(__file__).resolve().parents[2]
WAITING = "Starting the test servers…"

pytestmark = pytest.mark.usefixtures("project_configs_only")


def message(app: SynthTuiApp) -> str:
    """The picker's message under its list; none until it first has words."""
    return "".join(str(shown.render()) for shown in app.screen.query("#picker-message").results(Static))


def notice_messages(app: SynthTuiApp) -> list[str]:
    return [n.message for n in notifications(app)]


async def test_the_picker_waits_for_the_preparation_then_searches_with_its_options(project, tmp_path):
    config = tmp_path / "elsewhere" / "demo.toml"
    config.parent.mkdir()
    shutil.copy(REPO / "configs" / "rl" / "demo.toml", config)
    shutil.copy(config, project / "mine.toml")
    release = threading.Event()

    def run() -> tuple[LaunchOptions, str]:
        release.wait(30)
        return LaunchOptions(config_paths=[str(config)], backend="http://127.0.0.1:9", cwd=project), "Servers ready."

    session = LaunchSession(LaunchOptions(cwd=project, backend="http://127.0.0.1"), shell={})
    app = SynthTuiApp(session, preparation=Preparation(WAITING, run, failed="The test could not start"))
    async with app.run_test(size=(120, 30)) as pilot:
        screen = app.screen
        assert isinstance(screen, ConfigPickerScreen)
        await wait_until(pilot, lambda: WAITING in message(app), "the waiting message")
        # Enter typed while the servers start is kept, not refused: it chooses once the list is there.
        await pilot.press("enter")
        assert not screen.searched and session.config_path is None and app.screen is screen
        release.set()
        # The options' --config first, before the project's own; the Enter typed ahead chose it.
        await wait_until(pilot, lambda: session.config_path == config.resolve(), "the choice typed ahead")
        assert [entry.path for entry in screen.entries] == [config.resolve(), (project / "mine.toml").resolve()]
        assert session.backend_base == "http://127.0.0.1:9/api"
        # The choice moved the flow on to the env review: the Ready notice went with the picker
        # (test_the_ready_notice_goes_when_the_flow_moves_on).
        await wait_until(pilot, lambda: app.screen is not screen, "the next step")
        assert "Servers ready." not in notice_messages(app)
        assert not any("One moment" == n.title for n in notifications(app))


async def test_a_failed_preparation_is_shown_and_ends_with_its_exit_code(project):
    def run() -> tuple[LaunchOptions, str]:
        raise UsageError("Port 1 is taken.", "Free it.")

    session = LaunchSession(LaunchOptions(cwd=project, backend="http://127.0.0.1"), shell={})
    app = SynthTuiApp(session, preparation=Preparation(WAITING, run, failed="The test could not start"))
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_for_screen(pilot, ErrorDialog, "the error")
        modal_text = " ".join(str(w.render()) for w in app.screen.query(Static))
        assert "Port 1 is taken." in modal_text and "Free it." in modal_text
        await pilot.press("escape")
        picker = app.screen
        assert isinstance(picker, ConfigPickerScreen)
        assert "The test could not start" in message(app)
        await pilot.press("enter")
        assert not picker.searched and session.config_path is None  # still nothing to choose
        await pilot.press("ctrl+q")
    assert app.return_value == ExitCode.USAGE


async def test_the_collector_off_for_the_start_is_on_again_after_the_first_frame(project):
    import gc

    gc.disable()  # as app/cli/dispatch.py does before a TUI's imports
    try:
        app = SynthTuiApp(LaunchSession(LaunchOptions(cwd=project, backend="http://127.0.0.1"), shell={}))
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_until(pilot, gc.isenabled, "the collector on again")
    finally:
        gc.enable()
        gc.unfreeze()


async def test_the_ready_notice_goes_when_the_flow_moves_on(project):
    """The demo's "Ready" notice is for the picker: it must not sit over the next screens (at
    the end, over the dashboard's event log)."""
    def run() -> tuple[LaunchOptions, str]:
        return LaunchOptions(cwd=project, backend="http://127.0.0.1:9"), "Servers ready."

    session = LaunchSession(LaunchOptions(cwd=project, backend="http://127.0.0.1"), shell={})
    app = SynthTuiApp(session, preparation=Preparation(WAITING, run, failed="The test could not start"))
    async with app.run_test(size=(120, 30)) as pilot:
        await wait_until(pilot, lambda: "Servers ready." in notice_messages(app), "the ready notice")
        app.notify("Something else to say.")  # only the Ready notice goes
        await wait_until(pilot, lambda: "Something else to say." in notice_messages(app), "the other notice")
        app.go_to_env()
        await wait_until(pilot, lambda: "Servers ready." not in notice_messages(app), "the ready notice gone")
        assert "Something else to say." in notice_messages(app)


async def test_the_first_frame_draws_no_waiting_message_and_the_next_one_does(project, monkeypatch):
    """What the preparation awaits is shown once the first frame is out: that frame lays out and
    draws no message (docs/performance.md#first-paint), as the search's message waits too."""
    release = threading.Event()
    first_frame: dict[str, bool] = {}
    display = SynthTuiApp._display

    def record(app: SynthTuiApp, screen, renderable) -> None:
        if renderable is not None and not first_frame and isinstance(screen, ConfigPickerScreen):
            first_frame["message shown"] = any(message.display for message in screen.query("#picker-message"))
        display(app, screen, renderable)

    def run() -> tuple[LaunchOptions, str]:
        release.wait(30)
        return LaunchOptions(cwd=project, backend="http://127.0.0.1:9"), "Servers ready."

    monkeypatch.setattr(SynthTuiApp, "_display", record)
    session = LaunchSession(LaunchOptions(cwd=project, backend="http://127.0.0.1"), shell={})
    app = SynthTuiApp(session, preparation=Preparation(WAITING, run, failed="The test could not start"))
    async with app.run_test(size=(120, 30)) as pilot:
        try:
            await wait_until(pilot, lambda: WAITING in message(app), "the waiting message")
            assert app.screen.query_one("#picker-message", Static).display
        finally:
            release.set()
    assert first_frame == {"message shown": False}
