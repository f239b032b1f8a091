"""A job's run as this machine saved it (the feed's ``events.jsonl`` in the run's folder), for
a dashboard that cannot ask the backend any more: a demo's backend stops with the demo.

Metrics are not saved beside the events; the steps' summaries the embedded backend writes
(``rl.train.step``, ``rl.eval.summary``) carry the step's means, so the charts are rebuilt
from those when present (docs/product.md#run-history).
"""

from __future__ import annotations

import json
import stat
from dataclasses import dataclass
from pathlib import Path

from app.core.api.wire import JobEvent, MetricPoint, parse_iso
from app.core.paths import run_dir
from app.core.runs.feed import FeedBatch

# Event type -> (phase, {data field: metric name}) for the metrics a saved event carries.
METRICS_IN_EVENTS: dict[str, tuple[str, dict[str, str]]] = {
    "rl.train.step": ("train", {"mean_score": "train.mean_score", "loss": "train.loss", "entropy": "train.entropy"}),
    "rl.eval.summary": ("eval", {"mean_score": "eval.mean_score"}),
}


@dataclass(frozen=True)
class SavedRun:
    path: Path  # the events file read
    batch: FeedBatch  # its events, and the metric points rebuilt from them

    @property
    def metrics_kept(self) -> bool:
        return bool(self.batch.points)


def events_path(job_id: str) -> Path:
    return run_dir(job_id) / "events.jsonl"


def read_saved_run(job_id: str) -> SavedRun | None:
    """The job's saved events, or None when this machine kept none. A line that is not an
    event (a write cut short) is skipped: what was saved around it is still shown."""
    path = events_path(job_id)
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return None  # a folder or a FIFO (whose read would block) holds no saved run
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    events: list[JobEvent] = []
    for line in lines:
        try:
            item = json.loads(line)
            if isinstance(item, dict):
                events.append(JobEvent.model_validate(item))
        except (ValueError, RecursionError):  # RecursionError: a line nested deeper than Python's stack
            continue
    if not events:
        return None
    return SavedRun(path, FeedBatch(events=events, points=metrics_from_events(events)))


def metrics_from_events(events: list[JobEvent]) -> list[MetricPoint]:
    """The step means the saved step summaries carry, as the metrics they were reported as."""
    points: list[MetricPoint] = []
    for event in events:
        known = METRICS_IN_EVENTS.get(event.type)
        step = event.data.get("step")
        if known is None or not isinstance(step, int) or isinstance(step, bool):
            continue
        phase, fields = known
        for field, name in fields.items():
            value = event.data.get(field)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                # An evaluation's interval rides along (its summary carries ci95, as its point does).
                extra = {"ci95": event.data["ci95"]} if phase == "eval" and "ci95" in event.data else {}
                points.append(MetricPoint(name=name, value=float(value), step=step, phase=phase,
                                          created_at=event.created_at, data=extra))
    return points


def run_span(events: list[JobEvent]) -> int | None:
    """Seconds from the first saved event to the last, by their created_at (the backend's
    clock): how long the saved run lasted, for the header's clock. None without two times."""
    times = [at for at in (parse_iso(event.created_at) for event in events) if at is not None]
    if len(times) < 2:
        return None
    return max(0, int((max(times) - min(times)).total_seconds()))
