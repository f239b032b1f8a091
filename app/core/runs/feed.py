"""A job's live feed for the dashboard: the watcher on its own thread, drained in batches.

The job's watch (network, :mod:`app.core.runs.watch`) and its sinks (the run folder's events
file, the run history, and this feed's batch) run on a background thread with its own event
loop, so the UI thread never waits on either. The UI drains what arrived since its last look
as one coalesced :class:`FeedBatch`. ``on_ready`` tells it when there is
something to drain (once, until it drains), so a UI with nothing new does no work at all.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.core.api.client import SynthClient
from app.core.api.streaming import (
    ConnectionState,
    NewEvents,
    NewMetrics,
    StatusChanged,
    Update,
    WatchEnded,
    WatchOptions,
)
from app.core.api.wire import JobEvent, JobStatus, MetricPoint, is_terminal_status
from app.core.runs.history import RunHistory
from app.core.runs.watch import EventsFile, HistoryProgress, WatchSink, watch


@dataclass
class FeedBatch:
    events: list[JobEvent] = field(default_factory=list)
    points: list[MetricPoint] = field(default_factory=list)
    status: JobStatus | None = None
    connection: ConnectionState | None = None
    ended: WatchEnded | None = None
    error: BaseException | None = None
    # A status read in this batch was not terminal. The batch keeps only the last status, and
    # a busy UI may take several reads at once: the job was still seen running.
    active_seen: bool = False

    def __bool__(self) -> bool:
        return bool(self.events or self.points or self.status or self.connection or self.ended or self.error)


class JobFeed(WatchSink):
    def __init__(self, make_client: Callable[[], SynthClient], job_id: str, options: WatchOptions,
                 stream_path: Path | None = None, history: RunHistory | None = None,
                 on_ready: Callable[[], object] | None = None) -> None:
        """``on_ready``: called on the feed's thread when the batch stops being empty; it must
        only hand the news to the UI's thread (e.g. post a message)."""
        self.make_client = make_client
        self.job_id = job_id
        self.options = options
        # What every watch writes (app.core.runs.watch's sinks): the events file, the history.
        self.files = EventsFile(stream_path, options.since_seq) if stream_path is not None else None
        self.progress = HistoryProgress(job_id, history) if history is not None else None
        self.events_seen = 0
        self._lock = threading.Lock()
        self._batch = FeedBatch()
        self.on_ready = on_ready
        self._told = False  # on_ready was called for the current batch
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = threading.Event()

    # -- the UI side --------------------------------------------------------------------

    def drain(self) -> FeedBatch:
        with self._lock:
            batch, self._batch = self._batch, FeedBatch()
            self._told = False
        return batch

    def stop(self) -> None:
        """Stop watching (the job keeps running); safe from any thread, idempotent."""
        self._stopped.set()
        loop, task = self._loop, self._task
        if loop is not None and task is not None and not loop.is_closed():
            loop.call_soon_threadsafe(task.cancel)

    # -- the background side -------------------------------------------------------------

    def run(self) -> None:
        """Blocking: call on a worker thread."""
        if self._stopped.is_set():
            return
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to the UI, never raised on the thread
            if not isinstance(exc, asyncio.CancelledError):
                with self._lock:
                    self._batch.error = exc
                    tell = self._should_tell()
                self._tell(tell)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        if self._stopped.is_set():
            return
        sinks: list[WatchSink] = [sink for sink in (self.files, self.progress) if sink is not None]
        try:
            async with self.make_client() as client:
                await watch(client, self.job_id, self.options, [*sinks, self])
        except asyncio.CancelledError:
            pass

    @property
    def last_metrics(self) -> dict[str, float]:
        return self.progress.last_metrics if self.progress is not None else {}

    def take(self, update: Update) -> None:
        """A sink of the watch: the update joins the batch the UI drains next."""
        with self._lock:
            batch = self._batch
            if isinstance(update, NewEvents):
                batch.events.extend(update.events)
                self.events_seen += len(update.events)
            elif isinstance(update, NewMetrics):
                batch.points.extend(update.points)
            elif isinstance(update, StatusChanged):
                batch.status = update.status
                batch.active_seen = batch.active_seen or not is_terminal_status(update.status.status)
            elif isinstance(update, ConnectionState):
                batch.connection = update
            elif isinstance(update, WatchEnded):
                batch.ended = update
            tell = self._should_tell()
        self._tell(tell)

    def _should_tell(self) -> bool:
        """Under the lock: the batch has news the UI was not told of yet."""
        if self._told or self.on_ready is None or not self._batch:
            return False
        self._told = True
        return True

    def _tell(self, tell: bool) -> None:
        if tell and self.on_ready is not None:
            try:
                self.on_ready()
            except RuntimeError:  # the UI's event loop has closed: nobody is left to tell
                pass
