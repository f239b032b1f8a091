"""Ctrl+C inside the TUI: one rule on every screen (docs/product.md#exit-codes). The app ends
with 130 and the line a headless run prints for an interrupt; where something would be lost
(a job running on the dashboard, unsaved .env edits) the quit question comes first, and a
second Ctrl+C answers it."""

from __future__ import annotations

import pytest

from app.core.errors import ExitCode
from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession
from app.core.runs.history import RunHistory
from app.screens.config_picker import ConfigPickerScreen
from app.screens.dashboard import DashboardScreen, JobContext
from app.screens.dialogs.common import ConfirmDialog, HelpDialog
from app.screens.env_review import EnvReviewScreen
from app.screens.history import HistoryScreen
from app.screens.preview import PayloadPreviewScreen
from app.screens.verification import VerificationScreen
from app.tui import SynthTuiApp
from support.fakes import ScriptedJob, event, training_timeline
from support.pilot_waits import wait_for, wait_for_screen

pytestmark = pytest.mark.usefixtures("project_configs_only")

NOTHING_SENT = "Interrupted before a job was created; nothing was sent."
SYNTH_KEY = "sk_test_backend_key_0123456789"
ENV_KEY = "env_key_0123456789abcdef0123456789abcdef"


def ended_by_interrupt(app: SynthTuiApp, message: str) -> None:
    assert app.return_value == ExitCode.INTERRUPTED
    assert app.exit_message == message


@pytest.mark.parametrize(("start", "screen"), [
    ("picker", ConfigPickerScreen), ("env", EnvReviewScreen), ("verify", VerificationScreen),
    ("preview", PayloadPreviewScreen),
])
async def test_ctrl_c_on_each_step_of_the_flow_exits_130_saying_nothing_was_sent(flow_app, dead_port, start,
                                                                                   screen):
    # The backend does not answer: the verification ends failed (its q would exit 5).
    app = flow_app(start, backend=f"http://127.0.0.1:{dead_port}", task_url=f"http://127.0.0.1:{dead_port}",
                   synth_key=SYNTH_KEY, env_key=ENV_KEY)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for_screen(pilot, screen)
        if start == "verify":
            await wait_for(pilot, lambda: app.exit_code == ExitCode.BACKEND, what="the failed checks")
        await pilot.press("ctrl+c")
    ended_by_interrupt(app, NOTHING_SENT)


async def test_ctrl_c_over_a_dialog_interrupts_too(make_app):
    app = make_app("picker")
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for_screen(pilot, ConfigPickerScreen)
        await pilot.press("question_mark")
        await wait_for_screen(pilot, HelpDialog)
        await pilot.press("ctrl+c")
    ended_by_interrupt(app, NOTHING_SENT)


async def test_ctrl_c_with_unsaved_env_edits_asks_and_a_second_ctrl_c_quits(flow_app, dead_port):
    app = flow_app("env", backend=f"http://127.0.0.1:{dead_port}", task_url="http://127.0.0.1:1",
                   synth_key=SYNTH_KEY, env_key=ENV_KEY)
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for_screen(pilot, EnvReviewScreen)
        app.session.env.set("SYNTH_API_KEY", "sk_changed_but_not_saved_0000")  # an edit not saved
        assert app.session.env.dirty
        await pilot.press("ctrl+c")
        dialog = await wait_for_screen(pilot, ConfirmDialog, "the quit question")
        assert "unsaved changes" in dialog.question
        await pilot.press("ctrl+c")
    ended_by_interrupt(app, NOTHING_SENT)


def dashboard_app(backend, job_id: str, **options) -> SynthTuiApp:
    session = LaunchSession(LaunchOptions(backend=backend.url, poll_interval=0.05, **options),
                            shell={"SYNTH_API_KEY": backend.api_key})
    session.resolve()
    return SynthTuiApp(session, attach=JobContext(job_id))


async def test_ctrl_c_on_a_running_job_asks_and_the_second_ctrl_c_quits(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", [("running", [event(1)], [])] * 10_000))
    app = dashboard_app(faulty_backend, "job_a")
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for_screen(pilot, DashboardScreen)
        await wait_for(pilot, lambda: app.screen.status == "running", what="the running job")
        await pilot.press("ctrl+c")
        await wait_for_screen(pilot, ConfirmDialog, "the quit question")
        await pilot.press("ctrl+c")
    assert app.return_value == ExitCode.INTERRUPTED
    assert app.exit_message.startswith("Interrupted. The job is running. Attach again with:")
    assert app.exit_message.count("job_a") == 1  # the walk: the quit line named the job twice


async def test_ctrl_c_in_a_quit_question_asked_by_q_quits_as_an_interrupt(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", [("running", [event(1)], [])] * 10_000))
    app = dashboard_app(faulty_backend, "job_a")
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.status == "running",
                       what="the running job")
        await pilot.press("q")
        await wait_for_screen(pilot, ConfirmDialog, "the quit question")
        await pilot.press("ctrl+c")
    assert app.return_value == ExitCode.INTERRUPTED


async def test_ctrl_c_on_an_ended_job_quits_at_once_with_130(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline(steps=2)))
    app = dashboard_app(faulty_backend, "job_a")
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.ended,
                       what="the job's end")
        await pilot.press("ctrl+c")
    assert app.return_value == ExitCode.INTERRUPTED
    assert app.exit_message.startswith("Interrupted. Job job_a: succeeded.")


async def test_ctrl_c_on_a_running_job_of_an_embedded_backend_records_it_stopped(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", [("running", [event(1)], [])] * 10_000))
    app = dashboard_app(faulty_backend, "job_a", embedded_backend=True)
    RunHistory().record_submission(job_id="job_a", backend=app.session.backend_base, config_path="c.toml",
                                   payload={}, idempotency_key=None)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.status == "running",
                       what="the running job")
        await pilot.press("ctrl+c")
        await wait_for_screen(pilot, ConfirmDialog, "the quit question")
        await pilot.press("ctrl+c")
    assert app.return_value == ExitCode.INTERRUPTED
    assert app.exit_message.startswith("Interrupted. Job job_a stopped with the app")
    assert app.exit_message.count("job_a") == 1  # the walk: the quit line named the job twice
    assert RunHistory().get("job_a").final_status == "cancelled"  # the user ended it: not a failure


async def test_ctrl_c_on_the_history_exits_130(make_app):
    app = make_app("history")
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for_screen(pilot, HistoryScreen)
        await pilot.press("ctrl+c")
    ended_by_interrupt(app, "Interrupted.")


async def test_ctrl_c_in_a_text_field_with_nothing_selected_interrupts_too(faulty_backend):
    """A focused Input takes ctrl+c as its copy: without a selection that did nothing."""
    from textual.widgets import Input

    faulty_backend.add_job(ScriptedJob("job_a", training_timeline(steps=2)))
    app = dashboard_app(faulty_backend, "job_a")
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.ended,
                       what="the job's end")
        await pilot.press("slash", "x")
        await wait_for(pilot, lambda: isinstance(app.focused, Input) and app.focused.value == "x",
                       what="the filter typed in")
        await pilot.press("ctrl+c")
    assert app.return_value == ExitCode.INTERRUPTED


async def test_ctrl_c_with_text_selected_in_a_field_copies_it_and_stays(faulty_backend):
    from textual.widgets import Input
    from textual.widgets.input import Selection

    faulty_backend.add_job(ScriptedJob("job_a", training_timeline(steps=2)))
    app = dashboard_app(faulty_backend, "job_a")
    copied: list[str] = []
    app.copy_to_clipboard = copied.append  # type: ignore[method-assign]
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.ended,
                       what="the job's end")
        await pilot.press("slash", *"step")
        await wait_for(pilot, lambda: isinstance(app.focused, Input) and app.focused.value == "step",
                       what="the filter typed in")
        app.focused.selection = Selection(0, 4)
        await pilot.press("ctrl+c")
        await pilot.pause()
        assert copied == ["step"] and app.is_running
