"""The run history screen against real loopback backends: statuses checked with the backends,
attach with the .env each job was launched with, End then Enter, a backend that is down."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from textual.widgets import Static

from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession
from app.core.paths import run_dir
from app.core.runs import history as history_module
from app.core.runs.history import RunHistory
from app.screens.dashboard import DashboardScreen
from app.screens.dialogs.common import ConfirmDialog, ErrorDialog
from app.screens.history import HistoryScreen, HistoryTable
from app.tui import SynthTuiApp
from support.fakes import ScriptedJob, event, training_timeline
from support.pilot_waits import wait_for, wait_for_screen
from support.screen_text import footer_text
from widgets.event_log import EventLog

# Nothing listens on port 1 of the loopback: connecting is refused at once.
DEAD_BACKEND = "http://127.0.0.1:1/api"


@pytest.fixture
def fixed_clock(monkeypatch):
    """Records created a minute apart from a fixed moment, so the Created column is fixed."""
    stamps = (f"2026-03-0{1 + i // 60}T09:{i % 60:02d}:00+00:00" for i in itertools.count())
    monkeypatch.setattr(history_module, "utc_now", lambda: next(stamps))


def record(job_id: str, backend: str, *, status: str = "running", final: bool = False, env_path: Path | str | None,
           config_path: str | None = "/work/configs/rl/demo.toml", metrics: dict | None = None,
           payload: dict | None = None) -> None:
    history = RunHistory()
    history.record_submission(job_id=job_id, backend=backend, config_path=config_path,
                              payload=payload if payload is not None else {"job_type": "rl"},
                              idempotency_key=f"key-{job_id}", env_path=str(env_path) if env_path else None)
    history.record_progress(job_id, status=status, final=final, last_metrics=metrics)


def write_env(folder: Path, key: str, name: str = ".env") -> Path:
    path = folder / name
    path.write_text(f"SYNTH_API_KEY={key}\n")
    return path


def history_app(project: Path, *, env_files: list[str] | None = None, poll_interval: float = 0.02) -> SynthTuiApp:
    """`synth-tui history` as run in ``project``: no --env-file unless given, nothing in the shell."""
    session = LaunchSession(LaunchOptions(cwd=project, env_files=env_files or [], poll_interval=poll_interval),
                            shell={})
    return SynthTuiApp(session, start="history")


def screen_of(app: SynthTuiApp) -> HistoryScreen:
    screen = next(s for s in app.screen_stack if isinstance(s, HistoryScreen))
    return screen


def status_text(app: SynthTuiApp, job_id: str) -> str:
    table = screen_of(app).query_one(HistoryTable)
    return table.get_cell(job_id, "status").plain


def header_text(app: SynthTuiApp) -> str:
    return str(screen_of(app).query_one("#history-header", Static).render())


async def loaded(pilot, count: int) -> HistoryScreen:
    return await wait_for_screen(pilot, HistoryScreen, f"{count} rows",
                                 where=lambda screen: screen.query_one(HistoryTable).row_count == count)


async def checked(pilot) -> HistoryScreen:
    screen = screen_of(pilot.app)
    await wait_for(pilot, lambda: screen.checked and not screen.checking, what="the status check")
    return screen


async def test_a_running_job_that_the_backend_says_succeeded_shows_succeeded_and_is_saved_final(
        project, faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_done", [("succeeded", [], [])]))
    faulty_backend.add_job(ScriptedJob("job_running", [("running", [], [])]))
    env = write_env(project, faulty_backend.api_key)
    record("job_old", faulty_backend.url + "/api", status="failed", final=True, env_path=env)
    record("job_done", faulty_backend.url + "/api", status="running", env_path=env)
    record("job_running", faulty_backend.url + "/api", status="queued", env_path=env)
    app = history_app(project)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot, 3)
        await checked(pilot)
        assert status_text(app, "job_done") == "● succeeded"
        assert status_text(app, "job_running") == "● running"
        assert status_text(app, "job_old") == "● failed"
        assert "Statuses checked with the backends" in header_text(app)
    saved = RunHistory().get("job_done")
    assert saved.final_status == "succeeded" and saved.last_status == "succeeded"
    running = RunHistory().get("job_running")
    assert running.final_status is None and running.last_status == "running"
    # A job the history saw end is not asked about again.
    assert faulty_backend.count("/rl/jobs/job_old") == 0


async def test_f5_checks_again_and_keeps_the_cursor_on_its_job(project, faulty_backend):
    job = faulty_backend.add_job(ScriptedJob("job_a", [("running", [], []), ("succeeded", [], [])]))
    env = write_env(project, faulty_backend.api_key)
    record("job_b", faulty_backend.url + "/api", status="succeeded", final=True, env_path=env)
    record("job_a", faulty_backend.url + "/api", status="queued", env_path=env)
    app = history_app(project)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = await loaded(pilot, 2)
        await checked(pilot)
        assert status_text(app, "job_a") == "● running"
        await pilot.press("down")
        assert screen._selected().job_id == "job_b"
        await pilot.press("f5")
        await wait_for(pilot, lambda: status_text(app, "job_a") == "● succeeded", what="the second check")
        assert job.tick == 2
        assert screen._selected().job_id == "job_b"
    assert RunHistory().get("job_a").final_status == "succeeded"


async def test_enter_without_env_file_attaches_with_the_remembered_env(project, faulty_backend, tmp_path):
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline(steps=2)))
    elsewhere = tmp_path / "other-project"
    elsewhere.mkdir()
    env = write_env(elsewhere, faulty_backend.api_key)
    record("job_a", faulty_backend.url + "/api", status="running", env_path=env)
    app = history_app(project)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot, 1)
        await pilot.press("enter")
        await wait_for_screen(pilot, DashboardScreen, "the dashboard")
        dashboard = app.screen
        assert dashboard.job.job_id == "job_a"
        assert app.session.env_choice.path == env
        assert app.session.backend_base == faulty_backend.url + "/api"
        await wait_for(pilot, lambda: dashboard.ended, what="the watch to end")
        assert dashboard.status == "succeeded"
        hint = app.session.attach_hint("job_a")
        assert f"--backend {faulty_backend.url}/api" in hint and f"--env-file {env}" in hint
        await pilot.press("escape")
        await wait_for_screen(pilot, HistoryScreen, "back to the history")
        # The dashboard saw the job end; the list says so on return, without f5.
        await wait_for(pilot, lambda: status_text(app, "job_a") == "● succeeded", what="the list again")


async def test_a_missing_remembered_env_gives_an_error_naming_the_file_and_the_fix(project, faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", [("running", [], [])]))
    gone = project / "deleted" / ".env"
    record("job_a", faulty_backend.url + "/api", status="running", env_path=gone)
    app = history_app(project)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = await loaded(pilot, 1)
        await checked(pilot)
        # The check could not ask for lack of a key: the row keeps its status, and says why.
        assert status_text(app, "job_a") == "● running?"
        assert "which no longer exists" in header_text(app)
        detail = str(screen.query_one("#history-detail", Static).render())
        assert f".env {gone} (missing: pass --env-file PATH)" in detail
        await pilot.press("enter")
        await wait_for_screen(pilot, ErrorDialog, "the error")
        modal = app.screen
        assert modal.title_text == "Cannot open job job_a"
        assert modal.message == f"Job job_a was launched with {gone}, which no longer exists."
        assert "--env-file PATH" in modal.hint
        assert f"synth-tui attach job_a --backend {faulty_backend.url}/api --env-file PATH" in modal.hint
        await pilot.press("escape")
        await wait_for_screen(pilot, HistoryScreen, "the history again")


async def test_the_detail_line_names_the_trained_model(project, faulty_backend):
    record("job_a", faulty_backend.url + "/api", status="succeeded", final=True, env_path=None)
    RunHistory().record_progress("job_a", model_path="/srv/ck/job_a/step-000030")
    app = history_app(project)
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await loaded(pilot, 1)
        await wait_for(pilot, lambda: "model /srv/ck/job_a/step-000030" in str(
            screen.query_one("#history-detail", Static).render()), what="the model in the detail line")


async def test_a_remembered_env_without_the_key_says_which_file(project, faulty_backend):
    env = project / ".env"
    env.write_text("ENVIRONMENT_API_KEY=abc\n")
    record("job_a", faulty_backend.url + "/api", status="succeeded", final=True, env_path=env)
    app = history_app(project)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot, 1)
        await pilot.press("enter")
        await wait_for_screen(pilot, ErrorDialog, "the error")
        assert app.screen.message == f"{env}, the .env job job_a was launched with, has no SYNTH_API_KEY."
        assert app.screen.hint.startswith("Add SYNTH_API_KEY to it, or pass --env-file PATH")


async def test_env_file_flag_wins_over_the_remembered_env(project, faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", [("succeeded", [], [])]))
    given = write_env(project, faulty_backend.api_key, "given.env")
    record("job_a", faulty_backend.url + "/api", status="running", env_path=project / "gone.env")
    app = history_app(project, env_files=[str(given)])
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot, 1)
        await checked(pilot)
        assert status_text(app, "job_a") == "● succeeded"
        await pilot.press("enter")
        await wait_for_screen(pilot, DashboardScreen, "the dashboard")
        assert app.session.env_choice.path == given


async def test_end_then_enter_opens_the_last_row(project, faulty_backend):
    """Textual's DataTable binds end to the horizontal scroll: the row cursor stayed on the
    first row, and Enter attached to it."""
    env = write_env(project, faulty_backend.api_key)
    for job_id in ("job_1", "job_2", "job_3", "job_4"):
        faulty_backend.add_job(ScriptedJob(job_id, [("succeeded", [], [])]))
        record(job_id, faulty_backend.url + "/api", status="succeeded", final=True, env_path=env)
    app = history_app(project)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await loaded(pilot, 4)
        table = screen.query_one(HistoryTable)
        assert table.get_row_at(0)[0].plain == "job_4", "newest first"
        await pilot.press("end")
        assert table.cursor_row == 3
        await pilot.press("enter")
        await wait_for_screen(pilot, DashboardScreen, "the dashboard")
        assert app.screen.job.job_id == "job_1"
        await pilot.press("escape")
        await wait_for_screen(pilot, HistoryScreen, "the history again")
        await pilot.press("home", "enter")
        await wait_for_screen(pilot, DashboardScreen, "the dashboard")
        assert app.screen.job.job_id == "job_4"


async def test_a_dead_backend_leaves_its_rows_and_says_so(project, faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_live", [("succeeded", [], [])]))
    env = write_env(project, faulty_backend.api_key)
    record("job_dead_1", DEAD_BACKEND, status="running", env_path=env)
    record("job_dead_2", DEAD_BACKEND, status="queued", env_path=env)
    record("job_live", faulty_backend.url + "/api", status="running", env_path=env)
    app = history_app(project)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot, 3)
        await checked(pilot)
        assert status_text(app, "job_live") == "● succeeded"
        assert status_text(app, "job_dead_1") == "● running?"
        assert status_text(app, "job_dead_2") == "● queued?"
        header = header_text(app)
        assert f"{DEAD_BACKEND} did not answer" in header
        assert "2 jobs marked ? show the status last seen" in header
        assert not any(isinstance(s, ErrorDialog) for s in app.screen_stack), "never a dialog per row"
    for job_id, status in (("job_dead_1", "running"), ("job_dead_2", "queued")):
        saved = RunHistory().get(job_id)
        assert saved.last_status == status and saved.final_status is None


async def test_the_history_answers_keys_while_a_backend_is_slow(project, faulty_backend):
    """The check runs in a worker: a backend that takes its time blocks neither the keys nor
    the other rows."""
    env = write_env(project, faulty_backend.api_key)
    faulty_backend.add_job(ScriptedJob("job_a", [("succeeded", [], [])]))
    faulty_backend.inject("status", "slow")
    record("job_b", faulty_backend.url + "/api", status="succeeded", final=True, env_path=env)
    record("job_a", faulty_backend.url + "/api", status="running", env_path=env)
    app = history_app(project)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = await loaded(pilot, 2)
        await wait_for(pilot, lambda: screen.checking, what="the check to start")
        assert "Checking 1 unfinished job with 1 backend" in header_text(app)
        await pilot.press("down")
        assert screen._selected().job_id == "job_b"
        await checked(pilot)
        assert status_text(app, "job_a") == "● succeeded"


# --------------------------------------------------------------------------- snapshots


def snapshot_app(project: Path) -> SynthTuiApp:
    """Fixed data: a dead backend (its note), a failed, a cancelled and a succeeded job, and
    the newest highlighted, whose remembered .env is gone."""
    env = write_env(project, "sk_test_snapshot_key_0123456789")
    record("job_01JQ3Z8K2M4N6P8R0T2V4X6Y8A", DEAD_BACKEND, status="running", env_path=env,
           config_path="/home/ml/rl/configs/crafter_qwen4b.toml",
           metrics={"train.mean_score": 0.412, "train.loss": 1.25})
    record("job_0002", "https://api.usesynth.ai/api", status="failed", final=True, env_path=env,
           config_path="/home/ml/rl/configs/crafter_qwen4b.toml", metrics={"train.mean_score": 0.05})
    record("job_0003", "http://127.0.0.1:8000/api", status="cancelled", final=True, env_path=env,
           config_path=None)
    record("job_0004", "http://127.0.0.1:8000/api", status="succeeded", final=True,
           env_path="/home/ml/rl/.env", config_path="/home/ml/rl/configs/demo_gridworld.toml",
           metrics={"eval.mean_score": 0.9, "train.mean_score": 0.93, "train.loss": 0.2})
    return history_app(project)


async def settled(pilot) -> None:
    await loaded(pilot, 4)
    await checked(pilot)
    await pilot.pause()


def test_snapshot_history_wide(snap_compare, project, fixed_clock):
    assert snap_compare(snapshot_app(project), terminal_size=(160, 45), run_before=settled)


def test_snapshot_history_narrow(snap_compare, project, fixed_clock):
    assert snap_compare(snapshot_app(project), terminal_size=(80, 24), run_before=settled)


async def test_rerun_from_the_history_uses_the_remembered_env_and_remembers_it_again(project, faulty_backend,
                                                                                     tmp_path):
    elsewhere = tmp_path / "launched-from"
    elsewhere.mkdir()
    env = write_env(elsewhere, faulty_backend.api_key)
    faulty_backend.add_job(ScriptedJob("job_old", [("succeeded", [], [])]))
    record("job_old", faulty_backend.url + "/api", status="succeeded", final=True, env_path=env,
           payload={"job_type": "rl", "data": {"model": "Qwen/Qwen3-0.6B"}})
    app = history_app(project)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot, 1)
        await pilot.press("r")
        await wait_for_screen(pilot, ConfirmDialog, "the rerun question")
        await pilot.press("enter")
        await wait_for_screen(pilot, DashboardScreen, "the new job's dashboard",
                              where=lambda screen: screen.job.job_id != "job_old")
        new_id = app.screen.job.job_id
    rerun = RunHistory().get(new_id)
    assert rerun.rerun_of == "job_old" and rerun.env_path == str(env)
    assert faulty_backend.count("/rl/jobs", "POST") == 1


async def test_a_job_whose_backend_is_gone_says_so_before_a_dashboard_opens(project):
    """A demo's backend stops with the demo: Enter on its job names the dead backend at once
    instead of opening a dashboard that retries for seconds."""
    env = write_env(project, "sk_test_key_0123456789abcdef")
    record("job_demo", DEAD_BACKEND, status="succeeded", final=True, env_path=env)
    app = history_app(project)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot, 1)
        await pilot.press("enter")
        await wait_for_screen(pilot, ErrorDialog, "the error")
        assert app.screen.title_text == "Cannot open job job_demo"
        assert "127.0.0.1:1" in app.screen.message
        assert not any(isinstance(s, DashboardScreen) for s in app.screen_stack)


async def test_a_read_only_dashboard_times_the_run_by_its_saved_events(project):
    """The header's clock is the saved run's length (first event to last) and the step rate comes
    from the events' times: not 00:00, not millions of steps a minute."""
    env = write_env(project, "sk_test_key_0123456789abcdef")
    record("job_demo", DEAD_BACKEND, status="succeeded", final=True, env_path=env)
    saved = [{**event(1, "rl.train.started"), "created_at": "2026-01-01T12:00:00Z"},
             *({**event(1 + step, "rl.train.step", step=step, mean_score=0.2 * step, loss=0.5, entropy=0.5),
                "created_at": f"2026-01-01T12:{step:02d}:00Z"} for step in (1, 2, 3, 4)),
             {**event(6, "rl.job.completed"), "created_at": "2026-01-01T12:04:05Z"}]
    folder = run_dir("job_demo")
    folder.mkdir(parents=True)
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in saved))
    app = history_app(project)
    async with app.run_test(size=(160, 45)) as pilot:
        await loaded(pilot, 1)
        await pilot.press("enter")
        screen = await wait_for_screen(pilot, DashboardScreen, "the read-only dashboard")
        header = str(screen.query_one("#dash-header").render())
        assert "04:05" in header and "00:00" not in header
        rate = screen.store.get("train.mean_score").readouts().steps_per_minute
        assert rate == pytest.approx(1.0)  # steps 1 to 4 over three minutes


async def test_a_job_whose_backend_is_gone_opens_read_only_from_its_saved_events(project):
    """After a demo its jobs' events stay in their run folders: Enter shows them, read-only,
    with the charts rebuilt from the step summaries, and nothing is sent to the dead backend."""
    env = write_env(project, "sk_test_key_0123456789abcdef")
    record("job_demo", DEAD_BACKEND, status="succeeded", final=True, env_path=env)
    saved = [event(1, "rl.train.started", message="training started"),
             *(event(1 + step, "rl.train.step", message=f"Step {step}/3", step=step, mean_score=0.2 * step,
                     loss=1.0 - 0.1 * step, entropy=0.5) for step in (1, 2, 3)),
             event(5, "rl.eval.summary", message="Eval after step 3", step=3, mean_score=0.7),
             event(6, "rl.job.completed", message="Job completed")]
    folder = run_dir("job_demo")
    folder.mkdir(parents=True)
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in saved) + '{"seq": 7, "ty')
    app = history_app(project)
    async with app.run_test(size=(160, 45)) as pilot:
        history = await loaded(pilot, 1)
        await pilot.press("enter")
        await wait_for_screen(pilot, DashboardScreen, "the read-only dashboard")
        screen = app.screen
        await wait_for(pilot, lambda: "Commands" in footer_text(app), what="the footer")
        assert screen.read_only is not None and screen.feed is None
        assert screen.query_one(EventLog).shown == len(saved)  # the cut last line is skipped
        assert set(screen.store.names()) >= {"train.mean_score", "train.loss", "train.entropy", "eval.mean_score"}
        header = str(screen.query_one("#dash-header").render())
        assert "read-only" in header and "succeeded" in header
        final = str(screen.query_one("#dash-final-text").render())
        assert final.startswith(f"Read-only: the backend at {DEAD_BACKEND} is gone; "
                                "showing the events saved on this machine"), final
        assert "rebuilt from the saved step summaries" in final
        footer = footer_text(app)
        assert "q Back" in footer and "Cancel" not in footer and "Rerun" not in footer
        await pilot.press("c")  # no question, no request: there is nothing to cancel on
        await pilot.pause()
        assert app.screen is screen
        await pilot.press("q")
        await wait_for(pilot, lambda: app.screen is history, what="the history again")


@pytest.mark.parametrize("width", [120, 140])
async def test_the_backend_column_is_never_cut_mid_port(project, width):
    """Issue 37: `history` cut the backend column mid-port. At every width that shows the
    column, a real job id, config and metrics leave host:port whole on screen."""
    from support.screen_text import screen_lines

    env = write_env(project, "sk_test_history_key_0123456789")
    record("job_5f0c2a9e41b7d3c8a6e2f1b0", "http://127.0.0.1:43123/api", status="succeeded", final=True,
           env_path=env, config_path="/home/ml/rl/configs/lm_press_copy.toml",
           metrics={"train.mean_score": 0.93, "eval.mean_score": 0.875, "train.loss": 0.2})
    app = history_app(project)
    async with app.run_test(size=(width, 24)) as pilot:
        await loaded(pilot, 1)  # a finished job: no status to check
        await pilot.pause()
        row = next(line for line in screen_lines(app) if "job_5f0c2a9e41b7d3c8a6e2f1b0" in line)
        assert "127.0.0.1:43123" in row, row
