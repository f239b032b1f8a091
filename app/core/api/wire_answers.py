"""The backend's answers, one pydantic model per shape (docs/wire-contract.md#answer-models).

The embedded backend declares each as its route's `response_model` (app/local/server/), so its
/openapi.json says what every route answers and FastAPI checks the answer before sending it;
the client (app/core/api/client.py, results.py, app/core/runs/rollouts.py) reads the same
models. The hosted service may send more (or spell a field otherwise): a page's normaliser
takes what wire.py's tolerant reading takes, and fields a model does not declare are ignored
unless it says otherwise. The job itself is wire.JobStatus, an event wire.JobEvent, a metric
point wire.MetricPoint.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from app.core.api.wire import JobEvent, JobStatus, MetricPoint, items_of, omitted_when_none


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore")


def _dicts(items: list[Any]) -> list[dict[str, Any]]:
    return [item for item in items if isinstance(item, dict)]


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# -- health and the job routes ---------------------------------------------------------------------


class BackendHealth(_Answer):
    """GET /api/health: the embedded backend answers, with no key."""

    status: str
    service: str


class JobPage(_Answer):
    """GET /rl/jobs: a page of jobs, newest first (docs/wire-contract.md#job-list). The embedded
    backend sends only `jobs`; `has_more` and `next_cursor` are read when a backend sends them
    (`model_fields_set` says whether it did)."""

    jobs: list[JobStatus]
    has_more: bool | None = omitted_when_none()
    next_cursor: str | int | None = omitted_when_none()

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, body: Any) -> Any:
        page: dict[str, Any] = {"jobs": _dicts(items_of(body, "jobs"))}
        if isinstance(body, dict):
            if isinstance(body.get("has_more"), bool):
                page["has_more"] = body["has_more"]
            if "next_cursor" in body:
                cursor = body["next_cursor"]
                page["next_cursor"] = cursor if isinstance(cursor, (str, int)) and not isinstance(cursor, bool) \
                    else None
        return page


class JobAction(_Answer):
    """POST /rl/jobs/{id}/cancel (and the embedded backend's /start): the job's status after it.
    The hosted service may send only some of these."""

    job_id: str | None = None
    status: str | None = None
    message: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, body: Any) -> Any:
        body = body if isinstance(body, dict) else {}
        return {key: body[key] for key in ("job_id", "status", "message") if isinstance(body.get(key), str)}


class EventPage(_Answer):
    """GET /rl/jobs/{id}/events as JSON: the events after `since_seq`."""

    events: list[JobEvent]

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, body: Any) -> Any:
        return {"events": _dicts(items_of(body, "events"))}


class MetricsPage(_Answer):
    """GET /rl/jobs/{id}/metrics: the points after `after_step`."""

    job_id: str | None = omitted_when_none()
    points: list[MetricPoint]

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, body: Any) -> Any:
        page: dict[str, Any] = {"points": _dicts(items_of(body, "points", "metrics"))}
        if isinstance(body, dict) and isinstance(body.get("job_id"), str):
            page["job_id"] = body["job_id"]
        return page


# -- kept rollouts (docs/wire-contract.md#rollouts) -----------------------------------------------


class RolloutSummaryAnswer(BaseModel):
    """One rollout of a page; app/core/runs/rollouts.summary_from reads it tolerantly."""

    model_config = ConfigDict(extra="allow")

    rollout_id: str
    phase: str
    step: int
    index: int
    seed: int | None
    reward: float | None
    turns: int
    created_at: str


class RolloutPage(_Answer):
    """GET /rl/jobs/{id}/rollouts: a page of summaries, and the cursor of the next (null: the last)."""

    job_id: str | None = omitted_when_none()
    rollouts: list[RolloutSummaryAnswer]
    next_after: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, body: Any) -> Any:
        page = body if isinstance(body, dict) else {"rollouts": body}
        items = page.get("rollouts")
        usable = []
        for item in items if isinstance(items, list) else []:
            try:  # one odd summary leaves the others readable
                usable.append(RolloutSummaryAnswer.model_validate(item))
            except ValidationError:
                continue
        normalised: dict[str, Any] = {"rollouts": usable, "next_after": _text(page.get("next_after"))}
        if isinstance(page.get("job_id"), str):
            normalised["job_id"] = page["job_id"]
        return normalised


class _OfAJob(BaseModel):
    job_id: str


class RolloutRecord(RolloutSummaryAnswer, _OfAJob):  # this order: job_id first, as sent
    """GET /rl/jobs/{id}/rollouts/{rollout_id}: the job, the summary's fields and the record the
    trainer kept (app/local/training/rollouts.py; its turns: rollout_record.py). The client reads
    it tolerantly (app/core/runs/rollouts.rollout_from)."""

    turns_kept: int | None = omitted_when_none()
    turns_cut: int | None = omitted_when_none()
    trajectory: list[dict[str, Any]] | None = omitted_when_none()


# -- verification (docs/wire-contract.md#task-app-verification, #model-verification) ----------------


class VerifyAttempt(BaseModel):
    """One try of one held key with one header style on one endpoint of the task app."""

    model_config = ConfigDict(extra="allow")

    endpoint: str
    header: str
    key_index: int
    key_prefix: str
    status: int | None
    ok: bool
    error: str | None
    detail: str | None = omitted_when_none()
    latency_ms: float


class VerifyAnswer(_Answer):
    """POST /rl/verify_task_app. The hosted service's attempts are objects of its own: the
    client keeps them as sent (results.VerifyResult), reading only `any_ok` and
    `candidates_first15` through this model."""

    any_ok: bool
    endpoint_base_url: str
    candidates_first15: list[str]
    attempts: list[VerifyAttempt]
    detail: str | None = omitted_when_none()


class ModelFindingAnswer(_Answer):
    message: str
    fix: str | None


MAX_FINDINGS_READ = 20  # of each kind, read by the client
MAX_FIELD_CHARS_READ = 2000


class ModelCheckAnswer(_Answer):
    """POST /rl/verify_model: can a job of this backend train the model (app/local/server/model_check.py).
    The backend's answer is checked as declared; the client reads another backend's through
    `read`, which keeps what is usable of it."""

    ok: bool
    model: str
    trains: str
    problems: list[ModelFindingAnswer]
    warnings: list[ModelFindingAnswer]
    path: str | None
    source: str | None
    bytes: int | None
    parameters: int | None
    architecture: str | None
    template: str | None
    seconds: float
    finished: bool = True  # false: the check did not finish within the backend's bound (a warning says so)

    @classmethod
    def read(cls, body: Any) -> ModelCheckAnswer | None:
        """What the client takes from an answer (results.ModelVerifyResult): None without a
        boolean `ok`; a field of the wrong type as absent, texts cut, at most 20 findings of each
        kind; `finished` only false when the backend said so."""
        if not isinstance(body, dict) or not isinstance(body.get("ok"), bool):
            return None
        texts = {key: _short_text(body.get(key)) for key in ("trains", "path", "source", "architecture", "template")}
        return cls(ok=body["ok"], model=_short_text(body.get("model")) or "", trains=texts["trains"] or "",
                   problems=_findings(body.get("problems")), warnings=_findings(body.get("warnings")),
                   path=texts["path"], source=texts["source"], bytes=_size(body.get("bytes")),
                   parameters=_size(body.get("parameters")), architecture=texts["architecture"],
                   template=texts["template"], seconds=_seconds(body.get("seconds")),
                   finished=body.get("finished") is not False)


def _findings(value: Any) -> list[ModelFindingAnswer]:
    items = value if isinstance(value, list) else []
    return [ModelFindingAnswer(message=str(item.get("message") or "no message"), fix=_short_text(item.get("fix")))
            for item in items[:MAX_FINDINGS_READ] if isinstance(item, dict)]


def _short_text(value: Any) -> str | None:
    return value[:MAX_FIELD_CHARS_READ] if isinstance(value, str) and value.strip() else None


def _size(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _seconds(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


# -- the chat endpoint (OpenAI's chat completion, as far as the embedded policy answers it) ---------


class ChatChoice(_Answer):
    index: int
    message: dict[str, Any]
    logprobs: dict[str, Any] | None  # OpenAI's {"content": [{token, logprob, bytes, top_logprobs}]}, when asked
    finish_reason: Literal["stop", "tool_calls", "length"]


class ChatUsage(_Answer):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatCompletion(_Answer):
    """POST /api/v1/chat/completions (and its path form): the policy's answer to a task app."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: ChatUsage
