"""The jobs view's logic (docs/product.md#jobs-view): every job a backend lists, as rows to
sort and filter, with each job's last mean score read from its metrics.

Both front ends use it: ``synth-tui jobs`` (app/screens/jobs.py) and ``synth-tui jobs --no-tui``
(app/headless/listings.py). No Textual here.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.core.api.client import SynthClient
from app.core.api.errors import ApiError, RlNotOffered
from app.core.api.job_paging import JOB_PAGE_SIZE, MAX_LISTED_JOBS, SORTS
from app.core.api.results import JobList
from app.core.api.streaming import MetricCursor
from app.core.api.wire import JobStatus, is_terminal_status, parse_iso, shown_status
from app.core.redact import printable
from app.core.runs.jobs import payload_model
from app.core.runs.series import default_metric

NO_VALUE = "—"
# Jobs whose metrics are read at once, and pages of metrics read per job and refresh.
SCORE_CONCURRENCY = 4
SCORE_PAGE_LIMIT = 1000
SCORE_PAGES_PER_READ = 20
# Most jobs whose scores one refresh reads (the rows first in the shown order); the rest follow.
SCORES_PER_REFRESH = 100
# Running first, then waiting, then the ends: what needs attention leads a sort by status.
_STATUS_RANK = {"running": 0, "queued": 1, "pending": 1, "paused": 2, "failed": 3, "error": 3,
                "cancelled": 4, "canceled": 4, "succeeded": 5, "completed": 5}


@dataclass(frozen=True)
class JobRow:
    """One job of the list; ``score`` is None until its metrics were read (or when it has none)."""

    job_id: str
    status: str
    model: str | None = None
    created_at: str | None = None
    score: float | None = None
    queue_position: int | None = None  # while queued on an embedded backend (JobStatus.queue_position)

    @property
    def terminal(self) -> bool:
        return is_terminal_status(self.status)

    @property
    def shown_status(self) -> str:
        """The status as the list shows it: "queued #3" while the job waits in its backend's queue."""
        return shown_status(self.status, self.queue_position)


def row_of(job: JobStatus) -> JobRow:
    """A row from a listed job: the model as the job names it (``model``), else as its payload
    does (``payload_model``) when the listing carries one."""
    extra: Mapping[str, Any] = job.model_extra or {}
    model: Any = job.model or extra.get("base_model")
    if not isinstance(model, str) or not model:
        for payload in (extra.get("payload"), extra.get("request"), extra):
            model = payload_model(payload) if isinstance(payload, Mapping) else None
            if model:
                break
    return JobRow(job.job_id, printable(job.status), printable(model) if model else None, job.created_at,
                  queue_position=job.queue_position)


def merge_scores(rows: Iterable[JobRow], scores: ScoreBook) -> list[JobRow]:
    return [dataclasses.replace(row, score=scores.score(row.job_id)) for row in rows]


def sort_rows(rows: Iterable[JobRow], by: str) -> list[JobRow]:
    """Newest first, or grouped by status (running first), score (best first) or model (A→Z),
    newest first within a group; a job without the value sorts last."""
    newest = sorted(rows, key=lambda r: _created_key(r), reverse=True)
    if by == "status":  # the queue in its order: the next to start first
        return sorted(newest, key=lambda r: (_STATUS_RANK.get(r.status, 6), r.status, r.queue_position or 0))
    if by == "score":
        return sorted(newest, key=lambda r: (r.score is None, -(r.score or 0.0)))
    if by == "model":
        return sorted(newest, key=lambda r: (r.model is None, (r.model or "").lower()))
    return newest


def _created_key(row: JobRow) -> float:
    when = parse_iso(row.created_at)
    return when.timestamp() if when else float("-inf")


def next_sort(by: str) -> str:
    return SORTS[(SORTS.index(by) + 1) % len(SORTS)] if by in SORTS else SORTS[0]


def filter_rows(rows: Iterable[JobRow], text: str) -> list[JobRow]:
    """The rows whose id, status or model holds ``text`` (case-insensitive); all for no text."""
    needle = text.strip().lower()
    if not needle:
        return list(rows)
    return [r for r in rows if needle in r.job_id.lower() or needle in r.status.lower()
            or needle in (r.model or "").lower()]


# The table's columns, and the order in which a narrow terminal gives them up: the model first,
# then the created time; the job id is cut (with "…") before that, never below JOB_MIN_WIDTH.
# The status and the score always stay.
JOB_COLUMNS = ("Job", "Status", "Model", "Created", "Score")
JOB_MIN_WIDTH = 14
_GIVEN_UP = ("Model", "Created")


def fit_columns(room: int, widths: Sequence[int], *, padding: int = 2) -> dict[str, int]:
    """The columns shown in ``room`` cells, each with its width (``widths`` in JOB_COLUMNS
    order, each column taking ``padding`` more): a column that does not fit is left out, the
    least important first, and the job id is narrowed before the created time goes, so the
    score stays on screen at any width."""
    shown = dict(zip(JOB_COLUMNS, widths, strict=True))

    def over() -> int:
        return sum(width + padding for width in shown.values()) - room

    for name in _GIVEN_UP:
        if over() <= 0:
            break
        if name == "Created":  # the id gives up its tail before the time goes
            shown["Job"] = max(JOB_MIN_WIDTH, shown["Job"] - over())
            if over() <= 0:
                break
        del shown[name]
    if over() > 0:
        shown["Job"] = max(JOB_MIN_WIDTH, shown["Job"] - over())
    return shown


def shown_created(created_at: str | None, *, short: bool = False) -> str:
    """Local time to the minute; ``short`` drops the year (80 columns)."""
    when = parse_iso(created_at)
    if when is None:
        return NO_VALUE
    return when.astimezone().strftime("%m-%d %H:%M" if short else "%Y-%m-%d %H:%M")


def short_model(model: str | None) -> str:
    """The model without its organisation (``Qwen/Qwen3-0.6B`` → ``Qwen3-0.6B``): its size is
    what a narrow column must keep."""
    return model.rsplit("/", 1)[-1] if model else NO_VALUE


def shown_score(score: float | None) -> str:
    return NO_VALUE if score is None else f"{score:.3f}"


def score_metric(names: Iterable[str]) -> str | None:
    """The job's mean-score metric, chosen as the chart chooses its default series; a job with
    no score or reward metric has none (its loss is no score)."""
    name = default_metric(sorted(names))
    return name if name and ("score" in name or "reward" in name) else None


class _JobScore:
    """What has been read of one job's metrics: the cursor and each metric's newest point."""

    def __init__(self) -> None:
        self.cursor = MetricCursor()
        self.latest: dict[str, tuple[int, float]] = {}
        self.complete = False  # a finished job read to its end: never read again

    def add(self, points: Iterable[Any]) -> None:
        for point in self.cursor.accept(points):
            if point.value is None:
                continue
            step_value = (point.step, point.value)
            if point.name not in self.latest or point.step >= self.latest[point.name][0]:
                self.latest[point.name] = step_value

    def score(self) -> float | None:
        name = score_metric(self.latest)
        return self.latest[name][1] if name else None


class ScoreBook:
    """The last mean score of each job, read from its metrics a page at a time after the step
    already read, so a refresh of a running job reads only what is new, and a finished job is
    read once."""

    def __init__(self) -> None:
        self._jobs: dict[str, _JobScore] = {}
        self.failures = 0

    def score(self, job_id: str) -> float | None:
        known = self._jobs.get(job_id)
        return known.score() if known else None

    def wanted(self, rows: Sequence[JobRow], limit: int = SCORES_PER_REFRESH) -> list[JobRow]:
        """The rows whose metrics a refresh reads: in the order given, not yet read to the end."""
        return [row for row in rows if not (row.job_id in self._jobs and self._jobs[row.job_id].complete)][:limit]

    async def update(self, client: SynthClient, rows: Sequence[JobRow], *,
                     concurrency: int = SCORE_CONCURRENCY) -> None:
        """Read the new metrics of ``rows``, ``concurrency`` jobs at a time. A job whose
        metrics cannot be read keeps no score (shown as unknown); that is not an error of the list."""
        gate = asyncio.Semaphore(concurrency)

        async def read(row: JobRow) -> None:
            async with gate:
                await self._read(client, row)

        await asyncio.gather(*(read(row) for row in rows))

    async def _read(self, client: SynthClient, row: JobRow) -> None:
        known = self._jobs.setdefault(row.job_id, _JobScore())
        try:
            for _ in range(SCORE_PAGES_PER_READ):
                page = await client.metrics(row.job_id, known.cursor.after_step, limit=SCORE_PAGE_LIMIT, retries=0)
                before = dict(known.latest), known.cursor.max_step
                known.add(page)
                if len(page) < SCORE_PAGE_LIMIT or (dict(known.latest), known.cursor.max_step) == before:
                    known.complete = row.terminal
                    return
        except ApiError:
            self.failures += 1
            known.complete = row.terminal  # a finished job without readable metrics: not asked again


@dataclass(frozen=True)
class JobListing:
    """One read of the backend's job list: its rows (scores not yet merged) and what to say."""

    rows: list[JobRow]
    pages: int = 1
    note: str | None = None


class ProbesForAttach(Protocol):
    """What the jobs view asks of the launch session (``LaunchSession.probe_for_attach``),
    named here so the runs do not import the launch."""

    async def probe_for_attach(self, client: SynthClient) -> object:
        """Ask the backend whether it offers RL jobs; RlNotOffered when it does not."""
        ...


async def probe_jobs_backend(session: ProbesForAttach, client: SynthClient) -> None:
    """The attach probe (``LaunchSession.probe_for_attach``): a backend without RL jobs says so,
    with a way out that fits a listing."""
    try:
        await session.probe_for_attach(client)
    except RlNotOffered as exc:
        exc.hint = ("List the jobs of a backend that offers /api/rl/jobs: --backend http://HOST:PORT "
                    "(`synth-tui backend` runs one here).")
        raise


async def read_jobs(client: SynthClient, *, status: str | None = None, max_jobs: int = MAX_LISTED_JOBS,
                    page_size: int = JOB_PAGE_SIZE) -> JobListing:
    listed: JobList = await client.list_all_jobs(max_jobs=max_jobs, page_size=page_size, status=status, retries=0)
    return JobListing([row_of(job) for job in listed.jobs], listed.pages, listed.note)


def table_lines(rows: Sequence[JobRow]) -> list[str]:
    """The headless table: JOB STATUS MODEL CREATED SCORE, columns as wide as their longest value."""
    cells = [(r.job_id, r.shown_status, r.model or NO_VALUE, shown_created(r.created_at), shown_score(r.score))
             for r in rows]
    header = ("JOB", "STATUS", "MODEL", "CREATED", "SCORE")
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(header))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
            for line in [header, *cells]]


__all__ = ["NO_VALUE", "SORTS", "JobListing", "JobRow", "ProbesForAttach", "ScoreBook", "filter_rows", "merge_scores",
           "next_sort", "probe_jobs_backend", "read_jobs", "row_of", "short_model", "shown_created", "shown_score",
           "sort_rows", "table_lines"]
