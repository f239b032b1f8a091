"""Wire models of the backend's answers (docs/wire-contract.md#tolerant-reading).

They tolerate extra and missing fields: the hosted backend is closed source and its shapes
are partly unconfirmed, and older readers use other spellings (``state``, ``event_type``,
``msg``), so each model normalises what it is given instead of rejecting it.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.core.errors import UsageError

# The RL contract generations a backend may speak (docs/compatibility.md): "0.2" takes
# [judge] and services.judge_url, "0.5" takes [verifier] and services.verifier_url and serves
# /events/stream. A backend names those it speaks in this header of GET /rl/jobs; the
# embedded backend names both.
RL_CONTRACT_HEADER = "X-Synth-RL-Contract"
KNOWN_GENERATIONS = ("0.2", "0.5")

TERMINAL_STATUSES = frozenset({"succeeded", "failed", "cancelled", "canceled", "completed", "error"})
SUCCESS_STATUSES = frozenset({"succeeded", "completed"})
# Not an end of the job, but of a watch: SDK 0.9's streamers stop on it too. The job keeps
# its state on the backend and may be resumed there (docs/compatibility.md).
PAUSED_STATUSES = frozenset({"paused"})
TERMINAL_SUCCESS_EVENTS = frozenset(
    {"sft.job.completed", "rl.train.completed", "rl.job.completed", "workflow.completed", "training.completed"}
)
TERMINAL_FAILURE_EVENTS = frozenset(
    {"sft.job.failed", "rl.train.failed", "rl.job.failed", "workflow.failed", "training.failed"}
)
TERMINAL_CANCEL_EVENTS = frozenset({"rl.job.cancelled", "rl.job.canceled"})


def is_terminal_status(status: str | None) -> bool:
    # Differs from the SDK on purpose: its JobStreamer does not treat "error" as terminal,
    # so a job stuck in "error" streams forever.
    return (status or "").lower() in TERMINAL_STATUSES


def is_paused_status(status: str | None) -> bool:
    return (status or "").lower() in PAUSED_STATUSES


def terminal_status_of_event(event_type: str) -> str | None:
    """The final status an event announces, or None when it announces none."""
    if event_type in TERMINAL_SUCCESS_EVENTS:
        return "succeeded"
    if event_type in TERMINAL_FAILURE_EVENTS:
        return "failed"
    if event_type in TERMINAL_CANCEL_EVENTS:
        return "cancelled"
    return None


# A job id goes into URL paths (/rl/jobs/<id>/events), so only plain characters are accepted:
# "../x" would otherwise send the key to another path. The client quotes it as well.
JOB_ID_MAX_CHARS = 128
# An Idempotency-Key, printable ASCII, at most this long: the client's check and the embedded
# backend's bound (docs/hardening.md).
MAX_IDEMPOTENCY_KEY_CHARS = 255
QUEUE_POSITION_MAX = 1_000_000  # a larger queue_position is not believed (docs/wire-contract.md#queue-position)
_JOB_ID_CHARACTER = re.compile(r"[A-Za-z0-9._:-]")
JOB_ID_RULE = f"1 to {JOB_ID_MAX_CHARS} letters, digits, dots, underscores, colons or hyphens"


def job_id_problem(job_id: object) -> str | None:
    """What makes ``job_id`` unusable as a job id, or None."""
    if not isinstance(job_id, str) or not job_id:
        return "it is empty"
    if len(job_id) > JOB_ID_MAX_CHARS:
        return f"it is {len(job_id):,} characters long"
    if job_id in (".", ".."):
        return "it is a path step"
    for position, char in enumerate(job_id, start=1):
        if not _JOB_ID_CHARACTER.fullmatch(char):
            shown = f" ({char!r})" if char.isascii() and char.isprintable() else ""
            return f"character {position}{shown} is not allowed"
    return None


def check_job_id(job_id: object) -> str:
    """``job_id`` when usable, else a UsageError saying what is wrong and what a job id is."""
    problem = job_id_problem(job_id)
    if problem is None:
        return job_id  # type: ignore[return-value]
    # The value is not echoed: a mistaken paste could be a key.
    raise UsageError(
        f"Not a job id: {problem}; a job id is {JOB_ID_RULE}.",
        "Copy the job id printed when the job was created (e.g. job_3f2a…), or find it with `synth-tui history`.",
    )


class _Tolerant(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


def _as_int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _is_none(value: Any) -> bool:
    return value is None


def omitted_when_none(default: Any = None) -> Any:
    """A field the embedded backend leaves out of its answer when it has no value (rather than
    sending null): serialised only when set, so the answer's bytes stay as docs/wire-contract.md
    shows them."""
    return Field(default, exclude_if=_is_none)


class JobArtifacts(BaseModel):
    """What a succeeded job of the embedded backend left (docs/wire-contract.md#job-status)."""

    model_config = ConfigDict(extra="allow")

    model_path: str


class JobStatus(_Tolerant):
    """A job as a backend describes it: the answer of GET /rl/jobs/{id}, of a job's creation and
    each entry of the job list. The embedded backend answers with this model
    (app/local/server/backend_state.py); the hosted service's other fields are kept as extras."""

    job_id: str = ""
    status: str = "unknown"
    training_type: str | None = omitted_when_none()
    model: str | None = omitted_when_none()
    created_at: str | None = omitted_when_none()
    updated_at: str | None = omitted_when_none()
    metadata: dict[str, Any] | None = omitted_when_none()
    error: Any = omitted_when_none()
    # The job's 1-based place in its backend's queue while it is queued: an extension of the
    # embedded backend (docs/wire-contract.md#queue-position); the hosted service never sends
    # it, and anything but a whole number from 1 (or a job not queued) counts as none.
    queue_position: int | None = omitted_when_none()
    artifacts: JobArtifacts | None = omitted_when_none()

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return {"status": "unknown"}
        data = dict(data)
        data["job_id"] = str(data.get("job_id") or data.get("id") or "")
        status = data.get("status") or data.get("state") or "unknown"
        data["status"] = str(status).lower()
        for key in ("training_type", "model", "created_at", "updated_at"):
            if not isinstance(data.get(key), str):
                data.pop(key, None)
        if not isinstance(data.get("metadata"), dict):
            data.pop("metadata", None)
        if not _believed_position(data["status"], data.get("queue_position")):
            data.pop("queue_position", None)
        artifacts = data.get("artifacts")
        if not (isinstance(artifacts, dict) and isinstance(artifacts.get("model_path"), str)):
            data.pop("artifacts", None)
        return data

    @property
    def terminal(self) -> bool:
        return is_terminal_status(self.status)

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


def _believed_position(status: str, value: Any) -> bool:
    return (status == "queued" and isinstance(value, int) and not isinstance(value, bool)
            and 1 <= value <= QUEUE_POSITION_MAX)


def shown_status(status: str, queue_position: int | None = None) -> str:
    """A status in words, with the queue position while queued: "queued #3" (as narrow as the
    jobs table's status column)."""
    return f"{status} #{queue_position}" if queue_position is not None and status == "queued" else status


class JobEvent(_Tolerant):
    """One event of a job, as the events page and the event stream carry it."""

    job_id: str | None = None
    seq: int = 0
    type: str = ""
    level: str | None = None
    message: str = ""
    data: dict[str, Any] = Field(default_factory=dict)
    created_at: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return {}
        data = dict(data)
        data["seq"] = _as_int(data.get("seq"), 0)
        data["type"] = str(data.get("type") or data.get("event_type") or "")
        data["message"] = str(data.get("message") or data.get("msg") or "")
        if not isinstance(data.get("data"), dict):
            data["data"] = {} if data.get("data") is None else {"value": data["data"]}
        level = data.get("level")
        data["level"] = str(level).lower() if level else None
        return data


class MetricPoint(_Tolerant):
    """One point of a job's metrics page."""

    job_id: str | None = omitted_when_none()
    name: str = ""
    value: float | None = None
    step: int = 0
    epoch: int | None = None
    phase: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)
    created_at: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return {}
        data = dict(data)
        # Differs from the SDK on purpose: it parses `int(step or -1)`, which drops step 0.
        data["step"] = _as_int(data.get("step"), 0)
        try:
            data["value"] = float(data["value"]) if data.get("value") is not None else None
        except (TypeError, ValueError):
            data["value"] = None
        if not isinstance(data.get("data"), dict):
            data["data"] = {}
        if not isinstance(data.get("job_id"), str):
            data.pop("job_id", None)
        data["epoch"] = _as_int(data["epoch"], 0) if data.get("epoch") is not None else None
        return data

    @property
    def key(self) -> tuple[str, int]:
        return (self.name, self.step)


def parse_iso(value: str | None) -> datetime | None:
    """A backend timestamp (ISO-8601, ``Z`` allowed) as an aware datetime; None when absent or
    unreadable. Naive times are taken as local."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.astimezone()


def items_of(body: Any, *keys: str) -> list[Any]:
    """The list inside a page body: ``{"events": [...]}``, a bare list, or a nested ``data``."""
    if isinstance(body, list):
        return body
    if not isinstance(body, dict):
        return []
    for key in (*keys, "data", "items", "results"):
        value = body.get(key)
        if isinstance(value, list):
            return value
        if isinstance(value, dict):
            nested = items_of(value, *keys)
            if nested:
                return nested
    return []
