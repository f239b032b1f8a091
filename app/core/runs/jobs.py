"""A job once it exists: what a watch of it knows beyond the feed, and how it is remembered.

Both front ends build a :class:`JobContext` here (after a submit, an attach, a rerun, a pick
in the history) and write the run history through :func:`remember`, so the model shown and
the policy for a history that cannot be written are the same everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core.errors import ExitCode, SynthTuiError
from app.core.paths import open_private, private_dir, run_dir

# What the cancel dialog says of a job, running or queued (the jobs list and the dashboard).
CANCEL_DETAIL = "The backend stops the job, or takes it out of the queue; its events so far are kept."

if TYPE_CHECKING:  # the feed imports the watcher; a context is built long before a feed runs
    from app.core.runs.feed import FeedBatch
    from app.core.runs.history import RunHistory, RunRecord
    from app.core.runs.intervals import Interval

# The run history (SQLite) and the export's csv are imported when first used: the first screen
# reads neither (docs/performance.md#first-paint).


def payload_model(payload: Mapping[str, Any] | None) -> str | None:
    """The model a job trains, as the payload names it (``base_model`` for a base model,
    ``model`` for a fine-tuned one: docs/wire-contract.md#job-creation)."""
    data = (payload or {}).get("data")
    if not isinstance(data, Mapping):
        return None
    model = data.get("base_model") or data.get("model")
    return str(model) if model else None


def planned_steps(payload: Mapping[str, Any] | None) -> int | None:
    """The training steps the job is to run, from its config (``num_epochs`` ×
    ``iterations_per_epoch``; docs/wire-contract.md#job-creation), when the payload says."""
    data = (payload or {}).get("data")
    config = data.get("config") if isinstance(data, Mapping) else None
    training = config.get("training") if isinstance(config, Mapping) else None
    if not isinstance(training, Mapping):
        return None
    epochs, iterations = training.get("num_epochs"), training.get("iterations_per_epoch")
    if isinstance(epochs, bool) or isinstance(iterations, bool) or not isinstance(epochs, int) \
            or not isinstance(iterations, int) or epochs <= 0 or iterations <= 0:
        return None
    return epochs * iterations


@dataclass(frozen=True)
class JobContext:
    """What the dashboard knows about its job beyond the feed."""

    job_id: str
    payload: dict[str, Any] | None = None
    config_path: str | None = None
    model: str | None = None
    # A finished run shown from fixed data instead of the backend (snapshots, README pictures).
    replay: FeedBatch | None = None

    @property
    def planned_steps(self) -> int | None:
        return planned_steps(self.payload)

    @classmethod
    def of(cls, job_id: str, payload: dict[str, Any] | None = None, config_path: str | None = None) -> JobContext:
        return cls(job_id, payload, config_path, payload_model(payload))

    @classmethod
    def from_record(cls, record: RunRecord) -> JobContext:
        return cls.of(record.job_id, record.payload, record.config_path)


def remember(write: Callable[[RunHistory], None], history: RunHistory | None = None) -> str | None:
    """Write to the run history. The history is a convenience: one that cannot be written
    (a full disk, a locked file) never fails a run. The reason is returned, for a warning, as
    is the note of a damaged history moved aside on the way (told once: docs/product.md#damaged-state)."""
    import sqlite3

    from app.core.runs.history import RunHistory, take_repair_notes
    from app.core.state_files import StateFileError

    try:
        write(history or RunHistory())
    except StateFileError as exc:
        return " ".join([*take_repair_notes(), f"synth-tui could not update the run history: {exc.render()}"])
    except (sqlite3.Error, OSError) as exc:
        return f"synth-tui could not update the run history: {exc}"
    return " ".join(take_repair_notes()) or None


EMBEDDED_STOPPED = "its embedded backend stopped with the app that started it, before the job ended"


# How the history records a job stopped with its embedded backend: the user ended the app (or
# the demo) that ran it; the job did not fail (issue 37: a rerun quit with the demo read "failed").
STOPPED_STATUS = "cancelled"


def stop_backend_jobs(history: RunHistory, backend: str, why: str = EMBEDDED_STOPPED) -> None:
    """An embedded backend stops with the app (or the demo) that started it, and every job it
    still ran with it (a rerun's original too): each is recorded cancelled, with why, so none
    stays "running" in the history for ever, and `synth-tui history` does not ask a backend
    that is gone about it."""
    for record in history.list():
        if record.backend == backend and not record.final_status:
            history.record_progress(record.job_id, status=STOPPED_STATUS, final=True, note=why)


class StoppedWithItsBackend(SynthTuiError):
    """An attach to a job whose embedded backend stopped with the app that ran it: nothing
    answers at its URL any more (a demo's port is new each run), so no watch can help."""

    exit_code = ExitCode.BACKEND

    def __init__(self, record: RunRecord) -> None:
        super().__init__(
            f"Job {record.job_id} ran in an embedded backend that has stopped ({record.end_note}); "
            f"the job ended with it ({record.status}).",
            f"Its events are kept in {run_dir(record.job_id)}: `synth-tui history` opens it read-only; "
            "`synth-tui demo` trains a new one.")


def read_history(job_id: str) -> RunRecord | None:
    """The job's record, if it was launched or watched from this machine; an unreadable
    history counts as none (attach then needs --backend, and says so)."""
    import sqlite3

    from app.core.runs.history import RunHistory
    from app.core.state_files import StateFileError

    try:
        return RunHistory().get(job_id)
    except (StateFileError, sqlite3.Error, OSError):
        return None


def export_run(job_id: str, points: Iterable[tuple[str, int, float, Interval | None]], when: datetime) -> Path:
    """The dashboard's export: the job's events as streamed (events.jsonl) and its metrics
    (metrics.csv: name, step, value, and an evaluation's 95 % interval, ci95_low and ci95_high,
    empty where the point carried none) in a new private folder of the run's; returns it."""
    import csv
    import shutil

    folder = private_dir(run_dir(job_id) / f"export-{when:%Y%m%d-%H%M%S}")
    stream = run_dir(job_id) / "events.jsonl"
    with open_private(folder / "events.jsonl", "wb") as copy:
        if stream.exists():
            with stream.open("rb") as source:
                shutil.copyfileobj(source, copy)
    with open_private(folder / "metrics.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["name", "step", "value", "ci95_low", "ci95_high"])
        writer.writerows([name, step, repr(value), *((repr(ci.low), repr(ci.high)) if ci else ("", ""))]
                         for name, step, value, ci in points)
    return folder


__all__ = ["JobContext", "export_run", "payload_model", "read_history", "remember"]
