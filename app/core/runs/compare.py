"""Runs side by side: the metrics of finished or running jobs, read whole, to overlay on a
live dashboard or to chart together (``synth-tui compare``; docs/product.md#compare-runs).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from app.core.api.client import PAGE_LIMIT, SynthClient
from app.core.api.streaming import MetricCursor
from app.core.api.wire import MetricPoint, check_job_id
from app.core.errors import UsageError
from app.core.runs.history import RunHistory, RunRecord
from app.core.runs.intervals import Interval
from app.core.runs.series import MetricStore, chart_panels
from app.core.state_files import StateFileError

# A run's metrics are read page by page; this many pages (of PAGE_LIMIT points) at most,
# so a run with millions of points cannot hold the comparison up for minutes.
MAX_PAGES = 200
# Runs read at once.
CONCURRENCY = 4
# A run's label in a chart's legend: at least this many characters of its id after "job_".
SHORT_LABEL_CHARS = 6


@dataclass
class ComparedRun:
    """One run's metrics, complete as far as read (its legend label: ``run_labels``)."""

    job_id: str
    store: MetricStore = field(default_factory=MetricStore)
    truncated: bool = False  # more points than MAX_PAGES pages: the start of the run only


def run_labels(job_ids: Sequence[str]) -> dict[str, str]:
    """Short labels that tell the runs of one chart apart: each id without its "job_" (every
    hosted id has it), cut to SHORT_LABEL_CHARS characters or as many more as the runs need
    to differ; an id at most two characters longer stays whole (docs/product.md#compare-runs).
    A legend in a chart's border has room for a few words per line; the full ids are in the
    screen's header or the overlay picker."""
    bare = {job_id: job_id.removeprefix("job_") or job_id for job_id in job_ids}
    labels = {}
    for job_id, name in bare.items():
        others = [other for key, other in bare.items() if key != job_id]
        length = SHORT_LABEL_CHARS
        while length < len(name) and any(other[:length] == name[:length] for other in others):
            length += 1
        # An ellipsis that would hide a character or two saves nothing: the whole id then.
        labels[job_id] = name if len(name) <= length + 2 else name[:length] + "…"
    return labels


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
    except (StateFileError, sqlite3.Error, OSError):
        return []
    same = Path(config_path).resolve()
    return [record for record in records
            if record.job_id != exclude and record.backend == backend and record.config_path
            and Path(record.config_path).resolve() == same][:limit]


@dataclass(frozen=True)
class CompareRow:
    metric: str
    job_id: str
    points: int
    last: float | None
    best: float | None
    step: int | None
    interval: Interval | None = None  # the last value's 95 % interval (an evaluation's, when sent)


def compare_rows(runs: Sequence[ComparedRun]) -> list[CompareRow]:
    """Per metric (in the grid's chart order) and run (in the order given): what a table of
    the comparison shows. A run without the metric has a row of dashes."""
    names: list[str] = []
    for run in runs:
        names += [name for name in run.store.names() if name not in names]
    ordered = [name for panel in chart_panels(names) for name in panel.series]
    rows = []
    for name in ordered:
        for run in runs:
            series = run.store.get(name)
            if series is None or not len(series):
                rows.append(CompareRow(name, run.job_id, 0, None, None, None))
                continue
            readouts = series.readouts()
            rows.append(CompareRow(name, run.job_id, len(series), readouts.last, readouts.best, readouts.step,
                                   readouts.interval))
    return rows


class Attaches(Protocol):
    """What a comparison asks of the launch session (``LaunchSession.attach``), named here so
    the runs do not import the launch."""

    def attach(self, job_id: str) -> object:
        """Set up a watch of an existing job: its backend and key."""
        ...


def open_comparison(session: Attaches, job_ids: Sequence[str]) -> list[str]:
    """Both front ends' start of ``synth-tui compare``: the ids checked (they go into URL
    paths), each once, and the session set up as an attach to the first (its backend and key,
    from the run history when it is there)."""
    ids = list(dict.fromkeys(check_job_id(job_id) for job_id in job_ids))
    if len(ids) < 2:
        raise UsageError("compare needs at least two different job ids.",
                         "synth-tui compare JOB_A JOB_B (see synth-tui history or synth-tui jobs).")
    session.attach(ids[0])
    return ids
