"""Runs side by side: the metrics of finished or running jobs, read whole, to overlay on a
live dashboard or to chart together (``synth-tui compare``; docs/product.md#compare-runs).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.core.client import PAGE_LIMIT, SynthClient
from app.core.history import RunHistory, RunRecord
from app.core.series import MetricStore
from app.core.streaming import MetricCursor
from app.core.wire import MetricPoint

# A run's metrics are read page by page; this many pages (of PAGE_LIMIT points) at most,
# so a run with millions of points cannot hold the comparison up for minutes.
MAX_PAGES = 200
# Runs read at once.
CONCURRENCY = 4


@dataclass
class ComparedRun:
    """One run's metrics, complete as far as read, with the label its legend shows."""

    job_id: str
    store: MetricStore = field(default_factory=MetricStore)
    truncated: bool = False  # more points than MAX_PAGES pages: the start of the run only

    @property
    def label(self) -> str:
        return self.job_id


async def read_run(client: SynthClient, job_id: str, *, max_pages: int = MAX_PAGES) -> ComparedRun:
    """Every metric point of a job, deduplicated by (name, step) as the watcher does."""
    run = ComparedRun(job_id)
    cursor = MetricCursor()
    points: list[MetricPoint] = []
    for _ in range(max_pages):
        page = await client.metrics(job_id, cursor.after_step, limit=PAGE_LIMIT)
        fresh = cursor.accept(page)
        points.extend(fresh)
        if len(page) < PAGE_LIMIT or not fresh:
            break
    else:
        run.truncated = True
    run.store.add(points)
    return run


async def read_runs(client: SynthClient, job_ids: Sequence[str]) -> list[ComparedRun]:
    """The runs in the order asked, read a few at a time; an error of any one is raised."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(job_id: str) -> ComparedRun:
        async with gate:
            return await read_run(client, job_id)

    return list(await asyncio.gather(*(one(job_id) for job_id in job_ids)))


def earlier_runs(config_path: str | None, exclude: str, backend: str, *, limit: int = 20,
                 history: RunHistory | None = None) -> list[RunRecord]:
    """Runs of the same config on the same backend from the history, newest first: what the
    dashboard offers to overlay. An unreadable history offers none."""
    if not config_path:
        return []
    try:
        records = (history or RunHistory()).list()
    except (sqlite3.Error, OSError):
        return []
    same = Path(config_path).resolve()
    return [record for record in records
            if record.job_id != exclude and record.backend == backend and record.config_path
            and Path(record.config_path).resolve() == same][:limit]
