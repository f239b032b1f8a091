"""The jobs view (`synth-tui jobs`) against a real loopback backend: the list, paging, sort,
filter, attach, cancel, rerun, live refresh, errors; and its snapshots at both sizes."""

from __future__ import annotations

import pytest
from textual import events
from textual.widgets import DataTable, Input, LoadingIndicator

from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession
from app.core.runs.history import RunHistory
from app.core.runs.job_list import JobListing, JobRow
from app.screens.commands import palette_commands
from app.screens.dashboard import DashboardScreen
from app.screens.dialogs.common import ConfirmDialog
from app.screens.jobs import JobsScreen
from app.tui import SynthTuiApp
from support.fakes import FaultyBackend, ScriptedJob, metric, training_timeline
from support.pilot_waits import wait_for, wait_for_screen
from support.screen_text import footer_text, notifications
from widgets.metrics_grid import MetricsGrid

STATUSES = ["running", "succeeded", "failed", "queued", "cancelled", "running", "succeeded"]


def make_jobs_app(backend: FaultyBackend, **options) -> SynthTuiApp:
    session = LaunchSession(LaunchOptions(backend=backend.url, poll_interval=0.05),
                            shell={"SYNTH_API_KEY": backend.api_key})
    session.resolve()
    screen_options = {"page_size": 3, "refresh_every": None, **options}
    app = SynthTuiApp(session, first_screen=lambda: JobsScreen(**screen_options))
    return app


def seven_jobs(backend: FaultyBackend) -> list[str]:
    """Seven jobs, newest first, on a backend that pages; each has a mean score 0.1 * (i + 1)."""
    backend.list_paging = "after"
    ids = []
    for i, status in enumerate(STATUSES):
        job_id = f"job_{i:02d}"
        backend.add_job(ScriptedJob(job_id, [(status, [], [metric("train.mean_score", 2, round(0.1 * (i + 1), 2)),
                                                           metric("train.loss", 2, 0.5)])],
                                    created_at=f"2026-01-01T12:{59 - i:02d}:00Z", model=f"Qwen/Qwen3-{i}B"))
        ids.append(job_id)
    return ids


def jobs(app) -> JobsScreen:
    screen = app.screen
    assert isinstance(screen, JobsScreen), screen
    return screen


def table_column(screen: JobsScreen, column: int) -> list[str]:
    table = screen.query_one(DataTable)
    return [str(table.get_row_at(i)[column]) for i in range(table.row_count)]


def header(screen: JobsScreen) -> str:
    return str(screen.query_one("#jobs-header").render())


async def loaded(pilot, screen: JobsScreen, count: int = 1) -> None:
    await wait_for(pilot, lambda: screen.loads >= count and not screen.reading, what="the job list")


async def test_the_list_shows_every_job_across_pages_with_status_model_and_score(faulty_backend):
    ids = seven_jobs(faulty_backend)
    app = make_jobs_app(faulty_backend)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = jobs(app)
        await loaded(pilot, screen)
        assert table_column(screen, 0) == ids
        assert table_column(screen, 1) == STATUSES
        assert table_column(screen, 2)[0] == "Qwen/Qwen3-0B"
        assert table_column(screen, 3)[0] == "2026-01-01 12:59"
        assert table_column(screen, 4) == [f"{0.1 * (i + 1):.3f}" for i in range(7)]
        assert "7 jobs" in header(screen) and "(3 active)" in header(screen)
        assert not screen.query(LoadingIndicator)  # nothing covers the list once it is read
    pages = [r for r in faulty_backend.requests if r[0] == "GET" and r[1] == "/api/rl/jobs"]
    assert len(pages) == 1 + 3  # the probe, then 3 + 3 + 1 jobs


async def test_s_cycles_the_sort(faulty_backend):
    seven_jobs(faulty_backend)
    app = make_jobs_app(faulty_backend)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = jobs(app)
        await loaded(pilot, screen)
        await pilot.press("s")
        assert screen.sort_by == "status" and "sort: status" in header(screen)
        assert table_column(screen, 1) == ["running", "running", "queued", "failed", "cancelled", "succeeded",
                                           "succeeded"]
        await pilot.press("s")
        assert table_column(screen, 0)[0] == "job_06"  # the best score first
        await pilot.press("s")
        assert screen.sort_by == "model"
        await pilot.press("s")
        assert screen.sort_by == "created" and table_column(screen, 0)[0] == "job_00"


async def test_slash_filters_as_typed_enter_keeps_and_esc_clears(faulty_backend):
    seven_jobs(faulty_backend)
    app = make_jobs_app(faulty_backend)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = jobs(app)
        await loaded(pilot, screen)
        await pilot.press("slash")
        assert screen.query_one("#jobs-filter", Input).has_focus
        await pilot.press(*"runn")
        assert table_column(screen, 0) == ["job_00", "job_05"]  # applied as typed
        await pilot.press("enter")
        assert not screen.query_one("#jobs-filter").display
        assert screen.query_one(DataTable).has_focus
        assert "filter “runn” (esc clears)" in header(screen) and "2 of 7 jobs" in header(screen)
        await pilot.press("escape")
        assert screen.filter_text == "" and len(table_column(screen, 0)) == 7
        assert "filter" not in header(screen)
        await pilot.press("slash", *"qwen3-4")  # the model column counts too
        assert table_column(screen, 0) == ["job_04"]


async def test_keys_typed_at_once_after_the_slash_all_go_into_the_filter(faulty_backend):
    """As a fast typist or tmux send-keys gives them: one burst. A q among them must not quit,
    and a / inside the filter is typed, not a new filter."""
    seven_jobs(faulty_backend)
    app = make_jobs_app(faulty_backend)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = jobs(app)
        await loaded(pilot, screen)
        for char in "/qwen/qwen3-4":
            app.post_message(events.Key("slash" if char == "/" else char, char))
        await wait_for(pilot, lambda: screen.filter_text == "qwen/qwen3-4", what="the whole filter")
        assert table_column(screen, 0) == ["job_04"] and app.is_running


async def test_enter_attaches_and_esc_on_the_dashboard_comes_back(faulty_backend):
    seven_jobs(faulty_backend)
    faulty_backend.add_job(ScriptedJob("job_live", training_timeline(steps=2),
                                       created_at="2026-01-02T00:00:00Z"))
    app = make_jobs_app(faulty_backend)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = jobs(app)
        await loaded(pilot, screen)
        assert table_column(screen, 0)[0] == "job_live"
        await pilot.press("enter")
        await wait_for_screen(pilot, DashboardScreen, "the dashboard")
        dashboard = app.screen
        assert dashboard.job.job_id == "job_live" and dashboard.back_to_history
        await wait_for(pilot, lambda: dashboard.ended, what="the job's end")
        loads = screen.loads
        await pilot.press("escape")
        assert app.screen is screen
        await loaded(pilot, screen, loads + 1)  # read again on return, without waiting for the timer
        assert table_column(screen, 1)[0] == "succeeded"


async def test_c_asks_then_cancels_and_the_new_status_shows(faulty_backend):
    seven_jobs(faulty_backend)
    app = make_jobs_app(faulty_backend)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = jobs(app)
        await loaded(pilot, screen)
        await pilot.press("c")  # job_00, running
        assert isinstance(app.screen, ConfirmDialog)
        await pilot.press("n")
        assert faulty_backend.count("/cancel") == 0
        await pilot.press("c", "y")
        await wait_for(pilot, lambda: faulty_backend.count("/cancel") == 1, what="the cancel")
        await wait_for(pilot, lambda: table_column(screen, 1)[0] == "cancelled", what="the list read again")
        await pilot.press("c")  # now finished: nothing to ask
        assert app.screen is screen and faulty_backend.count("/cancel") == 1


async def test_r_reruns_from_the_run_history_payload(faulty_backend):
    seven_jobs(faulty_backend)
    payload = {"job_type": "rl", "data": {"base_model": "Qwen/Qwen3-0.6B"}}
    RunHistory().record_submission(job_id="job_00", backend=faulty_backend.url + "/api", config_path="demo.toml",
                                   payload=payload, idempotency_key="old-key")
    app = make_jobs_app(faulty_backend)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = jobs(app)
        await loaded(pilot, screen)
        await pilot.press("r")
        await wait_for_screen(pilot, ConfirmDialog, "the question")
        await pilot.press("y")
        await wait_for_screen(pilot, DashboardScreen, "the new job's dashboard")
        new_id = app.screen.job.job_id
        assert new_id not in ("job_00",) and app.screen.job.payload == payload
        # The run it repeats is read from the backend and overlaid, as a dashboard's rerun does.
        grid = app.screen.query_one(MetricsGrid)
        await wait_for(pilot, lambda: [run.job_id for run in grid.overlays] == ["job_00"], what="the overlay")
    creates = [r for r in faulty_backend.requests if r[0] == "POST" and r[1] == "/api/rl/jobs"]
    assert len(creates) == 1 and creates[0][3] == payload
    assert creates[0][2]["Idempotency-Key"] != "old-key"
    record = RunHistory().get(new_id)
    assert record.rerun_of == "job_00" and record.config_path == "demo.toml"


async def test_r_without_a_payload_says_why_and_sends_nothing(faulty_backend):
    seven_jobs(faulty_backend)
    app = make_jobs_app(faulty_backend)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = jobs(app)
        await loaded(pilot, screen)
        await pilot.press("r")
        await wait_for(pilot, lambda: any("cannot be rerun" in str(n.message) for n in notifications(app)),
                       what="the refusal")
        assert app.screen is screen
    assert not [r for r in faulty_backend.requests if r[0] == "POST"]


async def test_statuses_refresh_live_and_errors_are_said_once(faulty_backend):
    job = faulty_backend.add_job(ScriptedJob("job_a", [("running", [], []), ("succeeded", [], [])]))
    faulty_backend.list_paging = "after"
    app = make_jobs_app(faulty_backend, refresh_every=0.05)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = jobs(app)
        await loaded(pilot, screen)
        assert table_column(screen, 1) == ["running"]
        job.advance()
        job.advance()
        await wait_for(pilot, lambda: table_column(screen, 1) == ["succeeded"], what="the live refresh")
        faulty_backend.stop()
        loads = screen.loads
        await wait_for(pilot, lambda: screen.loads >= loads + 3, what="three failed refreshes")
        assert "Cannot reach the backend" in header(screen) and "trying again every 0.05 s" in header(screen)
        # said once (the first failure may say the connection broke, the later ones that the
        # backend cannot be reached: the server stopped while a kept-alive connection was open)
        assert sum(n.title == "Job list" for n in notifications(app)) == 1
        assert app.screen is screen  # no error dialog
        assert table_column(screen, 1) == ["succeeded"]  # the last list stays


async def test_a_backend_without_rl_jobs_says_so(faulty_backend):
    faulty_backend.rl_offered = False
    app = make_jobs_app(faulty_backend)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = jobs(app)
        await loaded(pilot, screen)
        assert "offers no RL jobs" in header(screen)


@pytest.mark.parametrize("size", [(160, 45), (80, 24)])
async def test_every_column_fits_the_width(faulty_backend, size):
    seven_jobs(faulty_backend)
    faulty_backend.add_job(ScriptedJob("job_" + "a" * 24, [("cancelled", [], [])], created_at="2026-01-03T00:00:00Z",
                                       model="rl:Qwen/Qwen3-4B:job_0123456789abcdef"))
    app = make_jobs_app(faulty_backend)
    async with app.run_test(size=size) as pilot:
        screen = jobs(app)
        await loaded(pilot, screen)
        table = screen.query_one(DataTable)
        assert table.virtual_size.width <= table.scrollable_content_region.width
        first = table.get_row_at(0)
        assert str(first[0]) == "job_" + "a" * 24  # a full embedded-backend id even at 80 columns
        # At 80 columns a model loses its organisation (its size stays) and a long one is cut.
        wide = size[0] == 160
        assert str(first[2]) == ("rl:Qwen/Qwen3-4B:job_0123456789abcdef" if wide else "Qwen3-4B:jo…")
        assert str(table.get_row_at(1)[2]) == ("Qwen/Qwen3-0B" if wide else "Qwen3-0B")


async def test_at_60_columns_the_score_stays_and_a_cut_id_ends_with_an_ellipsis(faulty_backend):
    seven_jobs(faulty_backend)
    faulty_backend.add_job(ScriptedJob("job_" + "a" * 24, [("running", [], [])], created_at="2026-01-03T00:00:00Z"))
    app = make_jobs_app(faulty_backend)
    async with app.run_test(size=(60, 24)) as pilot:
        screen = jobs(app)
        await loaded(pilot, screen)
        table = screen.query_one(DataTable)
        assert table.virtual_size.width <= table.scrollable_content_region.width  # nothing cut by the edge
        labels = [str(column.label) for column in table.columns.values()]
        assert labels[-1] == "Last\nscore" and "Model" not in labels
        first = table.get_row_at(0)
        assert str(first[0]).startswith("job_aaaa") and str(first[0]).endswith("…")
        assert str(table.get_row_at(1)[-1]) == "0.100"
        assert "8 jobs (4 active)" in header(screen)


@pytest.mark.parametrize(("size", "heading", "header_rows"), [((160, 45), "Last score", 1),
                                                             ((80, 24), "Last\nscore", 2)])
async def test_the_score_column_says_it_is_the_last_score(faulty_backend, size, heading, header_rows):
    """The walk: the column read "Score", not which one (the last mean score). It says "Last
    score" within its width: in one line at 160 columns, in two at 80, where the model keeps its
    column and the job id its whole length."""
    seven_jobs(faulty_backend)
    app = make_jobs_app(faulty_backend)
    async with app.run_test(size=size) as pilot:
        screen = jobs(app)
        await loaded(pilot, screen)
        table = screen.query_one(DataTable)
        labels = [str(column.label) for column in table.columns.values()]
        assert labels == ["Job", "Status", "Model", "Created", heading]
        assert table.header_height == header_rows
        assert table.virtual_size.width <= table.scrollable_content_region.width  # nothing cut by the edge


async def test_one_job_is_counted_in_the_singular(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_one", [("running", [], [])], created_at="2026-01-03T00:00:00Z"))
    app = make_jobs_app(faulty_backend)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = jobs(app)
        await loaded(pilot, screen)
        assert "1 job (1 active)" in header(screen) and "1 jobs" not in header(screen)


async def test_every_jobs_action_is_in_the_palette(faulty_backend):
    app = make_jobs_app(faulty_backend)
    async with app.run_test(size=(160, 45)):
        screen = jobs(app)
        in_palette = {command.action for command in palette_commands(screen)}
        keyed = {b.action for b in screen.BINDINGS if not b.action.startswith("app.")}
        assert keyed <= in_palette, keyed - in_palette
        for action in in_palette:
            assert callable(getattr(screen, f"action_{action}"))
        assert all(b.id and b.id.startswith("jobs.") for b in screen.BINDINGS)


PRESET = JobListing([
    JobRow("job_3f2a9c0e11d4b7a85e6c0d21", "running", "Qwen/Qwen3-0.6B", "2026-01-01T12:40:00Z", 0.412),
    JobRow("job_9b1e4d7c2a0f6e3b8d5c1a90", "succeeded", "Qwen/Qwen3-0.6B", "2026-01-01T11:05:00Z", 0.931),
    JobRow("job_51c0e9a7d3b2f4e6a8c1d0b7", "failed", "Qwen/Qwen3-4B", "2026-01-01T09:30:00Z", None),
    JobRow("job_c7d2e1f0a9b8c3d4e5f6a7b8", "cancelled", "rl:Qwen/Qwen3-4B:job_9b1e4d7c2a0f6e3b", "2025-12-31T22:15:00Z",
           0.287),
    JobRow("job_0e6f5d4c3b2a1908f7e6d5c4", "queued", "Qwen/Qwen3-0.6B", "2026-01-01T12:41:00Z", None),
], pages=1)


def preset_app() -> SynthTuiApp:
    session = LaunchSession(LaunchOptions(backend="http://127.0.0.1:8000"), shell={"SYNTH_API_KEY": "sk_fixed_000000"})
    session.resolve()
    app = SynthTuiApp(session, first_screen=lambda: JobsScreen(preset=PRESET))
    return app


def test_snapshot_jobs_wide(snap_compare):
    assert snap_compare(preset_app(), terminal_size=(160, 45))


def test_snapshot_jobs_narrow(snap_compare):
    """At 80x24 `? Help` is in the footer (once test_the_help_key_is_in_the_footer_at_80x24, the same app)."""

    async def help_key_shown(pilot) -> None:
        await wait_for_screen(pilot, JobsScreen, "the jobs list")
        # The footer is filled after the screen is: wait for what it reads.
        await wait_for(pilot, lambda: "? Help" in footer_text(pilot.app), what="? Help in the footer")

    assert snap_compare(preset_app(), terminal_size=(80, 24), run_before=help_key_shown)


def test_snapshot_jobs_filtered_and_sorted(snap_compare):
    assert snap_compare(preset_app(), terminal_size=(80, 24), press=["s", "s", "slash", *"qwen3-0", "enter"])


async def test_q_on_a_dashboard_opened_from_the_list_goes_back_and_only_the_list_quits(faulty_backend):
    """As in k9s: q leaves the dashboard for the list without asking (the job goes on), the
    footer says so, and only the first screen's q quits the app."""
    seven_jobs(faulty_backend)
    faulty_backend.add_job(ScriptedJob("job_live", [("running", [], [])] * 10_000,
                                       created_at="2026-01-02T00:00:00Z"))
    app = make_jobs_app(faulty_backend)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = jobs(app)
        await loaded(pilot, screen)
        await wait_for(pilot, lambda: "q Quit" in footer_text(app), what="q Quit on the list")
        await pilot.press("enter")
        await wait_for_screen(pilot, DashboardScreen, "the dashboard")
        dashboard = app.screen
        await wait_for(pilot, lambda: "q Back" in footer_text(app), what="q Back on the dashboard")
        assert "q Quit" not in footer_text(app) and not dashboard.ended
        await pilot.press("q")  # the job still runs: no question, it is not left
        await wait_for(pilot, lambda: app.screen is screen, what="the list again")
        assert app.is_running
        await wait_for(pilot, lambda: "q Quit" in footer_text(app), what="q Quit on the list again")
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, what="the app to quit")


@pytest.mark.parametrize("size", [(160, 45), (80, 24)])
async def test_a_queued_job_shows_its_place_in_the_status_column(faulty_backend, size):
    faulty_backend.list_paging = "after"  # the list carries each job's fields, as the embedded backend's does
    faulty_backend.add_job(ScriptedJob("job_run", [("running", [], [])], created_at="2026-01-01T12:00:00Z"))
    for position, job_id in ((12, "job_q2"), (1, "job_q1")):
        faulty_backend.add_job(ScriptedJob(job_id, [("queued", [], [])], created_at=f"2026-01-01T12:{position:02d}:00Z",
                                           queue_positions=[position]))
    app = make_jobs_app(faulty_backend)
    async with app.run_test(size=size) as pilot:
        screen = jobs(app)
        await loaded(pilot, screen)
        statuses = dict(zip(table_column(screen, 0), table_column(screen, 1), strict=True))
        assert statuses == {"job_q2": "queued #12", "job_q1": "queued #1", "job_run": "running"}
        await pilot.press("s")  # by status: running, then the queue in its order
        await wait_for(pilot, lambda: table_column(screen, 0) == ["job_run", "job_q1", "job_q2"],
                       what="the queue in its order")
