"""Watch a job: status, events and metrics as one async stream of typed updates.

This is the poller of docs/product.md#streaming, fixing the SDK's JobStreamer (docs/wire-contract.md#sdk-jobstreamer):
- ``poll_timeout`` is enforced: the watch (not the job) stops and says so;
- step-0 metrics are kept, and a metric written late for an already-seen step is not lost;
- the event cursor advances past every event (filtering is the display's business);
- ``/learning/...`` paths are used only after ``/rl/...`` answered 404 (see the client);
- a status change is a change of value, not of timestamp; ``error`` is terminal;
- events are deduplicated by seq across pages, paths, the SSE stream and restarts, and a
  short gap in seq is waited for before the cursor moves past it.
Per tick it sends at most three requests (status, events, metrics), two with SSE; a quiet
job's tick skips the status and the metrics most of the time (docs/product.md#streaming).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from app.core.api.client import PAGE_LIMIT, SynthClient
from app.core.api.errors import ApiError, StreamUnavailable
from app.core.api.retry import backoff_delay
from app.core.api.transport import MAX_RETRY_DELAY_S
from app.core.api.wire import (
    SUCCESS_STATUSES,
    JobEvent,
    JobStatus,
    MetricPoint,
    is_paused_status,
    is_terminal_status,
    terminal_status_of_event,
)
from app.core.errors import ExitCode

# Seconds between metric reads that follow streamed events (see JobWatcher._between_ticks).
METRICS_FOLLOW_INTERVAL = 1.0
# A tick reads metrics when events came with it, when the last read found points, or when this
# long has passed since the last read: a quiet job costs one request a tick fewer, and a metric
# written without an event still shows within this (docs/performance.md#a-quiet-dashboard).
METRICS_IDLE_INTERVAL = 3.0
# A tick reads the status when none is known yet, after a tick or a wait that brought events,
# after a failed tick, or when STATUS_QUIET_TICKS ticks or METRICS_IDLE_INTERVAL seconds (the
# sooner) have passed since the last read: a quiet job's tick is mostly one request, and a
# status that changes without an event (a terminal one comes with its event) still shows
# within three ticks (docs/performance.md#a-quiet-dashboard).
STATUS_QUIET_TICKS = 3

# --------------------------------------------------------------------------- updates


@dataclass
class StatusChanged:
    status: JobStatus
    previous: str | None


@dataclass
class NewEvents:
    events: list[JobEvent]


@dataclass
class NewMetrics:
    points: list[MetricPoint]


@dataclass
class ConnectionState:
    reconnecting: bool
    message: str = ""
    retry_in: float | None = None


EndReason = Literal["terminal", "timeout", "paused"]


@dataclass
class WatchEnded:
    status: str
    payload: dict[str, Any]
    reason: EndReason

    @property
    def exit_code(self) -> int:
        """What a front end exits with after this end (docs/compatibility.md lists them)."""
        if self.reason == "timeout":
            return ExitCode.POLL_TIMEOUT
        if self.reason == "paused":
            return ExitCode.PAUSED
        return ExitCode.OK if self.status in SUCCESS_STATUSES else ExitCode.JOB_FAILED


Update = StatusChanged | NewEvents | NewMetrics | ConnectionState | WatchEnded


# --------------------------------------------------------------------------- cursors


class EventCursor:
    """Which events we have: a floor (everything at or below it is done) plus the seqs seen
    above it. Asking the server for ``since_seq=floor`` re-reads around a gap, so an event
    committed late is still picked up; after ``gap_grace_ticks`` ticks a gap is given up
    (some backends number events sparsely), so a hole never stalls the stream."""

    def __init__(self, since_seq: int = 0, gap_grace_ticks: int = 3) -> None:
        self.floor = since_seq
        self._above: set[int] = set()
        self._gap_age = 0
        self._grace = gap_grace_ticks

    @property
    def since(self) -> int:
        return self.floor

    @property
    def last_seq(self) -> int:
        return max(self._above, default=self.floor)

    def accept(self, events: Iterable[JobEvent]) -> list[JobEvent]:
        """The events not seen before, in seq order. Events without a seq cannot be
        deduplicated and are dropped, as the SDK does."""
        fresh = []
        for event in sorted(events, key=lambda e: e.seq):
            if event.seq <= self.floor or event.seq in self._above:
                continue
            self._above.add(event.seq)
            fresh.append(event)
        self._raise_floor()
        return fresh

    def end_tick(self) -> None:
        if not self._above:
            self._gap_age = 0
            return
        self._gap_age += 1
        if self._gap_age > self._grace:
            self.floor = min(self._above) - 1
            self._gap_age = 0
            self._raise_floor()

    def _raise_floor(self) -> None:
        while self.floor + 1 in self._above:
            self.floor += 1
            self._above.discard(self.floor)


class MetricCursor:
    """Asks for points after the newest step minus one, so a point written late for the newest
    step (eval after train, say) is still read; duplicates are dropped by (name, step)."""

    def __init__(self, after_step: int = -1) -> None:
        self.max_step = after_step
        self._seen: set[tuple[str, int]] = set()

    @property
    def after_step(self) -> int:
        return self.max_step - 1 if self.max_step >= 0 else self.max_step

    def accept(self, points: Iterable[MetricPoint]) -> list[MetricPoint]:
        fresh = []
        for point in sorted(points, key=lambda p: (p.step, p.name)):
            if point.step <= self.after_step or point.key in self._seen:
                continue
            self._seen.add(point.key)
            fresh.append(point)
            self.max_step = max(self.max_step, point.step)
        # Forget keys the server will never send again, so memory stays bounded.
        floor = self.after_step
        self._seen = {key for key in self._seen if key[1] > floor}
        return fresh


# --------------------------------------------------------------------------- the watcher


@dataclass
class WatchOptions:
    poll_interval: float = 5.0
    poll_timeout: float | None = 3600.0
    since_seq: int = 0
    after_step: int = -1
    use_sse: bool = True
    max_backoff: float = 30.0
    max_pages_per_tick: int = 50
    # A backend never reached at all (wrong URL, nothing listening, a web page) is not a
    # restart to wait out: after this many failed first tries the error is raised.
    give_up_unreached: int = 5
    # A backend that answered before and then stopped (killed, a network gone) is waited
    # for this long from its last answer, then BackendGaveUp (exit 5); None waits until
    # poll_timeout.
    give_up_after: float | None = 60.0


class BackendGaveUp(ApiError):
    """The backend stopped answering for longer than the watch waits; the job may still run."""


@dataclass
class _State:
    last_status: JobStatus | None = None
    terminal_from_event: str | None = None
    failures: int = 0
    reconnecting: bool = False
    sse_task: asyncio.Task[None] | None = None
    sse_disabled: bool = False
    sse_retry_at: float = 0.0
    queue: asyncio.Queue[JobEvent] = field(default_factory=asyncio.Queue)


class JobWatcher:
    """``async for update in JobWatcher(client, job_id).watch(): ...``"""

    def __init__(self, client: SynthClient, job_id: str, options: WatchOptions | None = None) -> None:
        self.client = client
        self.job_id = job_id
        self.options = options or WatchOptions()
        self.events = EventCursor(self.options.since_seq)
        self.metrics = MetricCursor(self.options.after_step)
        self._state = _State()
        self._metrics_read_at = 0.0  # monotonic time of the last metrics read
        self._metrics_flowing = False  # the last metrics read found points
        self._status_read_at = 0.0  # monotonic time of the last status read
        self._ticks_since_status = 0
        self._events_came = False  # events arrived since the last tick started
        # Streamed events came and the metrics written with them are not read yet: the read
        # waits for METRICS_FOLLOW_INTERVAL, across a tick's start (_between_ticks).
        self._metrics_owed = False

    async def watch(self) -> AsyncGenerator[Update, None]:
        opts = self.options
        deadline = None if opts.poll_timeout is None else time.monotonic() + opts.poll_timeout
        last_answer = time.monotonic()
        try:
            while True:
                try:
                    async for update in self._tick():
                        yield update
                    last_answer = time.monotonic()
                except ApiError as exc:
                    delay = self._delay_after(exc, time.monotonic() - last_answer)
                    yield ConnectionState(True, exc.message, delay)
                    if await self._wait(delay, deadline):
                        yield self._timeout_end()
                        return
                    continue
                if self._state.reconnecting:
                    self._state.reconnecting = False
                    self._state.failures = 0
                    yield ConnectionState(False, "connected")
                end = self._end_now()
                if end is not None:
                    # One more read so the events and metrics written with the final status
                    # are not lost (the status can land before the last events).
                    async for update in self._drain():
                        yield update
                    status, reason = end
                    yield WatchEnded(status, self._final_payload(status), reason)
                    return
                if deadline is not None and time.monotonic() >= deadline:
                    yield self._timeout_end()
                    return
                # Between ticks, forward events from the SSE stream as soon as they arrive.
                tick_end = time.monotonic() + opts.poll_interval
                if deadline is not None:
                    tick_end = min(tick_end, deadline)
                async for update in self._between_ticks(tick_end):
                    yield update
        finally:
            await self._stop_sse()

    def _delay_after(self, exc: ApiError, silent: float) -> float:
        """How long to wait before the next try after a failed tick, the backend having been
        silent for ``silent`` seconds; raises when the watch should give up instead."""
        opts = self.options
        never_reached = self._state.last_status is None
        if not exc.transient or (never_reached and self._state.failures + 1 >= opts.give_up_unreached):
            raise exc
        if opts.give_up_after is not None and silent >= opts.give_up_after:
            raise BackendGaveUp(
                f"The backend has not answered for {silent:.0f} s ({exc.message}); stopped watching job "
                f"{self.job_id}, which may still be running there.",
                "Check that the backend is up; --give-up-after S waits longer (0: until --poll-timeout)."
            ) from None
        self._state.failures += 1
        self._state.reconnecting = True
        backoff = backoff_delay(self._state.failures, opts.poll_interval, MAX_RETRY_DELAY_S)
        delay = min(opts.max_backoff, max(opts.poll_interval, backoff))
        if opts.give_up_after is not None:  # never sleep past the moment to give up
            delay = max(0.0, min(delay, opts.give_up_after - silent))
        return delay

    def _end_now(self) -> tuple[str, EndReason] | None:
        """The status the watch ends on, and why: a terminal status, or a paused job."""
        final = self._final_status()
        if final is not None:
            return final, "terminal"
        last = self._state.last_status
        if last is not None and is_paused_status(last.status):
            return last.status, "paused"
        return None

    # -- one tick --------------------------------------------------------------

    def _status_due(self) -> bool:
        state = self._state
        return (state.last_status is None or self._events_came or state.reconnecting
                or self._ticks_since_status + 1 >= STATUS_QUIET_TICKS
                or time.monotonic() - self._status_read_at >= METRICS_IDLE_INTERVAL)

    async def _tick(self) -> AsyncIterator[Update]:
        if self._status_due():
            status = await self.client.get_job(self.job_id, retries=0)
            self._status_read_at = time.monotonic()
            self._ticks_since_status = 0
            last = self._state.last_status
            previous = last.status if last else None
            self._state.last_status = status
            # A queued job's place in its backend's queue moving is news too (the dashboard shows it).
            if status.status != previous or (last is not None and status.queue_position != last.queue_position):
                yield StatusChanged(status, previous)
        else:
            self._ticks_since_status += 1
        self._events_came = False
        self._ensure_sse()
        fresh_events = False
        if not self._sse_running():
            async for update in self._poll_events():
                fresh_events = True
                yield update
        else:
            batch = self._drain_queue()
            if batch:
                fresh_events = True
                yield NewEvents(batch)
        if (fresh_events or self._metrics_flowing or self._metrics_follow_due()
                or time.monotonic() - self._metrics_read_at >= METRICS_IDLE_INTERVAL):
            points = await self._poll_metrics()
            if points:
                yield NewMetrics(points)
        self._events_came = fresh_events
        self.events.end_tick()

    async def _between_ticks(self, tick_end: float) -> AsyncIterator[Update]:
        """Streamed events as they arrive, and the metrics written with them soon after.

        A step's event and its metric points are written together, but only events stream:
        without this the chart would trail the log by up to a poll interval (a few steps of
        a fast job). After streamed events, metrics are read once the follow interval since
        the last read has passed (docs/product.md#metrics-grid), here or by the tick that
        starts first; a failed read is tried again a follow interval later."""
        while (remaining := tick_end - time.monotonic()) > 0:
            if self._metrics_owed:
                remaining = min(remaining, max(0.0, self._metrics_read_at + METRICS_FOLLOW_INTERVAL
                                               - time.monotonic()))
            batch = await self._next_streamed(remaining)
            if batch:
                self._events_came = True
                yield NewEvents(batch)
                if self._state.terminal_from_event:
                    return
                self._metrics_owed = True
            if self._metrics_follow_due():
                try:
                    points = await self._poll_metrics()
                except ApiError:
                    continue
                if points:
                    yield NewMetrics(points)

    async def _poll_events(self) -> AsyncIterator[Update]:
        for _ in range(self.options.max_pages_per_tick):
            page = await self.client.events(self.job_id, self.events.since, limit=PAGE_LIMIT, retries=0)
            fresh = self._accept_events(page)
            if fresh:
                yield NewEvents(fresh)
            if len(page) < PAGE_LIMIT or not fresh:
                return

    def _metrics_follow_due(self) -> bool:
        """Streamed events are owed their metrics, and the follow interval since the last read
        has passed; a tick that starts before then reads them when it has (the chart trailed
        the log by a step when a tick's start dropped the read)."""
        return self._metrics_owed and time.monotonic() >= self._metrics_read_at + METRICS_FOLLOW_INTERVAL

    async def _poll_metrics(self) -> list[MetricPoint]:
        self._metrics_read_at = time.monotonic()
        collected: list[MetricPoint] = []
        for _ in range(self.options.max_pages_per_tick):
            page = await self.client.metrics(self.job_id, self.metrics.after_step, limit=PAGE_LIMIT, retries=0)
            fresh = self.metrics.accept(page)
            collected.extend(fresh)
            if len(page) < PAGE_LIMIT or not fresh:
                break
        self._metrics_flowing = bool(collected)
        self._metrics_owed = False  # only once read: a failed read is tried again when due
        return collected

    async def _drain(self) -> AsyncIterator[Update]:
        await self._stop_sse()
        batch = self._drain_queue()
        if batch:
            yield NewEvents(batch)
        try:
            async for update in self._poll_events():
                yield update
            points = await self._poll_metrics()
            if points:
                yield NewMetrics(points)
        except ApiError:
            # The job is over; a failed last read loses nothing the backend does not still hold.
            pass

    def _accept_events(self, events: Iterable[JobEvent]) -> list[JobEvent]:
        fresh = self.events.accept(events)
        for event in fresh:
            final = terminal_status_of_event(event.type)
            if final and not self._state.terminal_from_event:
                self._state.terminal_from_event = final
        return fresh

    # -- end states --------------------------------------------------------------

    def _final_status(self) -> str | None:
        status = self._state.last_status
        if status is not None and is_terminal_status(status.status):
            return status.status
        return self._state.terminal_from_event

    def _final_payload(self, final: str) -> dict[str, Any]:
        payload = self._state.last_status.as_dict() if self._state.last_status else {"job_id": self.job_id}
        payload["status"] = final
        return payload

    def _timeout_end(self) -> WatchEnded:
        status = self._state.last_status.status if self._state.last_status else "unknown"
        return WatchEnded(status, self._final_payload(status), "timeout")

    async def _wait(self, delay: float, deadline: float | None) -> bool:
        """Sleep ``delay`` (bounded by the deadline); True when the deadline has passed."""
        if deadline is not None:
            delay = min(delay, max(0.0, deadline - time.monotonic()))
        await asyncio.sleep(delay)
        return deadline is not None and time.monotonic() >= deadline

    # -- server-sent events --------------------------------------------------------

    def _sse_running(self) -> bool:
        task = self._state.sse_task
        return task is not None and not task.done()

    def _ensure_sse(self) -> None:
        state = self._state
        if not self.options.use_sse or state.sse_disabled or self._sse_running():
            return
        if time.monotonic() < state.sse_retry_at:
            return
        state.sse_task = asyncio.create_task(self._run_sse(), name=f"sse-{self.job_id}")

    async def _run_sse(self) -> None:
        state = self._state
        try:
            async for event in self.client.stream_events(self.job_id, self.events.since):
                await state.queue.put(event)
        except StreamUnavailable:
            state.sse_disabled = True
        except ApiError:
            state.sse_retry_at = time.monotonic() + max(self.options.poll_interval, 2.0)

    async def _next_streamed(self, timeout: float) -> list[JobEvent]:
        if not self._sse_running() and self._state.queue.empty():
            await asyncio.sleep(timeout)
            return []
        try:
            first = await asyncio.wait_for(self._state.queue.get(), timeout)
        except TimeoutError:
            return []
        return self._accept_events([first, *self._take_queued()])

    def _drain_queue(self) -> list[JobEvent]:
        return self._accept_events(self._take_queued())

    def _take_queued(self) -> list[JobEvent]:
        items = []
        while not self._state.queue.empty():
            items.append(self._state.queue.get_nowait())
        return items

    async def _stop_sse(self) -> None:
        task = self._state.sse_task
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except (asyncio.CancelledError, Exception):
                pass
        self._state.sse_task = None
