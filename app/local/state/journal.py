"""What a job records (status, events, metrics) plus a wake-up per job for live streams.

The job runner writes through this; server-sent-event streams wait on `changed(job_id)`, so a
new event reaches the client as soon as it is stored, without a polling loop. Everything
here runs on the backend's event loop thread.
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.local.state.store import Store


class Journal:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._changed: dict[str, asyncio.Event] = {}
        self.closing = False

    def changed(self, job_id: str) -> asyncio.Event:
        """The event set at the job's next change. Take it BEFORE reading the store, so a
        change between the read and the wait is not missed."""
        return self._changed.setdefault(job_id, asyncio.Event())

    def _wake(self, job_id: str) -> None:
        event = self._changed.pop(job_id, None)
        if event is not None:
            event.set()

    def wake_all(self) -> None:
        """Server shutdown: release every waiting stream (they check `closing`)."""
        self.closing = True
        for job_id in list(self._changed):
            self._wake(job_id)

    def event(
        self,
        job_id: str,
        event_type: str,
        message: str,
        *,
        level: str = "info",
        data: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        event = self.store.append_event(job_id, event_type, message, level=level, data=data)
        self._wake(job_id)
        return event

    def metrics(self, job_id: str, step: int, points: list[dict[str, Any]]) -> None:
        self.store.add_metrics(job_id, step, points)
        self._wake(job_id)

    def commit_step(self, job_id: str, events: list[dict[str, Any]], checkpoint: dict[str, Any] | None,
                    metrics: tuple[int, list[dict[str, Any]]] | None = None) -> None:
        self.store.commit_step(job_id, events, checkpoint, metrics)
        self._wake(job_id)

    def set_running(self, job_id: str) -> bool:
        started = self.store.set_running(job_id)
        self._wake(job_id)
        return started

    def finish(self, job_id: str, status: str, event_type: str, message: str, **kwargs: Any) -> bool:
        event = self.store.finish_job(job_id, status, event_type=event_type, message=message, **kwargs)
        self._wake(job_id)
        return event is not None
