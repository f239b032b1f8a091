"""The live dashboard: the reward chart beside the event log, fed by a background worker.

The feed (``app.core.runs.feed``) runs the watcher on a worker thread and tells this screen when
something arrived; the screen drains it into the chart and the log at most ten times a second,
so a burst of events becomes one update, and a job with nothing new costs no work but the
header's clock.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.reactive import var
from textual.timer import Timer
from textual.widgets import Input, Static

from app.core.api.streaming import WatchEnded
from app.core.api.wire import SUCCESS_STATUSES, TERMINAL_SUCCESS_EVENTS, JobEvent, is_terminal_status, parse_iso
from app.core.errors import SynthTuiError
from app.core.launch import service
from app.core.paths import run_dir
from app.core.runs.compare import ComparedRun
from app.core.runs.events import policy_badge, rollout_progress
from app.core.runs.feed import FeedBatch, JobFeed
from app.core.runs.history import RunHistory
from app.core.runs.jobs import JobContext, export_run
from app.core.runs.model import SavedModel, saved_model
from app.core.runs.ranks import rank_figures
from app.core.runs.saved_run import run_span
from app.core.runs.series import MetricStore, baseline_change
from app.screens import dashboard_quit
from app.screens.base import FlowScreen
from app.screens.chart_keys import CHART_BINDINGS, ChartKeys, carry_chart_view
from app.screens.commands import palette_tooltip
from app.screens.dashboard_jobs import JobKeys
from app.screens.overlays import OverlayActions
from widgets.app_header import AppHeader
from widgets.event_log import EventLog
from widgets.job_header import JobHeader, shown_text
from widgets.metrics_grid import MetricsGrid
from widgets.rank_line import RankLine
from widgets.steady_footer import SteadyFooter

# At 80 columns the charts sit above the log and take at most this share of the height as plots;
# as text rows they take what they need, leaving the log at least its rule, status and two lines.
NARROW_CHART_SHARE = 0.6
NARROW_LOG_ROWS = 4
# Seconds between two drains of the feed at least: what arrives meanwhile is one update.
DRAIN_GAP = 0.1


class FeedReady(Message, bubble=False):
    """Posted from the feed's thread: the feed has something to drain."""


class DashboardScreen(JobKeys, OverlayActions, ChartKeys, FlowScreen):
    TITLE = "Live dashboard"
    # The job's state as the header and the stylesheet show it: each change redraws the header
    # (once per drained batch: _one_header) and sets the screen's class (styles.tcss: -ended
    # shows the end panel).
    status: var[str] = var("unknown", init=False)
    reconnecting: var[str] = var("", init=False, toggle_class="-reconnecting")
    ended: var[bool] = var(False, init=False, toggle_class="-ended")
    paused: var[bool] = var(False, init=False, toggle_class="-paused")
    watch_stopped: var[bool] = var(False, init=False, toggle_class="-watch-stopped")  # the feed failed
    end_message: var[str | None] = var(None, init=False)  # why the watch stopped, when it did not see the job end
    filtering: var[bool] = var(False, init=False, toggle_class="-filtering")  # the filter field is open
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (110, "-wide")]
    BINDINGS = [
        # In order of need: at 80 columns the footer shows the first few. q goes back to the
        # list the dashboard was opened from, else quits (check_action shows the one that applies).
        Binding("q", "back", "Back", id="dashboard.back"),
        Binding("q", "quit_dashboard", "Quit", id="dashboard.quit"),
        Binding("c", "cancel_job", "Cancel", id="dashboard.cancel",
                tooltip=palette_tooltip("Cancel job", "Cancel the job on the backend (asks first)")),
        Binding("r", "rerun", "Rerun", id="dashboard.rerun",
                tooltip=palette_tooltip("Rerun job", "Submit the same payload with a new Idempotency-Key")),
        Binding("p", "pause", "Freeze view", id="dashboard.pause",  # only the view: the job goes on
                tooltip=palette_tooltip("Freeze the view", "Freeze the chart and the log; the job goes on")),
        # p's other face while the view is frozen (check_action shows the one that applies).
        Binding("p", "resume", "Resume view", id="dashboard.resume",
                tooltip=palette_tooltip("Resume the view", "The chart and the log catch up with the job")),
        Binding("slash", "filter", "Filter", id="dashboard.filter", key_display="/",
                tooltip=palette_tooltip("Filter events", "Show only events whose type, level or text match")),
        *CHART_BINDINGS,
        Binding("o", "overlay", "Overlay", id="dashboard.overlay",
                tooltip=palette_tooltip("Overlay earlier runs",
                                        "Draw earlier runs of this config, or any job id, as dimmed lines")),
        Binding("i", "inspect", "Rollouts", id="dashboard.inspect",
                tooltip=palette_tooltip("Inspect rollouts",
                                        "The episodes the backend kept: best and worst of a step, turn by turn")),
        # n, e, end (and M) are spare keys: in the footer from 110 columns (NARROW_FOOTER_LEAVES).
        Binding("n", "noise", "Noise", id="dashboard.noise",
                tooltip=palette_tooltip("Toggle infrastructure noise", "Show or hide hatchet/modal events")),
        Binding("e", "export", "Export", id="dashboard.export",
                tooltip=palette_tooltip("Export run", "Write metrics CSV and events JSONL into the run's folder")),
        Binding("end", "follow", "Follow log", id="dashboard.follow",
                tooltip=palette_tooltip("Follow the log", "Scroll to the newest event and stay there")),
        # The app's quit, which asks this screen (request_quit) even when q goes back.
        Binding("ctrl+q", "app.quit", "Quit", id="dashboard.app_quit", show=False),
        Binding("escape", "close_filter", "Clear filter / back", id="dashboard.close_filter", show=False,
                tooltip=palette_tooltip("Clear the event filter",
                                        "Show every event again (with no filter: back to the list it came from)")),
    ]

    # Below 110 columns these would cost the footer a row: the help lists them (widgets/steady_footer.py).
    # (scroll_end: the focused log's own end, widgets/event_log.py.)
    NARROW_FOOTER_LEAVES = frozenset({"metric_back", "noise", "export", "follow", "scroll_end"})

    def __init__(self, job: JobContext | str, *, since_seq: int = 0, back_to_history: bool = False,
                 overlays: Sequence[ComparedRun] = (), overlay_ids: Sequence[str] = (),
                 read_only: str | None = None) -> None:
        """``back_to_history``: opened from a list (the run history, the jobs view), so q and
        Esc go back there; a dashboard after a submit ends the flow and its q quits.
        ``overlays``: earlier runs drawn beside this one (a rerun overlays the run it repeats);
        ``overlay_ids``: earlier runs to read from the backend and draw (a rerun from a list).
        ``read_only``: why the backend is not asked (it is gone): the job's replay is what this
        machine saved, and nothing is sent (no cancel, rerun, overlay or rollouts)."""
        super().__init__()
        self.job = job if isinstance(job, JobContext) else JobContext(job)
        self.back_to_history = back_to_history
        self.read_only = read_only
        self.overlays = list(overlays)
        self.overlay_ids = list(overlay_ids)
        self.store = MetricStore()
        self.queue_position: int | None = None  # its place in an embedded backend's queue, while queued
        self.policy: tuple[str, bool] | None = None  # what trains it (events.policy_badge)
        # The job was seen not yet ended by this dashboard: only then does its end notify and
        # ring the bell (attaching to a job that had already ended says so in the panel only).
        self.seen_running = False
        self.completion_warning: str | None = None  # a warning-level completion event's message
        self.ended_code = 0  # the exit code the watch's end calls for (WatchEnded.exit_code)
        self.model: SavedModel | None = None  # the trained model the job's end names (artifacts.model_path)
        self.started = time.monotonic()
        self.created_at: datetime | None = None
        self.finished_after: int | None = None  # seconds from creation to the end, once known
        self.feed: JobFeed | None = None
        self._held = FeedBatch()
        self.since_seq = since_seq
        self._drained_at = 0.0  # monotonic time of the last drain
        self._drain_timer: Timer | None = None  # a drain held back by DRAIN_GAP
        self._body_height = 0  # the body's height the grid was last fitted to (_body_laid_out)
        self._header_held = 0  # > 0 inside _one_header: the header is redrawn once, at its end
        self._header_dirty = False
        self._resumed = asyncio.Event()  # set while this screen is the active one (_until_active)

    # -- layout ---------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield AppHeader()
        yield JobHeader("", id="dash-header", classes="flow-header", markup=True)
        yield RankLine(id="dash-ranks")
        with Horizontal(id="dash-body"):
            grid = MetricsGrid(self.store, preferred_metric=self.session.options.metric, id="dash-chart")
            grid.live_job_id = self.job.job_id
            grid.planned_steps = self.job.planned_steps
            yield grid
            yield EventLog(id="dash-log")
        yield Input(placeholder="filter events by type, level or text: applies as you type; enter keeps it, esc clears",
                    id="dash-filter")
        with VerticalScroll(id="dash-final"):
            yield Static("", id="dash-final-text", markup=False)
        yield SteadyFooter(compact=True)

    def on_mount(self) -> None:
        super().on_mount()
        self.screen_layout_refresh_signal.subscribe(self, self._body_laid_out)
        self._stack_grid()  # a screen switched in (a rerun's dashboard) may get no resize
        if self.overlays:
            self.query_one(MetricsGrid).set_overlays(self.overlays)
        if self.overlay_ids:
            self._overlay(self.overlay_ids)
        if self.job.replay is not None:
            self._apply(self.job.replay)
            if self.read_only is not None:
                self._show_read_only(self.read_only)
        else:
            self._start_feed()
            self.set_interval(1.0, self._render_header, name="dashboard-clock")
        # Drawn here for the first frame: _apply's header (_one_header) waits for is_mounted, which
        # is set only once on_mount has returned; a saved run's header was blank until on_resize's
        # after-refresh redraw, frames later (tests/tui/test_dashboard.py, the header's first frame).
        self._render_header()

    def _show_read_only(self, why: str) -> None:
        """A saved run: the header says so, the end panel says why and where it was read."""
        self.ended = True  # nothing runs here: q asks nothing
        # The clock: how long the saved run lasted, first event to last (its own times).
        replay = self.job.replay
        self.finished_after = (run_span(replay.events) if replay is not None else None) or 0
        self.query_one("#dash-final-text", Static).update(why)
        self._render_header()

    def _needs_backend(self, what: str) -> bool:
        """False (and says why) on a read-only dashboard: its backend is gone."""
        if self.read_only is None:
            return True
        self.notify(f"{what} needs the job's backend, which is gone: this run is shown from the events "
                    "saved on this machine.", title="Read-only", severity="warning", markup=False)
        return False

    # -- the feed -------------------------------------------------------------------------

    def _start_feed(self) -> None:
        session = self.session
        options = session.watch_options(since_seq=self.since_seq)
        self.feed = JobFeed(lambda: service.watch_client(session), self.job.job_id, options,
                            stream_path=run_dir(self.job.job_id) / "events.jsonl", history=RunHistory(),
                            on_ready=lambda: self.post_message(FeedReady()))
        self.run_worker(self.feed.run, thread=True, exit_on_error=False, name="Job feed", group="feed")

    @on(FeedReady)
    def _feed_ready(self) -> None:
        """Drain now, or once DRAIN_GAP has passed since the last drain (one update for what
        arrives meanwhile); no polling timer: nothing new, no work."""
        if self._drain_timer is not None:
            return  # a drain is already due
        wait = self._drained_at + DRAIN_GAP - time.monotonic()
        if wait <= 0:
            self.apply_feed()
        else:
            self._drain_timer = self.set_timer(wait, self._held_drain, name="dashboard-drain")

    def _held_drain(self) -> None:
        self._drain_timer = None
        self.apply_feed()

    def apply_feed(self) -> None:
        """Drain what arrived; while paused, hold it (nothing redraws) until resumed."""
        if self.feed is None:
            return
        self._drained_at = time.monotonic()
        batch = self.feed.drain()
        if self.paused:
            # Pause freezes the chart and the log; the header still tells the truth.
            self._hold(FeedBatch(batch.events, batch.points))
            self._apply(FeedBatch(status=batch.status, connection=batch.connection, ended=batch.ended,
                                  error=batch.error, active_seen=batch.active_seen))
            return
        if self._held:
            batch, self._held = self._merge(self._held, batch), FeedBatch()
        if batch:
            self._apply(batch)

    def _apply(self, batch: FeedBatch) -> None:
        with self._one_header():
            self._apply_batch(batch)

    def _apply_batch(self, batch: FeedBatch) -> None:
        if batch.error is not None:
            self._feed_stopped(batch.error)
        if batch.points:
            self.store.add(batch.points)
            self.query_one(MetricsGrid).data_changed()
        if batch.events:
            self.query_one(EventLog).add_events(batch.events)
            self._planned_steps_from(batch.events)
            if (progress := rollout_progress(batch.events)) is not None:
                self.query_one(MetricsGrid).set_rollout_progress(progress)
            if (badge := policy_badge(batch.events)) is not None and badge != self.policy:
                self.policy = badge
                self._header_changed()
            if (ranks := rank_figures(batch.events)) is not None:  # a data-parallel job's latest step
                self.query_one(RankLine).show(ranks)
            # A success the backend qualifies (it learned nothing, it got worse): the end says so.
            self.completion_warning = next(
                (e.message for e in reversed(batch.events) if e.type in TERMINAL_SUCCESS_EVENTS
                 and (e.level or "").lower() == "warning"), self.completion_warning)
        if batch.status is not None:
            self.status = batch.status.status
            if batch.status.queue_position != self.queue_position:
                self.queue_position = batch.status.queue_position
                self._header_changed()
            self.seen_running = self.seen_running or batch.active_seen or not is_terminal_status(self.status)
            self.created_at = self.created_at or parse_iso(batch.status.created_at)
        if batch.connection is not None and not self.watch_stopped:
            self.reconnecting = batch.connection.message if batch.connection.reconnecting else ""
        if batch.ended is not None:
            self._ended(batch.ended)
            self.query_one(MetricsGrid).flush()  # the final picture now, not at the next due redraw

    def _planned_steps_from(self, events: Sequence[JobEvent]) -> None:
        """A step event that says the job's total steps (the embedded backend's do) sets the
        charts' x axis, for a job whose payload is not known here (an attach)."""
        for event in reversed(events):
            total = event.data.get("total_steps")
            if isinstance(total, int) and not isinstance(total, bool) and total > 0:
                self.query_one(MetricsGrid).set_planned_steps(total)
                return

    def _feed_stopped(self, error: BaseException) -> None:
        """The watch failed (the backend stopped answering, a 404…): the run ends with the
        error's exit code, as headless does, and says how to attach again."""
        with self._one_header():
            # What the header said is no longer known: the clock stops, the status is the last seen.
            self.finished_after = self.finished_after if self.finished_after is not None else self._elapsed()
            self.watch_stopped, self.reconnecting = True, ""
            if isinstance(error, SynthTuiError):
                self.ended_code = error.exit_code
                # The attach command first: at 80x24 the panel shows two lines.
                self.end_message = f"{self.session.attach_hint(self.job.job_id)}\nStopped watching: {error.message}"
                self.ended = True
        self.flow_app.show_error("The job feed stopped", error)

    def _hold(self, batch: FeedBatch) -> None:
        self._held = self._merge(self._held, batch)

    @staticmethod
    def _merge(first: FeedBatch, second: FeedBatch) -> FeedBatch:
        return FeedBatch(first.events + second.events, first.points + second.points,
                         second.status or first.status, second.connection or first.connection,
                         second.ended or first.ended, second.error or first.error,
                         first.active_seen or second.active_seen)

    def _ended(self, ended: WatchEnded) -> None:
        status, payload, reason = ended.status, ended.payload, ended.reason
        self.ended_code = ended.exit_code
        self.status, self.queue_position = status, None
        created, updated = parse_iso(payload.get("created_at")), parse_iso(payload.get("updated_at"))
        if created is not None and updated is not None and reason == "terminal":
            self.finished_after = max(0, int((updated - created).total_seconds()))
        self.ended = True
        if reason == "timeout":
            text = (f"Stopped watching after --poll-timeout; the job was still {status}.\n"
                    f"{self.session.attach_hint(self.job.job_id)}")
            self.notify(text, title="Watch stopped", severity="warning")
        elif reason == "paused":
            text = self.session.paused_message(self.job.job_id)
            self.notify(text, title="Job paused", severity="warning")
        else:
            # The model first: the JSON is long, and the panel shows a few rows (docs/product.md#dashboard).
            self.model = saved_model(payload)
            model_lines = self.model.lines() if self.model is not None else []
            moved = baseline_change(self.store)  # eval 0.31 -> 0.92, +0.61 +/- 0.09 (docs/product.md#live-dashboard)
            text = "\n".join([f"Final status: {status}", *([moved] if moved else []), *model_lines,
                              json.dumps(payload, indent=2)])
            severity: SeverityLevel = "information" if status in SUCCESS_STATUSES else "error"
            if status in SUCCESS_STATUSES and self.completion_warning:
                text = f"Warning: {self.completion_warning}\n{text}"
                if self.seen_running:
                    self.notify(f"Job {self.job.job_id} {status}, but: {self.completion_warning}",
                                title="Job finished with a warning", severity="warning", markup=False)
            elif self.seen_running:
                self.notify(f"Job {self.job.job_id} {status}", title="Job finished", severity=severity)
            if self.seen_running:  # a job that had ended before it was opened here is no news
                self.app.bell()
        self.query_one("#dash-final-text", Static).update(text)
        self.watch(self.query_one("#dash-final"), "virtual_size", self._offer_final_panel)

    def _offer_final_panel(self, *_: object) -> None:
        """An end panel naming a model and holding more than it shows (80x24: the lines that load
        the model under a long path) takes the focus once, so ↑↓ scroll it, and says so."""
        panel = self.query_one("#dash-final", VerticalScroll)
        overflows = self.model is not None and panel.max_scroll_y > 0
        if overflows and not panel.border_subtitle:
            panel.focus(scroll_visible=False)
        panel.border_subtitle = "↑↓ scroll" if overflows else ""

    def _elapsed(self) -> int:
        """The job's age from its created_at (the backend's clock), frozen at its end."""
        if self.finished_after is not None:
            return self.finished_after
        if self.created_at is not None:
            return max(0, int((datetime.now(self.created_at.tzinfo) - self.created_at).total_seconds()))
        return int(time.monotonic() - self.started)

    def _stack_grid(self) -> None:
        """At 80 columns the grid is stacked over the log: a share of the height for plots, the
        log's rows kept under text rows (MetricsGrid.rows_kept_below). From the app's width, as
        the breakpoint (-narrow) is, which a screen switched in may not have yet."""
        narrow = self.app.size.width < self.HORIZONTAL_BREAKPOINTS[1][0]
        grid = self.query_one(MetricsGrid)
        grid.height_share = NARROW_CHART_SHARE if narrow else 1.0
        grid.rows_kept_below = NARROW_LOG_ROWS if narrow else 0

    def _body_laid_out(self, _screen: object) -> None:
        """The end panel, the filter field or a taller header took rows from the body: the grid
        fits its charts to what is left (MetricsGrid.rows_kept_below: the log keeps its rows)."""
        height = self.query_one("#dash-body").size.height
        if height != self._body_height:
            first, self._body_height = not self._body_height, height
            if not first:  # the first layout arranges the grid itself (on_resize)
                self.query_one(MetricsGrid).arrange_charts()

    def on_resize(self) -> None:
        # The breakpoint class may have changed: at 80 columns the grid is stacked over the
        # log and may take 60% of the height (styles.tcss).
        grid = self.query_one(MetricsGrid)
        self._stack_grid()
        self.call_after_refresh(grid.arrange_charts)
        self.call_after_refresh(self._render_header)

    # -- the header: drawn from the reactives above -----------------------------------------

    def watch_status(self) -> None:
        self._header_changed()

    def watch_reconnecting(self) -> None:
        self._header_changed()

    def watch_ended(self) -> None:
        self._header_changed()
        self.refresh_bindings()  # p and c leave the footer (check_action)

    def watch_watch_stopped(self) -> None:
        self._header_changed()

    def watch_paused(self, paused: bool) -> None:
        if self.is_mounted:
            self.query_one(MetricsGrid).paused = paused
        self.refresh_bindings()  # p says Freeze view or Resume view (check_action)
        self._header_changed()

    def watch_end_message(self, message: str | None) -> None:
        if message is not None and self.is_mounted:
            self.query_one("#dash-final-text", Static).update(message)
        self._header_changed()

    @contextmanager
    def _one_header(self) -> Iterator[None]:
        """The changes made inside redraw the header once, at the end (a drained batch)."""
        self._header_held += 1
        try:
            yield
        finally:
            self._header_held -= 1
            if not self._header_held and self._header_dirty:
                self._header_dirty = False
                if self.is_mounted:
                    self._render_header()

    def _header_changed(self) -> None:
        if self._header_held:
            self._header_dirty = True
        elif self.is_mounted:
            self._render_header()

    def _render_header(self) -> None:
        states = []
        if self.read_only is not None:
            states.append("[$warning]read-only (see below)[/]")
        if self.watch_stopped:
            states.append("[$error]not watched any more (see below)[/]")
        if self.is_mounted and (needle := self.query_one(EventLog).filter_text):
            states.append(f"[$warning]filter “{shown_text(needle, 30)}” (esc clears)[/]")
        if self.paused:
            states.append("[$warning]view frozen (p)[/]")
        if self.reconnecting:
            states.append(f"[$warning]reconnecting: {shown_text(self.reconnecting, 50)}[/]")
        self.query_one(JobHeader).show(job_id=self.job.job_id, status=self.status, elapsed=self._elapsed(),
                                       backend=self.session.backend_base, config_path=self.job.config_path,
                                       model=self.job.model, states=states, policy=self.policy,
                                       queue_position=self.queue_position)

    # -- keys -----------------------------------------------------------------------------

    def action_pause(self) -> None:
        self.paused = True

    def action_resume(self) -> None:
        self.paused = False
        self.apply_feed()

    def action_noise(self) -> None:
        self.query_one(EventLog).toggle_noise()

    def action_follow(self) -> None:
        self.query_one(EventLog).follow()

    def action_filter(self) -> None:
        field = self.query_one("#dash-filter", Input)
        self.filtering = True
        field.value = self.query_one(EventLog).filter_text
        self.set_focus(field)  # at once: keys typed right after the slash go into the field

    def action_close_filter(self) -> None:
        """Esc: clear the filter (and close its field); with no filter, on a dashboard opened
        from the history, go back to it."""
        if self.filtering or self.query_one(EventLog).filter_text:
            self.action_clear_filter()
        elif self.back_to_history:
            self.action_back()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # A read-only dashboard has no backend to send these to: they leave its footer.
        if self.read_only is not None and action in ("cancel_job", "rerun", "inspect", "overlay"):
            return False
        # q is Back on a dashboard opened from a list, Quit on one that ends the flow.
        if action == "back":
            return self.back_to_history
        if action == "quit_dashboard":
            return not self.back_to_history
        # An ended job's view no longer changes: nothing to pause (a view paused before the end
        # still resumes; its held batch brings the end).
        if action == "pause":
            return not self.ended and not self.paused
        if action == "resume":
            return self.paused
        # An ended job has nothing to cancel (the walk: `c Cancel` stayed in the footer).
        if action == "cancel_job":
            return not self.ended
        return super().check_action(action, parameters)  # the chart keys' (chart_keys.py)

    def action_back(self) -> None:
        """Back to the list it was opened from; the job goes on, nothing to ask."""
        if self.feed is not None:
            self.feed.stop()
        self.app.pop_screen()

    def action_clear_filter(self) -> None:
        field = self.query_one("#dash-filter", Input)
        field.value = ""
        self.filtering = False
        self.query_one(EventLog).set_filter("")
        self._render_header()

    @on(Input.Changed, "#dash-filter")
    def _filter_typed(self, event: Input.Changed) -> None:
        self.query_one(EventLog).set_filter(event.value)
        self._render_header()

    @on(Input.Submitted, "#dash-filter")
    def _filter_kept(self) -> None:
        self.filtering = False
        self.query_one(EventLog).log_view.focus()  # the lines: the EventLog itself takes no focus

    def action_inspect(self) -> None:
        """The rollout inspector on the job's latest step (docs/product.md#rollout-inspector)."""
        from app.screens.rollouts import RolloutsScreen

        if not self._needs_backend("The rollout inspector"):
            return
        self.app.push_screen(RolloutsScreen(self.job))

    def rerun_screen(self, context: JobContext, overlays: list[ComparedRun]) -> DashboardScreen:
        return carry_chart_view(self, DashboardScreen(context, back_to_history=self.back_to_history,
                                                      overlays=overlays))

    @work(exclusive=True, group="export", exit_on_error=False, name="Export")
    async def action_export(self) -> None:
        points = self.store.rows()  # read here, on the UI thread that adds to the store
        folder = await asyncio.to_thread(export_run, self.job.job_id, points, datetime.now())
        self.notify(f"Exported to {folder}", title="Export")

    def request_quit(self) -> None:
        self.action_quit_dashboard()

    def request_interrupt(self) -> None:
        """Ctrl+C: as q (asking first while the job runs; a second Ctrl+C answers), then exit
        130 with "Interrupted." before the quit line (docs/product.md#exit-codes)."""
        self._ask_to_quit(interrupted=True)

    def action_quit_dashboard(self) -> None:
        self._ask_to_quit(interrupted=False)

    def _ask_to_quit(self, *, interrupted: bool) -> None:
        dashboard_quit.ask_to_quit(self, interrupted=interrupted)

    def on_unmount(self) -> None:
        if self.feed is not None:
            self.feed.stop()

