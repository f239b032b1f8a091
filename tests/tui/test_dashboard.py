"""The live dashboard against a real loopback backend: the feed, keys, export, faults."""

from __future__ import annotations

import json
import threading

import pytest
from textual.command import CommandList, CommandPalette
from textual.content import Content
from textual.widgets import DataTable

from app.core.api.streaming import WatchEnded
from app.core.api.wire import JobEvent, JobStatus, MetricPoint
from app.core.errors import ExitCode
from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession
from app.core.paths import run_dir
from app.core.runs.compare import ComparedRun
from app.core.runs.feed import FeedBatch
from app.core.runs.history import RunHistory
from app.screens.commands import palette_commands
from app.screens.dashboard import DashboardScreen, JobContext
from app.screens.dialogs.common import ConfirmDialog, ErrorDialog, HelpDialog
from app.screens.rollouts import RolloutsScreen
from app.tui import SynthTuiApp
from support.fakes import FaultyBackend, ScriptedJob, event, metric, training_timeline
from support.pilot_waits import type_ahead, wait_for, wait_for_screen
from support.screen_text import footer_keys_missing, footer_text, notifications, screen_lines
from widgets.event_log import CONTINUATION_INDENT, MIN_WRAP_WIDTH, EventLog, event_lines
from widgets.metrics_grid import MetricsGrid
from widgets.rank_line import RankLine
from widgets.steady_footer import SteadyFooter


def make_dashboard_app(backend: FaultyBackend, job: JobContext, *, interval: float = 0.02,
                       **options) -> SynthTuiApp:
    session = LaunchSession(LaunchOptions(backend=backend.url, poll_interval=interval, **options),
                            shell={"SYNTH_API_KEY": backend.api_key})
    session.resolve()
    return SynthTuiApp(session, attach=job)


def dashboard(app) -> DashboardScreen:
    assert isinstance(app.screen, DashboardScreen)
    return app.screen


async def test_events_arrive_and_the_chart_grows(faulty_backend):
    timeline = training_timeline(steps=6)
    faulty_backend.add_job(ScriptedJob("job_a", timeline))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended)
        log = screen.query_one(EventLog)
        grid = screen.query_one(MetricsGrid)
        assert log.total == sum(len(e) for _, e, _ in timeline)
        assert log.hidden_noise == 1
        assert grid.focused_panel == "mean_score"
        assert len(screen.store.get("train.mean_score")) == 6
        assert screen.status == "succeeded"
        assert "Final status: succeeded" in str(screen.query_one("#dash-final-text").render())
        await wait_for(pilot, lambda: len(grid.charts) == 2 and all(c.shows_current_view for c in grid.charts))


def unwrapped(lines: list[str]) -> str:
    """The screen's text without borders or blanks: a path wrapped over rows reads whole."""
    return "".join("".join(line.strip().strip("│").split()) for line in lines)


@pytest.mark.parametrize("size", [(80, 24), (160, 45)])
async def test_the_final_panel_and_the_quit_line_show_the_model(faulty_backend, tmp_path, size):
    folder = tmp_path / "step-000006"
    folder.mkdir()
    (folder / "policy.json").write_text(json.dumps({"kind": "lm", "trainer_mode": "lora"}))
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline(steps=2), artifacts={"model_path": str(folder)}))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"))
    async with app.run_test(size=size) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended)
        # On screen without scrolling (the JSON under it is long), wrapped at 80 columns.
        await wait_for(pilot, lambda: f"Model:{folder}" in unwrapped(screen_lines(app)),
                       what="the model's path in the final panel")
        if size[0] > 80:
            assert any("AutoPeftModelForCausalLM" in line for line in screen_lines(app))
        await pilot.press("q")
    assert app.return_value == 0
    assert app.exit_message == f"Job job_a: succeeded. Model: {folder}. Past runs: synth-tui history"


def status_line_shown(app, grid: MetricsGrid) -> tuple[str, str]:
    """The chart-hint line's whole text, and what the terminal shows of it."""
    status = grid.query_one("#grid-status")
    whole = str(status.render()).strip()
    region = status.region
    return whole, screen_lines(app)[region.y][region.x:region.right].strip()


@pytest.mark.parametrize("size", [(160, 45), (80, 24)])
async def test_the_chart_hint_line_drops_whole_hints_never_cut(faulty_backend, size):
    """Walk 37 item 7: at 160x45 the line read `… s none · z all steps · o` ("overlay" cut)
    while steps ran and `… s none · z all` while waiting for metrics. It drops whole hints."""
    waiting = [("queued", [event(1, "rl.job.created", message="job created")], []),
               ("running", [event(2, "rl.train.started", message="training started")], [])]
    faulty_backend.add_job(ScriptedJob("job_wait", waiting))
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline(steps=4)))
    hints = ("m chart", "f full size", "s none", "z all steps", "o overlay")
    for job_id in ("job_a", "job_wait"):
        app = make_dashboard_app(faulty_backend, JobContext(job_id))
        async with app.run_test(size=size) as pilot:
            screen = dashboard(app)
            grid = screen.query_one(MetricsGrid)
            if job_id == "job_a":
                await wait_for(pilot, lambda s=screen, g=grid: s.ended and len(g.charts) == 2)
                grid.set_rollout_progress("step 12: 14/16 rollouts done")  # as while a step runs
            else:
                await wait_for(pilot, lambda s=screen: s.status == "running")
            await pilot.pause()
            whole, shown = status_line_shown(app, grid)
            assert shown == whole, (job_id, size)
            assert "m chart" in whole  # the first key hint fits at both sizes
            assert whole.split(" · ")[-1] in hints or "overlay" not in whole, whole
            await pilot.resize_terminal(60, 20)
            await pilot.pause()
            whole, shown = status_line_shown(app, grid)
            assert shown == whole, (job_id, "60x20")


async def test_at_80x24_the_final_panel_scrolls_to_the_lines_that_load_the_model(faulty_backend, tmp_path):
    """Walk 37 item 10: at 80x24 a long model path filled the end panel and the "Load it in
    Python" lines under it could not be reached. The panel takes the focus and ↓ scrolls it."""
    folder = tmp_path / ("a-long-folder-name-for-the-checkpoints-of-this-walk-" * 2) / "step-000006"
    folder.mkdir(parents=True)
    (folder / "policy.json").write_text(json.dumps({"kind": "lm", "trainer_mode": "lora"}))
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline(steps=2), artifacts={"model_path": str(folder)}))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"))
    async with app.run_test(size=(80, 24)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended)

        await wait_for(pilot, lambda: any("↑↓ scroll" in line for line in screen_lines(app)),
                       what="the end panel saying it scrolls")
        for _ in range(4):
            await pilot.press("down")
        await wait_for(pilot, lambda: any("from peft import AutoPeftModelForCausalLM" in line
                                          for line in screen_lines(app)), what="the lines that load the model")


async def test_metric_smoothing_zoom_and_noise_keys(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline(steps=4)))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended)
        grid = screen.query_one(MetricsGrid)
        await wait_for(pilot, lambda: len(grid.charts) == 2)
        await pilot.press("m")
        assert grid.focused_panel == "loss"
        await pilot.press("M")
        assert grid.focused_panel == "mean_score"
        await pilot.press("f")
        await pilot.pause()
        assert grid.full and screen.has_class("-chart-full")
        assert [c.panel.key for c in grid.charts if c.display] == ["mean_score"]
        assert not screen.query_one(EventLog).display
        await pilot.press("m")
        await pilot.pause()
        assert [c.panel.key for c in grid.charts if c.display] == ["loss"], "full size follows the focus"
        await pilot.press("f")
        await pilot.pause()
        assert not grid.full and all(c.display for c in grid.charts)
        await pilot.press("s")
        assert grid.smoothing == "ema"
        await pilot.press("z")
        assert grid.zoomed
        log = screen.query_one(EventLog)
        before = log.shown
        await pilot.press("n")
        assert log.show_noise and log.shown == before + 1


async def test_filter_limits_the_log(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline(steps=4)))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended)
        await pilot.press("slash")
        type_ahead(app, *"completed")  # as a terminal sends it: no frame per key
        log = screen.query_one(EventLog)
        await wait_for(pilot, lambda: log.filter_text == "completed", what="the filter typed")
        assert log.shown == 1  # applied as typed
        await pilot.press("enter")  # keeps it, closes the field
        assert not screen.query_one("#dash-filter").display
        assert screen.focused is log.log_view  # the dashboard's keys are keys again, not the field's text
        assert log.filter_text == "completed"
        # The active filter is visible in the header, and esc clears it.
        assert "filter “completed” (esc clears)" in str(screen.query_one("#dash-header").render())
        await pilot.press("escape")
        await pilot.pause()
        assert log.filter_text == "" and log.shown > 1
        assert "filter" not in str(screen.query_one("#dash-header").render())


@pytest.mark.parametrize("size", [(160, 45), (80, 24)])
async def test_every_step_line_shows_its_numbers_within_the_width(faulty_backend, size):
    """The log wraps a message instead of cutting it at the panel's edge: each step's mean
    score, loss and entropy can be read without scrolling sideways."""
    long = ("Step 11/16: mean score 0.873, loss -0.4213, entropy 0.2210, effective learning rate 10.0, "
            "256 rollouts in 3.1 s")
    faulty_backend.add_job(ScriptedJob("job_a", [("running", [event(1, "rl.train.step", message=long)], []),
                                                 ("succeeded", [event(2, "rl.job.completed")], [])]))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"))
    async with app.run_test(size=size) as pilot:
        screen = dashboard(app)
        event_log = screen.query_one(EventLog)
        log = event_log.log_view
        # The lines are wrapped to the width the log had when they came, and again when it is
        # resized. The job can end before the layout settles (a loaded machine): before the
        # screen's breakpoint class applies, the log at 80 columns is briefly too narrow to wrap
        # in. Wait until the lines are wrapped to a width the log wraps at.
        await wait_for(pilot, lambda: screen.ended and event_log._wrap_width >= CONTINUATION_INDENT + MIN_WRAP_WIDTH
                       and event_log._wrapped_at == event_log._wrap_width, what="the lines wrapped to the width")
        width = log.scrollable_content_region.width
        lines = [log.lines[i] for i in range(log.line_count)]
        assert all(len(line) <= width for line in lines), (width, lines)
        text = " ".join(" ".join(line.split()) for line in lines)
        for number in ("0.873", "-0.4213", "0.2210", "256 rollouts in 3.1 s"):
            assert number in text


@pytest.mark.parametrize("width", [30, 38, 43, 60])
def test_a_narrow_log_wraps_its_lines_instead_of_cutting_them(width):
    # A dashboard 110-120 columns wide leaves the log under 44 columns: its lines were cut
    # at the edge ("rl.train.step  Step"), hiding every number.
    message = "Step 3: mean score 0.873 over 256 rollouts in 3.1 s (loss -0.4213)"
    lines = event_lines(JobEvent.model_validate(event(7, message=message)), width)
    assert len(lines) > 1 and all(len(line) <= width for line in lines), lines
    text = " ".join(" ".join(line.split()) for line in lines)
    for part in ("rl.train.step", "0.873", "256 rollouts", "-0.4213)"):
        assert part in text, (part, lines)


async def test_a_palette_command_runs_the_binding_it_comes_from(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", [("running", [event(1)], [])] * 10_000))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"), interval=0.05)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.status == "running")
        await pilot.press("ctrl+p")
        await wait_for(pilot, lambda: isinstance(app.screen, CommandPalette), what="the palette")
        type_ahead(app, *"freeze the view")  # as a terminal sends it: no frame per key
        def listed() -> list[str]:
            commands = app.screen.query_one(CommandList)
            return [str(commands.get_option_at_index(i).prompt) for i in range(commands.option_count)]

        # the keys arrive at once: the palette searches as they land, so wait for the last search's list
        await wait_for(pilot, lambda: listed()[:1] and "Freeze the view" in listed()[0],
                       what="the command listed first")
        assert "(p)" in listed()[0]  # its help: the binding's key
        await pilot.press("enter")
        await wait_for(pilot, lambda: screen.paused and "-paused" in screen.classes, what="the view paused")
        assert "view frozen (p)" in str(screen.query_one("#dash-header").render())


async def test_pause_stops_redraws_and_resume_applies_what_arrived(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", [("running", [event(1)], [metric("train.mean_score", 0, 0.1)])] * 3
                                       + [("running", [event(2)], [metric("train.mean_score", 1, 0.2)])] * 3
                                       + [("succeeded", [event(3, "rl.job.completed")], [])]))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"), interval=0.2)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.query_one(EventLog).total >= 1)
        await pilot.press("p")
        chart = screen.query_one(MetricsGrid)
        redraws, total = chart.redraws, screen.query_one(EventLog).total
        await wait_for(pilot, lambda: screen.feed.events_seen >= 3)
        assert chart.redraws == redraws and screen.query_one(EventLog).total == total
        await pilot.press("p")
        await wait_for(pilot, lambda: screen.ended)
        assert screen.query_one(EventLog).total == 3


async def test_cancel_asks_then_cancels(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", [("running", [event(1)], [])] * 10_000))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"), interval=0.05)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.status == "running")
        await pilot.press("c")
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("y")
        await wait_for(pilot, lambda: faulty_backend.count("/cancel") == 1)
        # the scripted job does not stop, so the feed keeps running; quitting asks first
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("y")
    assert app.return_code == 0


@pytest.mark.parametrize("end, options, code", [
    ("paused", {}, 6), ("running", {"poll_timeout": 0.3}, 4), ("failed", {}, 1), ("succeeded", {}, 0)])
async def test_the_dashboard_exits_as_the_headless_command_does(faulty_backend, end, options, code):
    # docs/compatibility.md: paused ends the watch (6), a poll timeout is 4, as headless.
    faulty_backend.add_job(ScriptedJob("job_a", [*training_timeline(steps=2)[:3], (end, [event(40)], [])]))
    session = LaunchSession(LaunchOptions(backend=faulty_backend.url, poll_interval=0.02, **options),
                            shell={"SYNTH_API_KEY": faulty_backend.api_key})
    session.resolve()
    app = SynthTuiApp(session, attach=JobContext("job_a"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended)
        if end == "paused":
            text = str(screen.query_one("#dash-final-text").render())
            assert "is paused on the backend: it keeps its state there" in text and "synth-tui attach job_a" in text
        await pilot.press("q")
    assert app.return_value == code  # run_app exits with this


async def test_a_backend_that_dies_mid_watch_ends_the_dashboard_with_exit_5(faulty_backend):
    """As headless: silent for --give-up-after, the watch stops with exit 5 and the way back in."""
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline(steps=200)))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"), give_up_after=0.5)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.query_one(EventLog).total > 0, what="the first events")
        faulty_backend.stop()
        await wait_for(pilot, lambda: screen.ended, what="the watch to give up")
        text = str(screen.query_one("#dash-final-text").render())
        assert "has not answered for" in text and "synth-tui attach job_a" in text
        assert isinstance(app.screen, ErrorDialog)
        await pilot.press("escape")
        await pilot.press("q")
    assert app.return_value == ExitCode.BACKEND


async def test_rerun_submits_the_same_payload_with_a_new_key(faulty_backend):
    faulty_backend.create_job_template = training_timeline(steps=2)
    faulty_backend.add_job(ScriptedJob("job_old", training_timeline(steps=2)))
    payload = {"job_type": "rl", "data": {"model": "x"}}
    RunHistory().record_submission(job_id="job_old", backend=faulty_backend.url + "/api", config_path=None,
                                   payload=payload, idempotency_key="old-key")
    app = make_dashboard_app(faulty_backend, JobContext("job_old"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended)
        await pilot.press("r")
        await pilot.press("y")
        await wait_for_screen(pilot, DashboardScreen, where=lambda screen: screen.job.job_id != "job_old")
        new_id = app.screen.job.job_id
        # The run it repeats is drawn beside it, dimmed, named in the legend.
        grid = app.screen.query_one(MetricsGrid)
        assert [run.job_id for run in grid.overlays] == ["job_old"]
        await wait_for(pilot, lambda: bool(grid.charts) and "old train" in grid.charts[0].legend())
    creates = [r for r in faulty_backend.requests if r[0] == "POST" and r[1] == "/api/rl/jobs"]
    assert len(creates) == 1 and creates[0][3] == payload
    assert creates[0][2]["Idempotency-Key"] != "old-key"
    record = RunHistory().get(new_id)
    assert record.rerun_of == "job_old" and record.idempotency_key == creates[0][2]["Idempotency-Key"]
    assert RunHistory().get("job_old") is not None


async def test_a_rerun_keeps_the_chart_settings_the_user_chose(faulty_backend):
    """The walk: a rerun reset what the chart keys had set (m, f, s, z). The new dashboard
    opens with the same chart focused, full size, smoothing and zoom."""
    faulty_backend.create_job_template = training_timeline(steps=2)
    faulty_backend.add_job(ScriptedJob("job_old", training_timeline(steps=2)))
    RunHistory().record_submission(job_id="job_old", backend=faulty_backend.url + "/api", config_path=None,
                                   payload={"job_type": "rl", "data": {"model": "x"}}, idempotency_key="old-key")
    app = make_dashboard_app(faulty_backend, JobContext("job_old"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended and len(screen.query_one(MetricsGrid).charts) > 1)
        await pilot.press("m", "f", "s", "z")
        old = screen.query_one(MetricsGrid)
        await wait_for(pilot, lambda: old.full and old.zoomed and old.smoothing != "none", what="the keys applied")
        chosen = (old.focused_panel, old.smoothing, old.zoomed, old.full)
        assert chosen[0] != old.charts[0].panel.key  # m moved the focus off the first chart
        await pilot.press("r")
        await pilot.press("y")
        new = await wait_for_screen(pilot, DashboardScreen, where=lambda screen: screen.job.job_id != "job_old")
        grid = new.query_one(MetricsGrid)
        await wait_for(pilot, lambda: (grid.focused_panel, grid.smoothing, grid.zoomed, grid.full) == chosen,
                       what="the chart settings kept")
        assert new.has_class("-chart-full")


async def test_the_chart_focus_stays_at_full_size_when_a_dialog_closes(faulty_backend):
    """Full size hides the log, which had the focus: nothing had it then, and when a dialog
    closed Textual gave it to the first chart, which took the chart focus. The chart shown gets
    the focus instead."""
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline(steps=2)))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended and len(screen.query_one(MetricsGrid).charts) > 1)
        grid = screen.query_one(MetricsGrid)
        await pilot.press("m", "f")
        chosen = grid.focused_panel
        assert chosen != grid.charts[0].panel.key
        await wait_for(pilot, lambda: app.focused is grid.chart(chosen), what="the focus on the chart shown")
        await pilot.press("question_mark")
        await wait_for_screen(pilot, HelpDialog)
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen and app.focused is not None, what="the focus back")
        assert grid.focused_panel == chosen and app.focused is grid.chart(chosen)


async def test_keys_typed_after_rerun_wait_for_its_question(faulty_backend, monkeypatch):
    """r reads the payload from the run history in a worker: a y typed before the question is
    shown answers it, and does not go to the dashboard."""
    import app.screens.job_actions as job_actions

    faulty_backend.create_job_template = training_timeline(steps=2)
    faulty_backend.add_job(ScriptedJob("job_old", training_timeline(steps=2)))
    payload = {"job_type": "rl", "data": {"model": "x"}}
    RunHistory().record_submission(job_id="job_old", backend=faulty_backend.url + "/api", config_path=None,
                                   payload=payload, idempotency_key="old-key")
    read_may_finish, read_started = threading.Event(), threading.Event()
    original = job_actions.payload_from_history

    def slow_read(job_id: str):
        read_started.set()
        read_may_finish.wait(timeout=30)
        return original(job_id)

    monkeypatch.setattr(job_actions, "payload_from_history", slow_read)
    app = make_dashboard_app(faulty_backend, JobContext("job_old"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended)
        await pilot.press("r", "y")
        await wait_for(pilot, read_started.is_set, what="the history read")
        assert app.screen is screen  # still reading: no question yet, and y waits
        read_may_finish.set()
        await wait_for_screen(pilot, DashboardScreen, where=lambda screen: screen.job.job_id != "job_old")


async def test_export_holds_exactly_the_events_seen(faulty_backend):
    timeline = training_timeline(steps=3)
    faulty_backend.add_job(ScriptedJob("job_a", timeline))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended)
        await pilot.press("e")
        folder = run_dir("job_a")
        await wait_for(pilot, lambda: any(folder.glob("export-*/metrics.csv")))
    export = next(folder.glob("export-*"))
    seqs = [json.loads(line)["seq"] for line in (export / "events.jsonl").read_text().splitlines()]
    assert seqs == [e["seq"] for _, events, _ in timeline for e in events]
    rows = (export / "metrics.csv").read_text().splitlines()
    assert rows[0] == "name,step,value,ci95_low,ci95_high" and len(rows) == 1 + 6
    assert all(row.endswith(",,") for row in rows[1:])  # these points carry no interval


async def test_backend_restart_shows_reconnecting_and_loses_nothing():
    timeline = training_timeline(steps=40)
    backend = FaultyBackend().start()
    backend.add_job(ScriptedJob("job_a", timeline))
    app = make_dashboard_app(backend, JobContext("job_a"), interval=0.03)
    seen_reconnecting = False
    try:
        async with app.run_test(size=(160, 45)) as pilot:
            screen = dashboard(app)
            await wait_for(pilot, lambda: screen.query_one(EventLog).total >= 5)
            port = backend.port
            backend.stop()
            await wait_for(pilot, lambda: bool(screen.reconnecting))
            seen_reconnecting = "reconnecting" in str(screen.query_one("#dash-header").render())
            threading.Timer(0.1, backend.start_on, args=(port,)).start()
            await wait_for(pilot, lambda: screen.ended)
            log = screen.query_one(EventLog)
            shown = [e.seq for e in log.kept]
    finally:
        backend.stop()
    assert seen_reconnecting
    assert shown == [e["seq"] for _, events, _ in timeline for e in events]


def rank_data(step: int, world: int) -> dict:
    """A data-parallel step's figures (app/local/parallel/policy.py), fixed: rank 1 the slowest,
    so it waits least in the all-reduce."""
    data: dict = {"step": step, "world_size": float(world), "allreduce_s": 0.0121}
    for rank in range(world):
        data[f"rank{rank}_generation_tokens_per_s"] = round(498.7 - 120.4 * (rank % 2) + 3.1 * rank, 2)
        data[f"rank{rank}_allreduce_s"] = 0.0014 if rank % 2 else 0.0228
    return data


def finished_run(world: int = 1) -> FeedBatch:
    """A fixed, finished run: 30 steps whose score climbs, with noise and an error event;
    ``world`` > 1: trained by the lm policy in that many processes (the step events say each
    rank's figures)."""
    events = [JobEvent(seq=1, type="rl.job.created", level="info", message="Job created",
                       created_at="2026-01-01T12:00:00Z"),
              JobEvent(seq=2, type="hatchet.submission.attempt", level="info", message="submitting",
                       created_at="2026-01-01T12:00:01Z")]
    if world > 1:
        events[1] = JobEvent(seq=2, type="rl.train.policy", level="info", message=f"lm in {world} processes",
                             data={"policy": "lm", "stand_in": False, "world_size": world},
                             created_at="2026-01-01T12:00:01Z")
    points = []
    for step in range(1, 31):
        score = round(0.15 + 0.8 * (1 - 0.9 ** step) + (0.03 if step % 3 else -0.02), 4)
        events.append(JobEvent(seq=step + 2, type="rl.train.step", level="info",
                               message=f"Step {step}/30: mean score {score:.3f}",
                               data=rank_data(step, world) if world > 1 else {},
                               created_at=f"2026-01-01T12:00:{step + 1:02d}Z"))
        at = f"2026-01-01T12:00:{step + 1:02d}Z"
        points += [MetricPoint(name="train.mean_score", step=step, value=score, created_at=at),
                   MetricPoint(name="train.loss", step=step, value=round(1.2 - score, 4), created_at=at),
                   MetricPoint(name="train.entropy", step=step, value=round(1.5 * 0.93 ** step, 4), created_at=at)]
        if step % 5 == 0:
            points.append(MetricPoint(name="eval.mean_score", step=step, value=round(score - 0.04, 4), created_at=at))
    events.append(JobEvent(seq=33, type="rl.pipeline.backpressure", level="warning",
                           message="rollout queue is full", created_at="2026-01-01T12:00:32Z"))
    events.append(JobEvent(seq=34, type="rl.job.completed", level="info", message="Job completed",
                           created_at="2026-01-01T12:00:33Z"))
    payload = {"job_id": "job_snapshot", "status": "succeeded", "created_at": "2026-01-01T12:00:00Z",
               "updated_at": "2026-01-01T12:00:33Z"}
    return FeedBatch(events=events, points=points, status=JobStatus.model_validate(payload),
                     ended=WatchEnded("succeeded", payload, "terminal"))


def replay_app(world: int = 1) -> SynthTuiApp:
    session = LaunchSession(LaunchOptions(backend="http://127.0.0.1:8000"), shell={"SYNTH_API_KEY": "sk_fixed_000000"})
    session.resolve()
    config, model = ("configs/rl/lm_press.toml", "./tiny-qwen3") if world > 1 else (
        "configs/rl/demo.toml", "Qwen/Qwen3-0.6B")
    job = JobContext("job_snapshot", None, config, model, replay=finished_run(world))
    return SynthTuiApp(session, attach=job)


def test_snapshot_finished_dashboard_wide(snap_compare):
    assert snap_compare(replay_app(), terminal_size=(160, 45))


def test_snapshot_finished_dashboard_narrow(snap_compare):
    assert snap_compare(replay_app(), terminal_size=(80, 24))


def test_snapshot_finished_data_parallel_dashboard_wide(snap_compare):
    assert snap_compare(replay_app(world=2), terminal_size=(160, 45))


def test_snapshot_finished_data_parallel_dashboard_narrow(snap_compare):
    assert snap_compare(replay_app(world=2), terminal_size=(80, 24))


def earlier_runs() -> list[ComparedRun]:
    """Two earlier runs of the snapshot's job, with hosted-length ids (a rerun of a rerun)."""
    runs = []
    for job_id, offset in (("job_c9d75d0a1b2c3d4e5f60718a", -0.08), ("job_a0c79c5e1d2f3a4b5c6d7e8f", -0.16)):
        run = ComparedRun(job_id)
        run.store.add([p.model_copy(update={"value": round(p.value + offset, 4)}) for p in finished_run().points])
        runs.append(run)
    return runs


async def overlay_earlier_runs(pilot) -> None:
    """As a rerun opens: the dashboard drawn, then the runs it repeats overlaid."""
    await wait_for(pilot, lambda: len(pilot.app.screen.query(MetricsGrid)) == 1
                   and len(pilot.app.screen.query_one(MetricsGrid).charts) == 3, what="the charts")
    pilot.app.screen.query_one(MetricsGrid).set_overlays(earlier_runs())
    await pilot.pause()


def test_snapshot_rerun_with_two_earlier_runs_narrow(snap_compare):
    """At 80x24 each chart's legend names both earlier runs by their ids (c9d75d…, a0c79c…)."""
    assert snap_compare(replay_app(), terminal_size=(80, 24), run_before=overlay_earlier_runs)


async def test_at_80x24_a_rerun_of_a_rerun_names_both_earlier_runs_in_every_legend():
    app = replay_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await overlay_earlier_runs(pilot)
        grid = app.screen.query_one(MetricsGrid)
        await wait_for(pilot, lambda: all("c9d75d…" in str(c.border_title) for c in grid.charts), what="legends")
        # The charts shown: one that does not fit whole at 80x24 is hidden (MetricsGrid._whole_text_rows).
        await wait_for(pilot, lambda: any(not c.has_class("-hidden") and c.size.width for c in grid.charts),
                       what="a chart shown")
        for chart in [c for c in grid.charts if not c.has_class("-hidden")]:
            legend = Content.from_markup(str(chart.border_title)).plain
            assert "c9d75d…" in legend and "a0c79c…" in legend and len(legend) <= chart.size.width - 4, legend


@pytest.mark.parametrize("size", [(160, 45), (80, 24)])
async def test_a_data_parallel_job_shows_each_ranks_figures_under_the_header(size):
    """The line under the header follows the latest step: every rank's generation tokens/s
    and all-reduce time, named by rank; at 80 columns in a shorter wording, still one line."""
    app = replay_app(world=2)
    async with app.run_test(size=size) as pilot:
        line = app.screen.query_one("#dash-ranks", RankLine)
        await wait_for(pilot, lambda: line.display and line.size.width > 0, what="the ranks line")
        await pilot.pause()
        text = str(line.render())
        assert "step 30" in text and "r0 499" in text and "r1 381" in text, text
        # Seconds, as the `all-reduce s` chart's readouts (one name and unit).
        assert "all-reduce s" in text and "0.0228" in text, text
        assert len(text) <= size[0] - 2 and line.size.height == 1
        if size[0] == 160:
            assert "sampled tokens/s" in text and "r1 0.0014" in text and "mean 0.0121" in text, text
        header = str(app.screen.query_one("#dash-header").render())
        assert "lm × 2" in header, header
        # The next step's figures replace them: four ranks now, rank 3 the slowest.
        data = rank_data(31, 4) | {"rank3_generation_tokens_per_s": 12.5, "rank3_allreduce_s": 0.0005}
        app.screen._apply(FeedBatch(events=[JobEvent(seq=40, type="rl.train.step", message="Step 31", data=data)]))
        await pilot.pause()
        text = str(line.render())
        assert "step 31" in text and ("r3 12.5" in text or "(slowest r3)" in text), text
        assert len(text) <= size[0] - 2


@pytest.mark.parametrize("size", [(160, 45), (80, 24)])
async def test_a_saved_runs_header_is_drawn_in_the_dashboards_first_frame(monkeypatch, size):
    """A saved run's header was blank for its first frames: on_mount's batch left it to
    on_resize's after-refresh redraw (the test above then read it blank under load). The
    first frame draws it, in the form the terminal's width calls for (one line at 160)."""
    firsts: list[str] = []
    display = SynthTuiApp._display

    def record(app: SynthTuiApp, screen, renderable) -> None:
        if renderable is not None and not firsts and isinstance(screen, DashboardScreen) and screen.is_mounted:
            firsts.append(str(screen.query_one("#dash-header").render()))
        display(app, screen, renderable)

    monkeypatch.setattr(SynthTuiApp, "_display", record)
    app = replay_app(world=2)
    async with app.run_test(size=size) as pilot:
        header = app.screen.query_one("#dash-header")
        await wait_for(pilot, lambda: bool(firsts) and header.size.width > 0, what="the first frame")
        await pilot.pause()
        settled = str(header.render())
        assert firsts == [settled] and "lm × 2" in settled, (firsts, settled)
        if size[0] == 160:
            assert "\n" not in settled


async def test_a_job_in_one_process_has_no_ranks_line():
    app = replay_app()
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: app.screen.query_one(MetricsGrid).charts, what="the charts")
        app.screen._apply(FeedBatch(events=[JobEvent(seq=40, type="rl.train.step", message="Step 31",
                                                     data={"step": 31, "world_size": 1.0})]))
        await pilot.pause()
        assert not app.screen.query_one("#dash-ranks", RankLine).display


async def test_log_follows_the_tail_until_the_user_scrolls_up():
    app = replay_app()
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        log = app.screen.query_one(EventLog)
        # Laid out and overflowing (before layout a zero-height log is "at the end" too, and
        # the first layout's rewrap scrolls it there again).
        await wait_for(pilot, lambda: log.log_view.max_scroll_y > 0 and log.log_view.is_vertical_scroll_end)
        log.log_view.scroll_home(animate=False)
        await pilot.pause()
        assert not log.tailing
        log.add_events([JobEvent(seq=100 + i, type="rl.train.step", message="late") for i in range(3)])
        assert log.new_while_away == 3
        assert "3 new" in str(log.query_one("#log-status").render())
        await pilot.press("end")
        await wait_for(pilot, lambda: log.log_view.is_vertical_scroll_end)
        assert log.tailing and log.new_while_away == 0


async def test_a_quit_question_asked_during_a_rerun_is_not_swept_away(faulty_backend):
    """The rerun's new dashboard waits for the open dialog: No keeps the app and then shows
    the new job; the question is never replaced unanswered."""
    faulty_backend.create_job_template = training_timeline(steps=2)
    faulty_backend.add_job(ScriptedJob("job_old", [("running", [event(1)], [])] * 10_000))
    RunHistory().record_submission(job_id="job_old", backend=faulty_backend.url + "/api", config_path=None,
                                   payload={"job_type": "rl", "data": {"model": "x"}}, idempotency_key="k")
    app = make_dashboard_app(faulty_backend, JobContext("job_old"), interval=0.05)
    faulty_backend.inject("create", "hold")
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.query_one(EventLog).total >= 1)
        await pilot.press("r", "y")
        await wait_for(pilot, lambda: faulty_backend.count("/rl/jobs", "POST") == 1, what="the held create")
        await pilot.press("q")
        assert isinstance(app.screen, ConfirmDialog)
        faulty_backend.release.set()
        await wait_for(pilot, lambda: len(RunHistory().list()) == 2, what="the rerun recorded")
        await pilot.pause(0.3)  # one more turn of the rerun worker: it must keep waiting
        assert isinstance(app.screen, ConfirmDialog), "the quit question is still there"
        await pilot.press("n")
        await wait_for_screen(pilot, DashboardScreen, where=lambda screen: screen.job.job_id != "job_old")


async def test_a_stopped_watch_says_so_in_the_header_and_stops_the_clock(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline(steps=200)))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"), give_up_after=0.5)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.query_one(EventLog).total > 0, what="the first events")
        faulty_backend.stop()
        await wait_for(pilot, lambda: screen.ended, what="the watch to give up")
        header = str(screen.query_one("#dash-header").render())
        assert "not watched any more" in header and "reconnecting" not in header
        assert screen.finished_after is not None
        # At 80x24 the way back in is the first line of the end panel.
        assert str(screen.query_one("#dash-final-text").render()).splitlines()[0].startswith("Attach again with")


@pytest.mark.parametrize("size", [(160, 45), (80, 24)])
async def test_the_header_keeps_every_fact_with_a_filter_on(faulty_backend, size):
    faulty_backend.add_job(ScriptedJob("job_0123456789abcdef01234567", training_timeline(steps=2)))
    job = JobContext("job_0123456789abcdef01234567", config_path="configs/rl/demo.toml", model="Qwen/Qwen3-0.6B")
    app = make_dashboard_app(faulty_backend, job)
    async with app.run_test(size=size) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended)
        await pilot.press("slash")
        type_ahead(app, *"step", "enter")  # as a terminal sends it: no frame per key
        header = screen.query_one("#dash-header")
        await wait_for(pilot, lambda: "filter “step”" in str(header.render()), what="the filter in the header")
        await pilot.pause()
        text = str(header.render())
        for fact in ("job_0123456789abcdef01234567", "succeeded", "demo.toml", "Qwen/Qwen3-0.6B", "filter “step”"):
            assert fact in text, (fact, text)
        assert all(len(line) <= size[0] - 2 for line in text.splitlines())


async def test_ctrl_c_asks_to_quit_like_ctrl_q_and_ends_as_an_interrupt(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", [("running", [event(1)], [])] * 10_000))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"), interval=0.05)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("ctrl+c")
        await wait_for_screen(pilot, ConfirmDialog, "the quit question")
        await pilot.press("y")
    assert app.return_value == ExitCode.INTERRUPTED  # tests/tui/test_interrupt.py: every screen


async def test_the_charts_run_to_the_jobs_planned_steps():
    """From the payload's config (num_epochs × iterations_per_epoch), or, for an attach that
    has no payload, from a step event's total_steps."""
    session = LaunchSession(LaunchOptions(backend="http://127.0.0.1:8000"), shell={"SYNTH_API_KEY": "sk_fixed_000000"})
    session.resolve()
    points = [MetricPoint(name="train.mean_score", step=step, value=step / 10) for step in range(1, 5)]
    payload = {"job_type": "rl", "data": {"config": {"training": {"num_epochs": 2, "iterations_per_epoch": 8}}}}
    app = SynthTuiApp(session, attach=JobContext("job_plan", payload, replay=FeedBatch(points=points)))
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        assert app.screen.query_one(MetricsGrid).planned_steps == 16
    step = JobEvent(seq=1, type="rl.train.step", message="Step 4/20", data={"step": 4, "total_steps": 20})
    app = SynthTuiApp(session, attach=JobContext("job_plan", replay=FeedBatch(events=[step], points=points)))
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        assert app.screen.query_one(MetricsGrid).planned_steps == 20


async def test_every_footer_key_shows_whole_at_80x24():
    """The newcomer's walk: at 80 columns the dashboard's last keys fell off the edge."""
    app = replay_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "? Help" in footer_text(app), what="? Help in the footer")
        await wait_for(pilot, lambda: not footer_keys_missing(app), what="every key in the footer")
        assert "i Rollouts" in footer_text(app) and "^p Commands" in footer_text(app)


async def _open_help(pilot) -> tuple[HelpDialog, list[tuple[str, ...]]]:
    """`?` pressed: the help dialog and its rows (key, what it does)."""
    await pilot.press("question_mark")
    help_screen = await wait_for_screen(pilot, HelpDialog)
    table = help_screen.query_one(DataTable)
    return help_screen, [tuple(map(str, table.get_row_at(i))) for i in range(table.row_count)]


async def test_p_says_it_freezes_the_view_not_the_job(faulty_backend):
    """The walk: `p` read "Pause", but the job goes on: only the view stops. The footer, the
    help and the header say so."""
    faulty_backend.add_job(ScriptedJob("job_a", [("running", [event(1)], [])] * 10_000))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"), interval=0.05)
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: "p Freeze view" in footer_text(app), what="p in the footer")
        assert "Pause" not in footer_text(app)
        _, rows = await _open_help(pilot)
        assert ("p", "Freeze view") in rows and not any("Pause" in row[1] for row in rows)


async def test_every_help_line_is_whole_at_80x24():
    """The walk: at 80 columns the help cut `M  Previous chart (not in the footer below 110…`.
    A spare key's row is marked `*`, and the note under the rows says once what that means;
    no row is wider than the table (nothing cut, nothing to scroll sideways)."""
    app = replay_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "? Help" in footer_text(app), what="? Help in the footer")
        help_screen, rows = await _open_help(pilot)
        table = help_screen.query_one(DataTable)
        await pilot.pause()
        assert table.virtual_size.width <= table.scrollable_content_region.width, (
            table.virtual_size.width, table.scrollable_content_region.width)
        assert ("M", "Previous chart *") in rows and ("end", "Follow log *") in rows
        detail = str(help_screen.query_one("#dialog-detail").render())
        assert detail.startswith("* not in the footer below 110 columns\n")
        body = help_screen.query_one("#dialog-body")
        assert table.region.bottom <= body.region.bottom <= 24


async def test_the_dashboards_help_lists_quit_once():
    """The walk (on the picker; the dashboard's help did the same): `q Quit` and `^q Quit`."""
    app = replay_app()
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: "q Quit" in footer_text(app), what="q Quit in the footer")
        _, rows = await _open_help(pilot)
        assert [row for row in rows if row[1] == "Quit"] == [("q", "Quit")]


async def test_the_help_key_is_in_the_footer_and_help_lists_end_and_its_last_row_at_80x24():
    """Two tests once, on the same app at 80x24: `? Help` in the footer, then the help itself."""
    app = replay_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "Commands" in footer_text(app), what="the footer")
        # The footer is filled after the screen is: wait for what it reads.
        await wait_for(pilot, lambda: "? Help" in footer_text(app), what="? Help in the footer")
        help_screen, rows = await _open_help(pilot)
        table = help_screen.query_one(DataTable)
        assert ("end", "Follow log *") in rows  # its mark: test_every_help_line_is_whole_at_80x24
        body = help_screen.query_one("#dialog-body")
        assert table.region.bottom <= body.region.bottom <= 24  # the table ends inside the dialog
        last = table.row_count - 1
        table.move_cursor(row=last)  # as the down arrow held would
        # The last row is shown: the header row plus the rows scrolled to fit the table's box.
        await wait_for(pilot, lambda: table.scroll_y >= last + 1 - (table.scrollable_content_region.height - 1),
                       what="the last row in view")
        assert table.scroll_y <= table.max_scroll_y


async def test_q_on_a_dashboard_that_is_the_first_screen_asks_then_quits(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", [("running", [event(1)], [])] * 10_000))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"), interval=0.05)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "q Quit" in footer_text(app), what="q Quit in the footer")
        assert "q Back" not in footer_text(app)
        await pilot.press("q")
        await wait_for_screen(pilot, ConfirmDialog, "the quit question")
        await pilot.press("y")
    assert app.return_value == 0


async def test_ctrl_q_over_the_inspector_asks_while_the_job_runs(faulty_backend):
    """The quit question belongs to the dashboard's job: a screen pushed over it asks it."""
    faulty_backend.add_job(ScriptedJob("job_a", [("running", [event(1)], [])] * 10_000))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"), interval=0.05)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.press("i")
        await wait_for_screen(pilot, RolloutsScreen, "the inspector")
        await pilot.press("ctrl+q")
        await wait_for_screen(pilot, ConfirmDialog, "the quit question")
        await pilot.press("y")
    assert app.return_value == 0


async def test_a_success_with_a_warning_level_completion_says_so(faulty_backend):
    """A job that succeeded but got worse (or learned nothing): the end notice and the final
    panel carry the completion event's warning, not a plain "succeeded"."""
    said = "Training finished after 2 steps, but the policy GOT WORSE: its final eval mean score 0.110 is below"
    timeline = training_timeline(steps=2)
    timeline[-1] = ("succeeded", [event(40, "rl.job.completed", "warning", said)], [])
    faulty_backend.add_job(ScriptedJob("job_a", timeline))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"))
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: any("GOT WORSE" in str(n.message) for n in notifications(app)))
        notice = next(n for n in notifications(app) if "GOT WORSE" in str(n.message))
        assert notice.severity == "warning" and notice.title == "Job finished with a warning"
        assert isinstance(app.screen, DashboardScreen) and app.screen.completion_warning == said
        assert said in str(app.screen.query_one("#dash-final-text").render())


async def test_only_a_job_seen_running_here_notifies_and_rings(faulty_backend, monkeypatch):
    """Attaching to a job that had already ended: the panel says how it ended, but no "Job
    finished" toast (it would outlive the dashboard) and no bell. A job seen running does both."""
    rings: list[str] = []
    monkeypatch.setattr(SynthTuiApp, "bell", lambda self: rings.append(self.screen.__class__.__name__))
    done = faulty_backend.add_job(ScriptedJob("job_done", training_timeline(steps=2)))
    done.tick = len(done.timeline)  # finished before this dashboard opened
    app = make_dashboard_app(faulty_backend, JobContext("job_done"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended)
        await pilot.pause()
        assert "Final status: succeeded" in str(screen.query_one("#dash-final-text").render())
        assert not any(n.title == "Job finished" for n in notifications(app)) and rings == []
    faulty_backend.add_job(ScriptedJob("job_live", training_timeline(steps=2)))
    app = make_dashboard_app(faulty_backend, JobContext("job_live"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended)
        await wait_for(pilot, lambda: any(n.title == "Job finished" for n in notifications(app)))
        assert rings == ["DashboardScreen"]


@pytest.mark.parametrize(("data", "shown", "hidden"), [
    ({"policy": "tabular", "label": "tabular stand-in", "stand_in": True}, "⚠ tabular stand-in", "lm Qwen"),
    ({"policy": "lm", "label": "lm Qwen/Qwen3-0.6B", "stand_in": False}, "lm Qwen/Qwen3-0.6B", "stand-in"),
])
async def test_the_header_says_which_policy_trains(data, shown, hidden):
    """The embedded backend's policy event names what trains: the model itself (lm) or the
    stand-in in its place; the header says it beside the model."""
    run = finished_run()
    run.events.insert(1, JobEvent(seq=2, type="rl.train.policy", level="info", message="policy", data=data,
                                  created_at="2026-01-01T12:00:01Z"))
    session = LaunchSession(LaunchOptions(backend="http://127.0.0.1:8000"), shell={"SYNTH_API_KEY": "sk_fixed_000000"})
    session.resolve()
    app = SynthTuiApp(session, attach=JobContext("job_snapshot", None, "configs/rl/demo.toml", "Qwen/Qwen3-0.6B",
                                                 replay=run))
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.policy is not None
                       and "backend" in str(app.screen.query_one("JobHeader").render()))  # the wide form
        header = str(app.screen.query_one("JobHeader").render())
        assert shown in header and hidden not in header
        await pilot.resize_terminal(80, 24)
        await wait_for(pilot, lambda: "backend" not in str(app.screen.query_one("JobHeader").render()))
        assert ("⚠ stand-in" if data["stand_in"] else shown) in str(app.screen.query_one("JobHeader").render())


async def test_a_queued_job_shows_its_place_in_the_header_as_it_moves(faulty_backend):
    job = ScriptedJob("job_q", [("queued", [event(1, "rl.job.queued", message="Waiting for a slot")], [])],
                      queue_positions=[2])
    faulty_backend.add_job(job)
    app = make_dashboard_app(faulty_backend, JobContext("job_q"))

    def header() -> str:
        return str(app.screen.query_one("#dash-header").render())

    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: "queued #2" in header(), what="the header saying queued #2")
        assert screen.queue_position == 2
        job.queue_positions = [1]  # the job ahead started
        await wait_for(pilot, lambda: "queued #1" in header(), what="the header saying queued #1")
        job.timeline = [*job.timeline, ("running", [], []), ("succeeded", [event(2, "rl.job.completed")], [])]
        job.queue_positions = [1, None, None]
        await wait_for(pilot, lambda: screen.ended, what="the job's end")
        assert "#" not in header().split("succeeded")[0].split("job_q")[1]
        assert screen.queue_position is None


async def test_a_queued_job_at_80x24_keeps_its_place_in_the_header(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_q", [("queued", [], [])], queue_positions=[12]))
    app = make_dashboard_app(faulty_backend, JobContext("job_q"))
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: "queued #12" in str(app.screen.query_one("#dash-header").render()),
                       what="the header saying queued #12")


async def test_help_shows_every_dashboard_key_before_the_generic_ones_at_160x45():
    """Issue 37: z, M, n and end fell below the help's fold, after Textual's generic keys."""
    app = replay_app()
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: "Commands" in footer_text(app), what="the footer")
        await pilot.press("question_mark")
        help_screen = await wait_for_screen(pilot, HelpDialog)
        table = help_screen.query_one(DataTable)
        rows = [tuple(map(str, table.get_row_at(i))) for i in range(table.row_count)]
        keys = [key for key, _ in rows]
        # (A saved run has ended: no p, no c. ^q is q's Quit, listed once: test_the_dashboards_help_lists_quit_once.)
        assert keys[:14] == ["q", "r", "/", "m", "M", "f", "s", "z", "o", "i", "n", "e", "end", "esc"]
        assert ("end", "Follow log") in rows and "super+c" not in keys
        # Shown without scrolling: every one of them inside the table's box.
        await pilot.pause()
        assert table.scrollable_content_region.height - 1 >= 15  # the header row, then the rows


async def test_every_dashboard_action_is_in_the_palette_and_p_on_an_ended_job_pauses_nothing(faulty_backend):
    """Two tests once, on the same job and app: the palette as the dashboard opens (was
    test_every_dashboard_action_is_in_the_palette), then p once the job has ended."""
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline(steps=2)))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        in_palette = {command.action for command in palette_commands(screen)}
        # Quit is the palette's own command; back is q or esc on a dashboard opened from a list.
        # Resume is offered while the view is frozen, grid while a chart is full size (p's and f's
        # other faces: test_a_two_faced_key_says_what_it_does_now).
        leave = ("quit_dashboard", "back", "app.quit", "app.help", "resume", "grid")
        keyed = {b.action for b in screen.BINDINGS if b.action not in leave}
        assert keyed <= in_palette, keyed - in_palette
        for action in in_palette:
            assert callable(getattr(screen, f"action_{action}"))
        titles = {command.title: command.help for command in palette_commands(screen)}
        # The key comes from the binding, after the help: never typed twice.
        assert titles["Cancel job"] == "Cancel the job on the backend (asks first) (c)"
        assert titles["Filter events"].endswith("(/)")

        await wait_for(pilot, lambda: screen.ended)
        await wait_for(pilot, lambda: "p Freeze view" not in footer_text(app), what="p gone from the footer")
        await pilot.press("p")
        await pilot.pause()
        assert not screen.paused
        assert "paused" not in str(screen.query_one("#dash-header").render())


@pytest.mark.parametrize("size", [(80, 24), (160, 45)])
async def test_a_long_step_shows_its_rollouts_done_before_its_metrics(faulty_backend, size):
    """Issue 37: a real model on a CPU took minutes for its first step, and the charts said only
    `waiting for metrics…`; the embedded backend's progress events say how far the step is."""
    progress = event(2, "rl.train.rollouts", message="Step 1: 4/16 rollouts done",
                     step=1, phase="train", done=4, total=16)
    job = ScriptedJob("job_slow", [("running", [event(1, "rl.train.started", message="started")], []),
                                   ("running", [progress], [])])
    faulty_backend.add_job(job)
    app = make_dashboard_app(faulty_backend, JobContext("job_slow"))

    def status() -> str:
        return str(app.screen.query_one("#grid-status").render())

    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: "step 1: 4/16 rollouts done" in status(), what="the step's progress")
        assert status().startswith("waiting for metrics… · step 1: 4/16 rollouts done")
        job.timeline = [*job.timeline, ("running", [event(3, "rl.train.step", message="Step 1/2", step=1)],
                                        [metric("train.mean_score", 1, 0.5)])]
        await wait_for(pilot, lambda: "rollouts done" not in status(), what="the progress gone with the step")


async def test_an_evaluations_interval_shows_in_the_readouts_the_final_panel_and_the_export(faulty_backend):
    """The step-0 evaluation and the last one, each with its 95 % interval (ci95, as the embedded
    backend sends it): the chart reads `±` the half-width, the final panel says the change from
    step 0 with its interval, the export carries both ends."""
    timeline = training_timeline(steps=3)
    timeline[2][2].append({"name": "eval.mean_score", "step": 0, "value": 0.25, "phase": "eval",
                           "data": {"n": 16, "ci95": [0.1, 0.4], "ci_method": "wilson"}})
    timeline[-2][2].append({"name": "eval.mean_score", "step": 2, "value": 0.75, "phase": "eval",
                            "data": {"n": 16, "ci95": [0.6, 0.9], "ci_method": "wilson"}})
    faulty_backend.add_job(ScriptedJob("job_a", timeline))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended)
        final = str(screen.query_one("#dash-final-text").render())
        # MOVER: 0.5 -/+ hypot(0.15, 0.15) = 0.2121
        assert final.splitlines()[:2] == ["Final status: succeeded", "eval 0.25 -> 0.75, +0.50 +/- 0.21"]
        # What the charts' readout and sparkline rows say (a toast may cover part of the screen).
        def chart_rows() -> str:
            return "\n".join(str(row.render()) for row in screen.query(".chart-lines, .chart-readouts"))

        await wait_for(pilot, lambda: "0.7500 ±0.1500" in chart_rows(), what="the eval readout with its interval")
        await pilot.press("e")
        folder = run_dir("job_a")
        await wait_for(pilot, lambda: any(folder.glob("export-*/metrics.csv")))
    rows = (next(folder.glob("export-*")) / "metrics.csv").read_text().splitlines()
    assert "eval.mean_score,0,0.25,0.1,0.4" in rows and "eval.mean_score,2,0.75,0.6,0.9" in rows


async def test_c_cancel_leaves_the_footer_once_the_job_has_ended(faulty_backend):
    """The walk: the footer still offered `c Cancel` after the job had ended."""
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline(steps=2)))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: "c Cancel" in footer_text(app) or screen.ended, what="the footer")
        await wait_for(pilot, lambda: screen.ended, what="the job's end")
        await wait_for(pilot, lambda: "r Rerun" in footer_text(app) and "c Cancel" not in footer_text(app),
                       what="c gone from the footer after the end")
        _, rows = await _open_help(pilot)
        assert not any(key == "c" for key, *_ in rows)


@pytest.mark.parametrize("size", [(160, 45), (80, 24)])
async def test_the_footer_and_the_help_agree_on_the_keys_shown(size):
    """The walk: at 160 columns the footer left out n, e, M and end, which the help listed.
    From 110 columns the footer shows every key of the help's; below, the help says which not."""
    app = replay_app()
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: "? Help" in footer_text(app), what="? Help in the footer")
        await wait_for(pilot, lambda: not footer_keys_missing(app), what="every key in the footer")
        spare = ["M Previous chart", "n Noise", "e Export", "end Follow log"]
        _, rows = await _open_help(pilot)
        marked = [f"{key} {action.removesuffix(' *')}" for key, action in rows if action.endswith(" *")]
        if size[0] >= 110:
            assert all(key in footer_text(app) for key in spare) and not marked
        else:
            assert marked == spare and not any(key in footer_text(app) for key in spare)


async def test_at_80x24_an_ended_reruns_charts_keep_their_data_rows():
    """The walk: at 80x24, once the end panel showed, the loss chart kept its title rule but
    lost its data row (and a rerun its overlay's row). A chart shown shows every row."""
    app = replay_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: len(app.screen.query_one(MetricsGrid).charts) == 3, what="the charts")
        grid = app.screen.query_one(MetricsGrid)
        grid.set_overlays(earlier_runs()[:1])

        def rows_of(label: str) -> int:
            return sum(line.lstrip().startswith(label) for line in screen_lines(app))

        def whole() -> bool:
            shown = [chart for chart in grid.charts if not chart.has_class("-hidden")]
            return rows_of("━ c9d75d… train") == len(shown) and rows_of("━ train") == len(shown)

        await wait_for(pilot, lambda: whole() and rows_of("━ c9d75d… train") >= 2,
                       what="the mean score and loss charts whole, their overlay's rows too")
        assert rows_of("┅ c9d75d… eval") == 1  # the mean score's eval overlay


async def test_at_80x24_a_toast_never_covers_the_footers_two_rows():
    """The walk: at 80x24 toasts sat over the footer's second row, and their blank padding rows
    over the screen's text."""
    app = replay_app()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_for(pilot, lambda: "? Help" in footer_text(app), what="? Help in the footer")
        footer = app.screen.query_one(SteadyFooter)
        await wait_for(pilot, lambda: footer.region.height == 2, what="a footer of two rows")
        app.notify("Exported to /tmp/somewhere", title="Export")
        await wait_for(pilot, lambda: any(t.region.height for t in app.screen.query("Toast")), what="the toast")
        for toast in app.screen.query("Toast"):
            assert not toast.region.overlaps(footer.region), (toast.region, footer.region)
            assert toast.region.height == 2  # its title and its line, no blank rows around them


async def test_at_80x24_a_dialogs_toasts_stand_where_the_dashboards_do():
    """The walk: with a dialog open, a toast showed twice, its title line repeated, the dialog's
    copy a row lower over the footer: Textual draws the dimmed dashboard's toasts and the dialog's
    own, each screen's rack where its CSS puts it. The dialog's rack stands as the dashboard's."""
    from app.screens.dialogs.common import ConfirmDialog

    app = replay_app()
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await wait_for(pilot, lambda: "? Help" in footer_text(app), what="? Help in the footer")
        dashboard = app.screen
        footer = dashboard.query_one(SteadyFooter)
        await wait_for(pilot, lambda: footer.region.height == 2, what="a footer of two rows")
        app.notify("Exported to /tmp/somewhere", title="Export")
        await wait_for(pilot, lambda: any(t.region.height for t in dashboard.query("Toast")), what="the toast")
        app.push_screen(ConfirmDialog("Cancel job?", confirm_label="Cancel"))
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmDialog)
                       and any(t.region.height for t in app.screen.query("Toast")), what="the dialog's toast")
        under = [t.region for t in dashboard.query("Toast")]
        over = [t.region for t in app.screen.query("Toast")]
        assert over == under
        assert not any(region.overlaps(footer.region) for region in over)


@pytest.mark.parametrize("size", [(160, 45), (80, 24)])
async def test_the_logs_status_line_is_whole_while_filtering(size):
    """The walk: with a filter typed, the log's first line (the filter, the counts) ran past the
    pane's edge and was cut. Whole parts leave from its end instead; the filter stays."""
    app = replay_app()
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: "? Help" in footer_text(app), what="the footer")
        await pilot.press("slash")
        type_ahead(app, *"step")
        log = app.screen.query_one(EventLog)
        await wait_for(pilot, lambda: log.filter_text == "step", what="the filter typed")
        status = log.query_one("#log-status")

        def drawn() -> str:
            return screen_lines(app)[status.region.y][status.region.x:status.region.right].rstrip()

        await wait_for(pilot, lambda: drawn().startswith("filter 'step'"), what="the status line")
        await pilot.pause()
        assert drawn() == str(status.render()).rstrip(), (drawn(), str(status.render()))
        assert len(str(status.render()).rstrip()) <= status.region.width
        # Under it, events still show: the grid gave back the rows the filter field took.
        await wait_for(pilot, lambda: sum("rl.train.step" in line for line in screen_lines(app)) >= 2,
                       what="two step events under the status line")


@pytest.mark.parametrize("size", [(160, 45), (80, 24)])
async def test_the_logs_status_counts_the_matches_while_filtering(size):
    """The walk: with a filter on, the log's status line still counted every event. It says
    how many match, of how many ("12 of 340 events match"), and every event again once cleared."""
    app = replay_app()
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: "? Help" in footer_text(app), what="the footer")
        log = app.screen.query_one(EventLog)
        status = log.query_one("#log-status")
        await wait_for(pilot, lambda: f"{log.total} events" in str(status.render()), what="the count of events")
        await pilot.press("slash")
        type_ahead(app, *"step")
        await wait_for(pilot, lambda: log.filter_text == "step", what="the filter typed")
        assert 0 < log.shown < log.total
        matches = f"{log.shown} of {log.total} events match"
        await wait_for(pilot, lambda: matches in screen_lines(app)[status.region.y], what="the matches drawn")
        # Events that arrive while it is on are counted as they come: one more match, one not.
        before, total = log.matching, log.total
        log.add_events([JobEvent(seq=10_001, type="rl.train.step", level="info", message="Step 99: late"),
                        JobEvent(seq=10_002, type="rl.job.note", level="info", message="not a match")])
        assert (log.matching, log.total) == (before + 1, total + 2) and log.matching == log.shown
        assert f"{before + 1} of {total + 2} events match" in str(status.render())
        await pilot.press("escape")
        await wait_for(pilot, lambda: str(status.render()).startswith(f"{log.total} events"),
                       what="every event counted again")


@pytest.mark.parametrize("key, label, other_label, state", [
    ("p", "Freeze view", "Resume view", lambda screen: screen.paused),
    ("f", "Full size", "Grid", lambda screen: screen.query_one(MetricsGrid).full),
], ids=["p-resume-view", "f-grid"])
async def test_a_two_faced_key_says_what_it_does_now(faulty_backend, key, label, other_label, state):
    """The walk: `p Freeze view` stayed in the footer while the view was frozen, and `f Full size`
    while a chart was full size (the subtitle said `f grid`). The footer and the help name the
    key's other face while it applies."""
    faulty_backend.add_job(ScriptedJob("job_a", [("running", [event(1)], [])] * 10_000))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"), interval=0.05)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: f"{key} {label}" in footer_text(app), what=f"{key} in the footer")
        await pilot.press(key)
        await wait_for(pilot, lambda: f"{key} {other_label}" in footer_text(app), what=f"{key} {other_label}")
        assert state(screen) and label not in footer_text(app)
        _, rows = await _open_help(pilot)
        assert (key, other_label) in rows and (key, label) not in rows
        await pilot.press("escape")
        await wait_for_screen(pilot, DashboardScreen)
        await pilot.press(key)
        await wait_for(pilot, lambda: f"{key} {label}" in footer_text(app), what=f"{key} {label} again")
        assert not state(screen)


async def rerun_grid(app, pilot) -> MetricsGrid:
    """A rerun's dashboard, earlier runs overlaid, switched in over the first (as `r` does): its grid."""
    await wait_for(pilot, lambda: "? Help" in footer_text(app), what="the footer")
    rerun = DashboardScreen(JobContext("job_rerun", replay=finished_run()), overlays=earlier_runs())
    app.switch_screen(rerun)
    await wait_for(pilot, lambda: app.screen is rerun and len(rerun.query(MetricsGrid)) == 1
                   and len(rerun.query_one(MetricsGrid).charts) == 3, what="the rerun's charts")
    return rerun.query_one(MetricsGrid)


async def test_at_80x24_a_reruns_dashboard_leaves_the_log_its_rows():
    """The walk: the rerun's dashboard (switched in, so never resized) let two runs' text rows
    take the log's every row at 80x24; the first dashboard kept them."""
    app = replay_app()
    async with app.run_test(size=(80, 24)) as pilot:
        grid = await rerun_grid(app, pilot)

        def settled() -> bool:  # every chart shown is whole (its earlier run's row too), the log under them
            lines = screen_lines(app)
            shown = [chart for chart in grid.charts if not chart.has_class("-hidden")]
            overlay_rows = sum(line.startswith("━ c9d75d… train") for line in lines)
            return overlay_rows == len(shown) > 0 and sum("rl." in line for line in lines) >= 2

        await wait_for(pilot, settled, what="whole charts and two events under them")


async def test_at_80x24_m_shows_the_chart_it_focuses_where_not_all_fit():
    """The walk: at 80x24 with earlier runs overlaid, the text rows had room for the first charts
    only, and `m` moved the focus to a hidden one: the subtitle named loss, no chart showed it.
    The focused chart always shows; the others fill what room is left, in order."""
    app = replay_app()
    async with app.run_test(size=(80, 24)) as pilot:
        grid = await rerun_grid(app, pilot)

        def hidden() -> list[str]:
            return [chart.panel.key for chart in grid.charts if chart.has_class("-hidden")]

        await wait_for(pilot, lambda: bool(hidden()), what="a chart with no room (the premise)")
        for _ in grid.charts:
            await pilot.press("m")
            await wait_for(pilot, lambda: grid.focused_panel not in hidden(),
                           what=f"the focused chart {grid.focused_panel} shown")
            assert hidden(), "the others still share what room there is"
