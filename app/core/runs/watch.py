"""A job's watch: one watcher, every consumer a sink fed the same updates, and the files every
watch writes (``events.jsonl`` in the run folder, the run history's rows).

Both front ends read it with the launch service's client (``watch_client`` in
app/core/launch/service.py: no retries of its own, the watcher's reconnects); the dashboard's
feed (:mod:`app.core.runs.feed`) and the headless printer are sinks of it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

# The watcher and the history are imported when a watch starts: the first screen is drawn
# before httpx is imported (docs/performance.md#first-paint).
if TYPE_CHECKING:
    from app.core.api.client import SynthClient
    from app.core.api.streaming import Update, WatchOptions
    from app.core.runs.history import RunHistory


class WatchSink:
    """A consumer of a watch: ``start`` before the first update, every update in order, then
    ``finish`` however the watch ends (an error, a cancel). Both default to nothing."""

    def start(self) -> None:
        """Called once, before the watch reads anything."""

    def take(self, update: Update) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """Called once, however the watch ended."""


class EventsFile(WatchSink):
    """The run folder's ``events.jsonl``: every event, one JSON line each. From the start the
    file is rewritten; a watch resumed from a cursor appends to it."""

    def __init__(self, path: Path, since_seq: int = 0) -> None:
        self.path = path
        self.since_seq = since_seq
        self._stream: IO[str] | None = None

    def open(self) -> IO[str]:
        from app.core.paths import open_private

        if self._stream is None:
            self._stream = open_private(self.path, "w" if self.since_seq == 0 else "a", encoding="utf-8")
        return self._stream

    def start(self) -> None:
        self.open()  # at once: a watch from the start replaces an older file even before an event

    def take(self, update: Update) -> None:
        from app.core.api.streaming import NewEvents

        if isinstance(update, NewEvents) and update.events:
            stream = self.open()
            stream.writelines(json.dumps(e.model_dump(mode="json")) + "\n" for e in update.events)
            stream.flush()

    def finish(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None


@dataclass
class HistoryProgress(WatchSink):
    """The run history kept current: status on every change, the last metrics, the end.
    A write that fails never stops the watch; its warning is kept (once) for the front end."""

    job_id: str
    history: RunHistory | None = None
    last_metrics: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def take(self, update: Update) -> None:
        from app.core.api.streaming import NewMetrics, StatusChanged, WatchEnded
        from app.core.runs.jobs import remember
        from app.core.runs.model import model_path

        if isinstance(update, NewMetrics):
            self.last_metrics.update({p.name: p.value for p in update.points if p.value is not None})
            return
        metrics = dict(self.last_metrics)
        if isinstance(update, StatusChanged):
            status = update.status.status
            warning = remember(lambda h: h.record_progress(self.job_id, status=status, last_metrics=metrics),
                               self.history)
        elif isinstance(update, WatchEnded):
            ended, path = update, model_path(update.payload)
            warning = remember(lambda h: h.record_progress(self.job_id, status=ended.status, last_metrics=metrics,
                                                           final=ended.reason == "terminal", model_path=path),
                               self.history)
        else:
            return
        if warning and warning not in self.warnings:
            self.warnings.append(warning)


def run_sinks(job_id: str, since_seq: int = 0) -> tuple[EventsFile, HistoryProgress]:
    """What every watch writes, whichever front end shows it: the events file and the history."""
    from app.core.paths import run_dir
    from app.core.runs.history import RunHistory

    return EventsFile(run_dir(job_id) / "events.jsonl", since_seq), HistoryProgress(job_id, RunHistory())


async def watch(client: SynthClient, job_id: str, options: WatchOptions, sinks: Sequence[WatchSink]) -> None:
    """Watch the job until its watch ends; every update goes to every sink, in order, and
    every sink started is finished however the watch ends."""
    from app.core.api.streaming import JobWatcher

    started: list[WatchSink] = []
    try:
        for sink in sinks:
            sink.start()
            started.append(sink)
        async with contextlib.aclosing(JobWatcher(client, job_id, options).watch()) as updates:
            async for update in updates:
                for sink in sinks:
                    sink.take(update)
    finally:
        for sink in started:
            sink.finish()
