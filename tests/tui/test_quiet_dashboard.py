"""The dashboard's cost follows what changed: a poll tick with nothing new does no UI work, a
batch of log lines repaints the log without laying out the screen, the clock repaints only
the header. Counted (drains, layouts, workers, measurements), never timed."""

from __future__ import annotations

import pytest
from test_dashboard import make_dashboard_app
from textual.app import App, ComposeResult
from textual.containers import Horizontal
from textual.content import Content

from app.core.api.streaming import NewEvents, NewMetrics, StatusChanged, WatchOptions
from app.core.api.wire import JobEvent, JobStatus, MetricPoint
from app.core.runs.feed import JobFeed
from app.core.runs.series import MetricStore
from app.screens.dashboard import DashboardScreen, JobContext
from app.screens.stylesheet import stylesheet_path
from support.fakes import ScriptedJob, event
from support.pilot_waits import wait_for
from support.textual_compat import on_each_layout
from widgets.compat.textual_compat import log_line_width
from widgets.event_log import EventLog, LogLines
from widgets.job_header import JobHeader
from widgets.metrics_grid import MetricsGrid


async def test_poll_ticks_with_nothing_new_drain_nothing(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_q", [("running", [event(1), event(2)], [])]))
    app = make_dashboard_app(faulty_backend, JobContext("job_q"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = app.screen
        assert isinstance(screen, DashboardScreen)
        await wait_for(pilot, lambda: screen.query_one(EventLog).total == 2, what="the first events")
        drains = []
        feed = screen.feed
        assert feed is not None
        original = feed.drain
        feed.drain = lambda: (drains.append(1), original())[1]  # type: ignore[method-assign]
        ticks = faulty_backend.count("/rl/jobs/job_q/events")
        await wait_for(pilot, lambda: faulty_backend.count("/rl/jobs/job_q/events") >= ticks + 5,
                       what="five more poll ticks")
        assert drains == [], "a tick that brought nothing woke the UI"
        assert screen.query_one(EventLog).total == 2


def job_event(seq: int, message: str = "") -> JobEvent:
    return JobEvent.model_validate(event(seq, message=message or f"step {seq}: mean score 0.5, loss 0.1"))


def test_the_feed_tells_the_ui_once_per_batch():
    told = []
    feed = JobFeed(lambda: None, "job_1", WatchOptions(), on_ready=lambda: told.append(1))  # type: ignore[arg-type,return-value]
    feed.take(NewEvents([job_event(1)]))
    feed.take(NewMetrics([MetricPoint(name="train.mean_score", step=0, value=0.5)]))
    feed.take(StatusChanged(JobStatus(status="running"), None))
    assert told == [1], "one wake-up for a batch, however many updates fill it"
    batch = feed.drain()
    assert len(batch.events) == 1 and len(batch.points) == 1 and batch.status is not None
    assert not feed.drain(), "an empty drain"
    feed.take(NewEvents([job_event(2)]))
    assert told == [1, 1], "news after a drain is told again"


def test_a_batch_that_ends_the_job_still_says_it_was_seen_running():
    """A busy UI may drain a running and a final status at once: the batch keeps the last
    status only, but says a status before it was not terminal (the end notice and the bell
    depend on it)."""
    feed = JobFeed(lambda: None, "job_1", WatchOptions())  # type: ignore[arg-type,return-value]
    feed.take(StatusChanged(JobStatus(status="running"), None))
    feed.take(StatusChanged(JobStatus(status="succeeded"), "running"))
    batch = feed.drain()
    assert batch.status is not None and batch.status.status == "succeeded" and batch.active_seen
    feed.take(StatusChanged(JobStatus(status="succeeded"), None))
    assert not feed.drain().active_seen


def test_a_feed_whose_ui_is_gone_keeps_going():
    def closed() -> None:
        raise RuntimeError("Event loop is closed")

    feed = JobFeed(lambda: None, "job_1", WatchOptions(), on_ready=closed)  # type: ignore[arg-type,return-value]
    feed.take(NewEvents([job_event(1)]))
    assert len(feed.drain().events) == 1


class LogApp(App):
    """The dashboard's body with its stylesheet: the grid beside the log."""

    CSS_PATH = str(stylesheet_path())

    def compose(self) -> ComposeResult:
        with Horizontal(id="dash-body"):
            yield MetricsGrid(MetricStore(), id="dash-chart")
            yield EventLog(id="dash-log")


class Layouts:
    def __init__(self, app: App) -> None:
        self.count = 0
        on_each_layout(app.screen, self.counted)

    def counted(self) -> None:
        self.count += 1


async def test_log_lines_repaint_the_log_without_laying_out_the_screen():
    app = LogApp()
    async with app.run_test(size=(160, 45)) as pilot:
        log = app.query_one(EventLog)
        log.add_events([job_event(seq) for seq in range(1, 6)])
        await pilot.pause()
        layouts = Layouts(app)
        workers = []
        app.workers.add_worker = lambda *a, **k: workers.append(a)  # type: ignore[method-assign]
        for start in range(6, 200, 20):  # ten batches, the log overflowing its height on the way
            log.add_events([job_event(seq) for seq in range(start, start + 20)])
            await pilot.pause()
        view = log.log_view
        assert layouts.count == 0, "a batch of lines laid out the whole screen"
        assert workers == [], "a write started a worker (the Log's width measurement)"
        # What the layout used to bring still happens: the scroll range, the scrollbar, the tail.
        assert log.total == 205 and view.line_count >= 205  # a message may wrap
        assert view.virtual_size.height == view.line_count
        assert view.vertical_scrollbar.window_virtual_size == view.line_count
        await wait_for(pilot, lambda: view.is_vertical_scroll_end and view.max_scroll_y > 0, what="the tail")
        widest = max(len(line) for line in view.lines)
        assert view.virtual_size.width == widest


async def test_a_wide_line_widens_the_log_and_odd_characters_count_in_cells():
    app = LogApp()
    async with app.run_test(size=(80, 24)) as pilot:
        view = app.query_one(EventLog).log_view
        view.write_lines(["x" * 300, "漢字\tand a tab"])
        await pilot.pause()
        assert view.virtual_size.width == 300
        assert log_line_width(type(view), "漢字") == 4
        assert log_line_width(type(view), "a\tb") == len("a\tb".expandtabs())


async def test_a_user_who_scrolled_up_is_not_pulled_back_down():
    app = LogApp()
    async with app.run_test(size=(160, 45)) as pilot:
        log = app.query_one(EventLog)
        log.add_events([job_event(seq) for seq in range(1, 120)])
        view = log.log_view
        await wait_for(pilot, lambda: view.is_vertical_scroll_end and view.max_scroll_y > 0, what="the tail")
        log.on_log_lines_resized(LogLines.Resized())  # while tailing: a scroll to the end, after the refresh
        view.scroll_home(animate=False)  # the user scrolls up before that refresh
        for _ in range(3):  # a few refreshes: a deferred scroll may defer itself once more
            await pilot.pause()
            assert view.scroll_y == 0 and not log.tailing


class HeaderApp(App):
    def compose(self) -> ComposeResult:
        yield JobHeader("", markup=True)


@pytest.mark.parametrize("size", [(160, 10), (60, 10)])
async def test_the_header_measures_once_and_repaints_only_a_changed_line(size, monkeypatch):
    app = HeaderApp()
    async with app.run_test(size=size) as pilot:
        header = app.query_one(JobHeader)
        updates, measures = [], []
        original_update, original_measure = header.update, Content.from_markup
        monkeypatch.setattr(header, "update", lambda *a, **k: (updates.append(a[0]), original_update(*a, **k))[1])
        monkeypatch.setattr(Content, "from_markup", lambda *a, **k: (measures.append(1), original_measure(*a, **k))[1])

        def show(elapsed: int, status: str = "running") -> None:
            header.show(job_id="job_1", status=status, elapsed=elapsed, backend="http://127.0.0.1:8000/api",
                        config_path="configs/rl/demo.toml", model="Qwen/Qwen3-0.6B", states=[])

        show(61)
        first = len(measures)  # the fit measured, then the text parsed for the repaint
        assert len(updates) == 1 and "01:01" in updates[0]
        show(61)
        assert len(updates) == 1, "the same line again repainted the header"
        show(62)
        assert len(updates) == 2 and "01:02" in updates[1]
        assert len(measures) - first < first, "a tick of the clock measured the line again"
        ticked = len(measures)
        show(62, "succeeded")
        assert len(updates) == 3 and len(measures) - ticked == first, "a new status is measured"
        await pilot.pause()
