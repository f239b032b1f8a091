"""The embedded backend: the hosted Synth RL API (docs/wire-contract.md#embedded-backend) on one machine.

Everything lives under /api and needs `Authorization: Bearer <api_key>`, except:
- `GET /api/health` (reachability, no secret involved);
- the OpenAI-compatible chat endpoint, `POST /api/v1/chat/completions` (also
  `/v1/chat/completions`), which serves the job's current policy to the task app. The trainer
  gives the task app `{base}/api/v1/chat/completions?cid=trace_<job_id>:<rollout_id>` (contract
  0.2) or the path form `{base}/api/v1/<job_id>/trace_<job_id>:<rollout_id>`, to which the task
  app appends /chat/completions (0.4/0.5; docs/rollout-contracts.md). The cid names the job
  and the rollout, and while that rollout is in flight the cid itself is the credential (the
  task app holds no Synth key). With a Bearer key any job's policy can be queried, finished
  jobs included (their last checkpoint is loaded). The endpoint talks to the policy only
  through the seam of app/local/policies (docs/embedded-policy.md).

Jobs left queued or running by a previous run of the backend on the same state file are
resumed from their last checkpoint as the backend starts (trainer.Trainer.resume): those that
were running first, then the queue in its order.

At most `max_jobs` jobs train at once and `max_rollouts` rollouts are in flight across them;
the other jobs wait `queued`, their place in the queue given as `queue_position`
(app/local/training/admission.py, docs/architecture.md#admission).

The routes live in module-level APIRouters and reach the backend object of the app serving
the request through the `Backend` dependency (app.state.backend); the job routes are registered
once and served under both /api/rl/jobs and /api/learning/jobs. Bodies are the pydantic models of
app/local/server/bodies.py, validated by FastAPI; a request it finds invalid is answered by the one
handler of app/local/server/errors.py in its route's words (REFUSALS). /openapi.json is FastAPI's own.

Errors are always `{"detail": ...}` JSON. Job events are also served as server-sent events
when the client asks for `text/event-stream`.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import hmac
import json
import random
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any, Literal

import httpx
from fastapi import APIRouter, Depends, FastAPI, Header, HTTPException, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse, StreamingResponse

from app.core.api.failures import describe_http_error, response_detail
from app.core.api.urls import without_credentials
from app.core.api.wire import JOB_ID_MAX_CHARS, KNOWN_GENERATIONS, RL_CONTRACT_HEADER
from app.core.config.trainable import short_repr
from app.core.redact import held_key_prefix, scrub_key_fragments
from app.local import policies
from app.local.policies.base import Act, Parallel, Policy, PolicyCannotAct, PolicyFailed
from app.local.policies.tabular.policy import TabularPolicy
from app.local.server.api_schemas import BODY_ERRORS, error_responses
from app.local.server.bodies import (
    CHAT_REFUSAL,
    JOB_REFUSAL,
    VERIFY_MODEL_REFUSAL,
    VERIFY_REFUSAL,
    ChatRequest,
    Cid,
    IdempotencyKey,
    JobCreate,
    VerifyModelRequest,
    VerifyRequest,
)
from app.local.server.errors import Refusal, install_json_errors
from app.local.server.guard import RequestGuard
from app.local.server.model_check import check_model_bounded
from app.local.state.checkpoints import Checkpoints
from app.local.state.journal import Journal
from app.local.state.rollout_store import BadCursor
from app.local.state.store import TERMINAL_STATUSES, IdempotencyConflict, Store, UnknownCursor
from app.local.training.admission import Admission, default_max_jobs, lm_devices, rollout_pool
from app.local.training.answers import NOT_COMPRESSED, SMALL_ANSWER_BYTES, AnswerTooLarge, send_capped
from app.local.training.retry import client_limits
from app.local.training.rollout_contract import parse_correlation_id
from app.local.training.trainer import (
    InvalidJobPayload,
    Trainer,
    answer_of,
    plan_from_payload,
    policy_settings,
    training_plan,
)

MAX_CURSOR = 2**62  # seq and step cursors: SQLite integers are 64-bit
ROLLOUT_PAGE = 100  # rollouts per page unless `limit` says (docs/wire-contract.md#rollouts)
ROLLOUT_PAGE_MAX = 500
CHAT_BODY_LIMIT = 4 << 20  # chat histories can be long; every other body stays under guard.MAX_BODY_BYTES
TERMINAL_EVENT_TYPES = {"rl.job.completed", "rl.job.failed", "rl.job.cancelled"}
SSE_HEARTBEAT_S = 10.0
CHAT_PATHS = ("/api/v1/chat/completions", "/v1/chat/completions")
# The path form of rollout contract 0.4/0.5: the trial (our job id) and the correlation id in the path.
CHAT_PATH_FORMS = ("/api/v1/{trial}/{cid}/chat/completions", "/v1/{trial}/{cid}/chat/completions")
_CHAT_PATH_FORM = re.compile(r"^(/api)?/v1/[^/]+/[^/]+/chat/completions$")
VERIFY_TIMEOUT = httpx.Timeout(10.0, connect=5.0)
HEADER_STYLES: dict[str, Callable[[str], dict[str, str]]] = {
    "X-API-Key": lambda key: {"X-API-Key": key},
    "X-API-Keys": lambda key: {"X-API-Keys": key},
    "Authorization: Bearer": lambda key: {"Authorization": f"Bearer {key}"},
}


class _Backend:
    """What the routes share; the store, trainer and HTTP client exist while serving."""

    def __init__(self, api_key: str, db_path: Path, env_api_keys: Sequence[str], public_base_url: str | None,
                 listen_url: str | None = None, infra_events: bool = False, resume: bool = True,
                 trainer: str = policies.DEFAULT_POLICY, admission: Admission | None = None,
                 parallel: Parallel = policies.ONE_PROCESS):
        self.api_key = api_key
        self.db_path = Path(db_path)
        self.env_api_keys = [k for k in env_api_keys if k]
        self.public_base_url = public_base_url.rstrip("/") if public_base_url else None
        # Where task apps reach a job resumed at start-up, before any request said the address.
        self.listen_url = listen_url.rstrip("/") if listen_url else None
        self.infra_events = infra_events
        self.resume = resume
        self.trainer_choice = trainer  # auto | lm | tabular (policies.make_policy)
        self.parallel = parallel  # the lm trainer's processes (docs/design/data-parallel.md)
        self.admission = admission or Admission()  # jobs at once, rollouts in flight (app/local/training/admission.py)
        # Beside the state file: every job's policy, one folder per recorded step.
        self.checkpoints = Checkpoints(self.db_path.parent / "checkpoints")
        self.store: Store
        self.journal: Journal
        self.trainer: Trainer | None = None
        self.http: httpx.AsyncClient

    def hold_env_keys(self, keys: Sequence[str]) -> None:
        """Hold these task-app keys from now on (``--backend local`` hands them over in memory:
        the backend runs in the flow's own process, docs/compatibility.md)."""
        self.env_api_keys[:] = [k for k in keys if k]
        if self.trainer is not None:
            self.trainer.env_api_keys[:] = self.env_api_keys

    def begin_shutdown(self) -> None:
        """Called by servers.py as uvicorn starts shutting down: end live streams and
        training now, or uvicorn would wait for them."""
        if self.trainer is not None:
            self.trainer.stop_all()
            self.journal.wake_all()

    def live_trainer(self) -> Trainer:
        """The trainer, which exists while the app serves (between lifespan start and end)."""
        if self.trainer is None:
            raise HTTPException(503, "The embedded backend is not serving (starting or shutting down)")
        return self.trainer

    def bearer_ok(self, request: Request) -> bool:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.api_key.encode())

    def job_or_404(self, job_id: str) -> dict[str, Any]:
        job = self.store.get_job(job_id)
        if job is None:
            raise HTTPException(404, f"Job {job_id} not found")
        return job

    def model_path(self, job_id: str) -> Path | None:
        """The folder of the job's last recorded policy, if there is one."""
        state = self.store.get_checkpoint(job_id)
        folder = self.checkpoints.step_dir(job_id, int(state["step"])) if state else None
        return folder if folder is not None and folder.is_dir() else None

    def saved_policy(self, job: dict[str, Any]) -> Policy:
        """The last recorded policy of a job that is not training in this process (blocking)."""
        plan = plan_from_payload(job["payload"])
        folder = self.model_path(job["id"])
        if folder is not None:
            return policies.load(folder, policy_settings(job["id"], plan))
        # A job finished before checkpoints kept its table in the database.
        return TabularPolicy.from_json(self.store.get_policy(job["id"]))

    def view(self, job: dict[str, Any]) -> dict[str, Any]:
        view = _job_view(job)
        # An extension of the embedded backend (docs/wire-contract.md#queue-position): the
        # job's 1-based place in the queue, only while it waits for a slot.
        position = self.admission.position(job["id"]) if job["status"] == "queued" and self.trainer else None
        if position is not None:
            view["queue_position"] = position
        folder = self.model_path(job["id"]) if job["status"] == "succeeded" else None
        if folder is not None:
            view["artifacts"] = {"model_path": str(folder)}
        return view

    def resume_interrupted(self, trainer: Trainer) -> None:
        """Jobs a previous run of the backend left queued or running go on (Trainer.resume):
        the running ones first, then the queued ones in the order they were submitted, so the
        queue keeps its order across a restart."""
        base = self.public_base_url or self.listen_url
        left = [job for job in map(self.store.get_job, self.store.interrupted) if job is not None]
        for job in sorted(left, key=lambda j: j["status"] != "running"):  # stable: created order kept
            job_id = job["id"]
            if not self.resume:
                self.store.fail_interrupted(job_id, "it ran in a backend that stops with the run that started it "
                                                    "(the demo or --backend local)")
                continue
            try:
                plan = plan_from_payload(job["payload"])
            except InvalidJobPayload as exc:
                self.store.fail_interrupted(job_id, str(exc))
                continue
            if base is None:
                self.store.fail_interrupted(job_id, "it does not know the address task apps reach it at")
                continue
            trainer.resume(job_id, plan, f"{base}/api/v1")


def create_backend_app(
    *, api_key: str, db_path: Path, env_api_keys: Sequence[str], public_base_url: str | None = None,
    listen_url: str | None = None, infra_events: bool = False, resume: bool = True,
    trainer: str = policies.DEFAULT_POLICY, max_jobs: int | None = None, max_rollouts: int | None = None,
    parallel: Parallel = policies.ONE_PROCESS,
) -> FastAPI:
    """`infra_events`: imitate the hosted service's hatchet.* and rl.runtime.modal.* events
    (off unless asked: docs/embedded-policy.md#events). `resume`: go on with the jobs a previous
    run left running (a backend of the demo or `--backend local` stops with its run: False).
    `trainer`: which policy new jobs train, auto | lm | tabular (docs/embedded-policy.md).
    `max_jobs`, `max_rollouts`: jobs trained at once and rollouts in flight across them (None:
    sized to the machine; docs/architecture.md#admission)."""
    if not api_key:
        raise ValueError("the embedded backend needs an API key")
    if trainer not in policies.TRAINER_CHOICES:
        raise ValueError(f"trainer must be one of {', '.join(policies.TRAINER_CHOICES)} (got {trainer!r})")
    if parallel.processes > 1 and trainer != "lm":
        raise ValueError(f"{parallel.processes} processes train the lm trainer only (got trainer {trainer!r})")
    admission = Admission(default_max_jobs() if max_jobs is None else max_jobs, max_rollouts or 0,
                          functools.partial(lm_devices, parallel.processes))
    b = _Backend(api_key, db_path, env_api_keys, public_base_url, listen_url, infra_events, resume, trainer,
                 admission, parallel)
    app = FastAPI(title="synth-tui embedded backend", lifespan=_lifespan)
    app.state.backend = b  # what every route gets through its `Backend` dependency
    app.state.begin_shutdown = b.begin_shutdown
    app.state.hold_env_keys = b.hold_env_keys
    app.state.admission_limits = (b.admission.max_jobs, b.admission.max_rollouts)
    install_json_errors(app, REFUSALS)
    app.add_middleware(RequestGuard, limits={path: CHAT_BODY_LIMIT for path in CHAT_PATHS},
                       pattern_limits=[(_CHAT_PATH_FORM, CHAT_BODY_LIMIT)])
    for router in (public, api, chat):
        app.include_router(router)
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    b: _Backend = app.state.backend
    b.store = Store(b.db_path)
    b.journal = Journal(b.store)
    b.admission = b.admission.fresh()  # an app served again starts with an empty queue
    # The trainer has its own client, sized so that a rollout never waits for a pooled
    # connection inside its time limit (admission.rollout_pool); verify uses the other.
    async with httpx.AsyncClient(limits=client_limits()) as http, \
            httpx.AsyncClient(limits=rollout_pool(b.admission)) as rollout_http:
        b.http = http
        b.trainer = Trainer(b.journal, b.env_api_keys, rollout_http, b.checkpoints, other_secrets=[b.api_key],
                            policy_kind=b.trainer_choice, infra_events=b.infra_events, admission=b.admission,
                            parallel=b.parallel)
        b.resume_interrupted(b.trainer)
        try:
            yield
        finally:
            tasks = b.trainer.stop_all()
            b.journal.wake_all()
            await asyncio.gather(*tasks, return_exceptions=True)
            b.trainer = None
            b.store.close()


def _backend_of(request: Request) -> _Backend:
    backend: _Backend = request.app.state.backend
    return backend


# The backend object of the app serving the request: a parameter of every route.
Backend = Annotated[_Backend, Depends(_backend_of)]


def require_key(request: Request, b: Backend) -> None:
    """Everything under /api but /api/health needs the Bearer key; checked before anything of
    the request is validated, so a stranger learns nothing but 401."""
    if not b.bearer_ok(request):
        raise HTTPException(401, "Missing or invalid API key: send Authorization: Bearer <SYNTH_API_KEY>",
                            headers={"WWW-Authenticate": "Bearer"})


EVENT_STREAM = "text/event-stream"


class EventStreamResponse(StreamingResponse):
    """Server-sent events; as a route's response_class it puts text/event-stream in /openapi.json."""

    media_type = EVENT_STREAM


def _job_view(job: dict[str, Any]) -> dict[str, Any]:
    data = job["payload"].get("data", {})
    view = {
        "job_id": job["id"],
        "status": job["status"],
        "training_type": "rl",
        "model": data.get("model") or data.get("base_model"),
        "created_at": job["created_at"],
        "updated_at": job["updated_at"],
        # Jobs stored before URLs with credentials were refused must not show them.
        "metadata": {"task_app_url": without_credentials(data.get("endpoint_base_url")), **job["metadata"]},
    }
    if job["error"]:
        view["error"] = job["error"]
    return view


# -- the routes: registered once in these routers, served by every app create_backend_app makes ------

public = APIRouter()  # no key
api = APIRouter(prefix="/api", dependencies=[Depends(require_key)])
rl = APIRouter(prefix="/rl")  # under /api
jobs = APIRouter()  # under /api/rl/jobs and /api/learning/jobs: the same data, the same event seq numbers
chat = APIRouter()  # the policy, for task apps: its own credentials (chat_access)


@public.get("/api/health")
async def health() -> dict[str, Any]:
    return {"status": "ok", "service": "synth-tui-embedded-backend"}


@rl.post("/verify_task_app", responses=error_responses(401, *BODY_ERRORS))
async def verify_task_app(body: VerifyRequest, b: Backend) -> dict[str, Any]:
    return await _verify(b, body.endpoint_base_url)


@rl.post("/verify_model", responses=error_responses(401, *BODY_ERRORS))
async def verify_model(body: VerifyModelRequest, b: Backend) -> dict[str, Any]:
    """Can a job of this backend train the model, as named (docs/wire-contract.md#model-verification)?
    Answered within model_check.MODEL_CHECK_TIMEOUT_S; the weights are not loaded."""
    return await check_model_bounded(body.model.strip(), (body.chat_template or "").strip() or None,
                                     body.learning_rate, b.trainer_choice, trainer_mode=body.trainer_mode)


@rl.post("/jobs", status_code=201,
         responses={200: {"description": "The job this Idempotency-Key created before, for the same body",
                          "content": {"application/json": {"schema": {"type": "object"}}}},
                    **error_responses(400, 401, 409, 503, *BODY_ERRORS)})
async def create_job(job: JobCreate, request: Request, b: Backend,
                     idempotency_key: Annotated[IdempotencyKey, Header(
                         alias="Idempotency-Key",
                         description="the same key and body answer the same job (200); another body, 409")] = None,
                     ) -> JSONResponse:
    body = await request.json()  # as sent, for the store and the key's hash (FastAPI parsed it once)
    plan = training_plan(job, body["data"]["config"])
    body_hash = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    try:
        stored, created = b.store.create_job(f"job_{secrets.token_hex(12)}", body, body_hash, idempotency_key)
    except IdempotencyConflict as exc:
        raise HTTPException(409, f"Idempotency-Key {exc.key!r} was already used for job {exc.job_id} "
                                 "with a different request body; send a new key to create another job") from None
    if not created:
        return JSONResponse(b.view(stored), status_code=200)
    b.journal.event(stored["id"], "rl.job.created", f"Job created: train {plan.model} on {plan.task_url}",
                    data={"model": plan.model, "task_app_url": plan.task_url, "total_steps": plan.total_steps})
    base = b.public_base_url or str(request.base_url).rstrip("/")
    b.live_trainer().start(stored["id"], plan, f"{base}/api/v1")
    return JSONResponse(b.view(stored), status_code=201)


@jobs.get("", responses=error_responses(400, 401, 422))
async def list_jobs(response: Response, b: Backend, limit: int = Query(50, ge=1, le=500),
                    status: str | None = None,
                    after: str | None = Query(None, min_length=1, max_length=JOB_ID_MAX_CHARS)) -> dict[str, Any]:
    # Both generations' configs are accepted here, and both event stream paths served.
    response.headers[RL_CONTRACT_HEADER] = ", ".join(KNOWN_GENERATIONS)
    try:  # `after`: the id of the last job of the page before (docs/wire-contract.md#job-list)
        listed = b.store.list_jobs(limit=limit, status=status, after=after)
    except UnknownCursor:
        raise HTTPException(400, "after must be the job_id of a job of this backend (the last job of the "
                                 "page before); no job has this id") from None
    return {"jobs": [b.view(j) for j in listed]}


@jobs.get("/{job_id}", responses=error_responses(401, 404))
async def get_job(job_id: str, b: Backend) -> dict[str, Any]:
    return b.view(b.job_or_404(job_id))


@jobs.post("/{job_id}/start", responses=error_responses(401, 404))
async def start_job(job_id: str, b: Backend) -> dict[str, Any]:
    job = b.job_or_404(job_id)
    return {"job_id": job_id, "status": job["status"], "message": "Jobs start when they are created"}


@jobs.post("/{job_id}/cancel", responses=error_responses(401, 404, 409, 503))
async def cancel_job(job_id: str, b: Backend) -> JSONResponse:
    job = b.job_or_404(job_id)
    if job["status"] in TERMINAL_STATUSES:
        return JSONResponse({"detail": f"Job {job_id} already {job['status']}; only queued or running jobs "
                                       "can be cancelled", "status": job["status"]}, status_code=409)
    await b.live_trainer().cancel(job_id)
    job = b.job_or_404(job_id)
    return JSONResponse({"job_id": job_id, "status": job["status"], "message": "Job cancelled"})


# JSON or an event stream, by the Accept header: no response model.
@jobs.get("/{job_id}/events", response_model=None,
          responses={200: {"description": "The events after since_seq: JSON, or an event stream "
                                          "when the client accepts text/event-stream",
                           "content": {"application/json": {"schema": {"type": "object"}},
                                       EVENT_STREAM: {"schema": {"type": "string"}}}},
                     **error_responses(401, 404, 422)})
async def events(request: Request, job_id: str, b: Backend, since_seq: int = Query(0, ge=-1, le=MAX_CURSOR),
                 limit: int = Query(200, ge=1, le=1000)) -> Response | dict[str, Any]:
    b.job_or_404(job_id)
    if "text/event-stream" in request.headers.get("accept", ""):
        return _event_stream(b, job_id, _resume_from(request, since_seq))
    return {"events": b.store.events(job_id, since_seq=since_seq, limit=limit)}


@jobs.get("/{job_id}/events/stream", response_class=EventStreamResponse, responses=error_responses(401, 404, 422))
async def event_stream(request: Request, job_id: str, b: Backend,
                       since_seq: int = Query(0, ge=-1, le=MAX_CURSOR)) -> EventStreamResponse:
    b.job_or_404(job_id)
    return _event_stream(b, job_id, _resume_from(request, since_seq))


@jobs.get("/{job_id}/metrics", responses=error_responses(401, 404, 422))
async def metrics(job_id: str, b: Backend, after_step: int = Query(-1, ge=-1, le=MAX_CURSOR),
                  limit: int = Query(200, ge=1, le=1000)) -> dict[str, Any]:
    b.job_or_404(job_id)
    return {"job_id": job_id, "points": b.store.metrics(job_id, after_step=after_step, limit=limit)}


# A bad query is a 400 naming it (ROLLOUTS_REFUSAL), as docs/wire-contract.md#rollouts says.
@jobs.get("/{job_id}/rollouts", responses=error_responses(400, 401, 404))
async def rollouts(
    job_id: str, b: Backend,
    step: Annotated[int | None, Query(ge=0, le=MAX_CURSOR, description=(
        "only the rollouts of this training step (and the eval after it)"))] = None,
    phase: Literal["train", "eval"] | None = None,
    limit: Annotated[int, Query(ge=1, le=ROLLOUT_PAGE_MAX)] = ROLLOUT_PAGE,
    after: Annotated[str | None, Query(min_length=1, description="the next_after of the page before")] = None,
) -> dict[str, Any]:
    b.job_or_404(job_id)
    try:
        items, next_after = b.store.rollouts.list(job_id, step=step, phase=phase, limit=limit, after=after)
    except BadCursor:
        raise HTTPException(400, "after must be the next_after of a page before, as the backend sent it "
                                 "(<step>.<train|eval>.<index>)") from None
    return {"job_id": job_id, "rollouts": items, "next_after": next_after}


@jobs.get("/{job_id}/rollouts/{rollout_id}", responses=error_responses(401, 404))
async def rollout(job_id: str, rollout_id: str, b: Backend) -> dict[str, Any]:
    b.job_or_404(job_id)
    found = b.store.rollouts.get(job_id, rollout_id)
    if found is None:
        raise HTTPException(404, f"Rollout {short_repr(rollout_id)} of job {job_id} not found: it was never "
                                 "kept, or was dropped to keep the job's rollouts within their size cap")
    return {"job_id": job_id, **found}


ROLLOUTS_REFUSAL = Refusal("Invalid rollout query", problem_words={
    "step": f"must be a whole number from 0 to {MAX_CURSOR:,}",
    "phase": "must be train or eval",
    "limit": f"must be a whole number from 1 to {ROLLOUT_PAGE_MAX}",
    "after": "must be the next_after of a page before, or left out",
}, parameter_status=400)


def _resume_from(request: Request, since_seq: int) -> int:
    # A reconnecting EventSource sends Last-Event-ID: it wins over the query string.
    last = request.headers.get("last-event-id", "").strip()
    return int(last) if last.isdigit() and len(last) <= 18 else since_seq


def _event_stream(b: _Backend, job_id: str, since_seq: int) -> EventStreamResponse:
    async def frames() -> AsyncIterator[str]:
        cursor = since_seq
        while True:
            changed = b.journal.changed(job_id)  # before reading: no lost wake-up
            batch = b.store.events(job_id, since_seq=cursor, limit=500)
            for event in batch:
                cursor = event["seq"]
                yield f"id: {cursor}\nevent: {event['type']}\ndata: {json.dumps(event)}\n\n"
                if event["type"] in TERMINAL_EVENT_TYPES:
                    return
            if batch:
                continue
            job = b.store.get_job(job_id)
            if job is None or job["status"] in TERMINAL_STATUSES or b.journal.closing:
                return  # the terminal event was before since_seq, or the server is stopping
            try:
                await asyncio.wait_for(changed.wait(), SSE_HEARTBEAT_S)
            except TimeoutError:
                yield ": heartbeat\n\n"

    return EventStreamResponse(frames(), headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _verify(b: _Backend, url: str) -> dict[str, Any]:
    """Try every key the backend holds with every header style on /health and /task_info."""
    if not b.env_api_keys:
        return {"any_ok": False, "endpoint_base_url": url, "candidates_first15": [], "attempts": [],
                "detail": "The embedded backend holds no ENVIRONMENT_API_KEY to try; start it with the key "
                          "the task app expects"}
    base = url.rstrip("/")

    async def attempt(endpoint: str, index: int, key: str, style: str) -> dict[str, Any]:
        started = time.perf_counter()
        result: dict[str, Any] = {"endpoint": endpoint, "header": style, "key_index": index,
                                  "key_prefix": held_key_prefix(key)}
        try:
            # Read up to SMALL_ANSWER_BYTES: a status and a detail are all that is kept (app/local/training/answers.py).
            request = b.http.build_request("GET", base + endpoint, timeout=VERIFY_TIMEOUT,
                                           headers={**HEADER_STYLES[style](key), **NOT_COMPRESSED})
            resp = await send_capped(b.http, request, SMALL_ANSWER_BYTES)
            result.update(status=resp.status_code, ok=resp.status_code == 200, error=None)
            if resp.status_code != 200:
                # A foreign task app may echo part of the key it was sent: never relay that.
                result["detail"] = scrub_key_fragments(response_detail(resp, 200), b.env_api_keys)
        except httpx.HTTPError as exc:
            result.update(status=None, ok=False, error=f"{type(exc).__name__}: {describe_http_error(exc)}")
        except AnswerTooLarge as exc:
            result.update(status=None, ok=False, error=f"the answer {exc.words()}")
        result["latency_ms"] = round((time.perf_counter() - started) * 1000, 1)
        return result

    combos = [(index, key, style) for index, key in enumerate(b.env_api_keys) for style in HEADER_STYLES]
    attempts = await asyncio.gather(
        *(attempt(endpoint, *combo) for combo in combos for endpoint in ("/health", "/task_info"))
    )
    # A combination passes when both endpoints answered 200 to the same key and header.
    passing = {(a["key_index"], a["header"]) for a in attempts if a["ok"] and a["endpoint"] == "/health"}
    passing &= {(a["key_index"], a["header"]) for a in attempts if a["ok"] and a["endpoint"] == "/task_info"}
    return {"any_ok": bool(passing), "endpoint_base_url": url,
            "candidates_first15": [held_key_prefix(k) for k in b.env_api_keys], "attempts": attempts}


def _cid_of(request: Request) -> str:
    """The correlation id, as sent: in the path (rollout contract 0.4/0.5), else ?cid= (0.2)."""
    return str(request.path_params.get("cid", request.query_params.get("cid", "")))


def chat_access(request: Request, b: Backend) -> None:
    """The Bearer key, or the inference URL of a rollout in flight (its cid is the credential):
    checked before anything of the request is validated."""
    job_id, rollout_id = parse_correlation_id(_cid_of(request))
    run = b.trainer.runs.get(job_id) if b.trainer else None
    if not (b.bearer_ok(request) or (run is not None and rollout_id in run.open_rollouts)):
        raise HTTPException(401, "Missing or invalid credentials: send Authorization: Bearer <SYNTH_API_KEY>, "
                                 "or call the inference URL the trainer gave for a rollout in flight",
                            headers={"WWW-Authenticate": "Bearer"})


CHAT_ERRORS = error_responses(400, 401, 404, 503, *BODY_ERRORS)
CID_WORDS = "trace_<job_id>:<rollout_id> (or with cid_ or eval_), as the trainer writes it into the inference URL"


@chat.post("/api/v1/chat/completions", dependencies=[Depends(chat_access)], responses=CHAT_ERRORS)
@chat.post("/v1/chat/completions", dependencies=[Depends(chat_access)], responses=CHAT_ERRORS)
async def chat_completions(body: ChatRequest, request: Request, b: Backend,
                           cid: Annotated[Cid, Query(description=CID_WORDS)]) -> dict[str, Any]:
    """Rollout contract 0.2: the correlation id as ?cid=."""
    return await _answer_chat(b, request, cid)


@chat.post("/api/v1/{trial}/{cid}/chat/completions", dependencies=[Depends(chat_access)], responses=CHAT_ERRORS)
@chat.post("/v1/{trial}/{cid}/chat/completions", dependencies=[Depends(chat_access)], responses=CHAT_ERRORS)
async def chat_completions_in_path(
    body: ChatRequest, request: Request, b: Backend,
    trial: Annotated[str, PathParam(description="the job id, as the trainer writes it into the inference URL")],
    cid: Annotated[Cid, PathParam(description=CID_WORDS)],
) -> dict[str, Any]:
    """Rollout contract 0.4/0.5: the trial (our job id) and the correlation id in the path."""
    job_id, _ = parse_correlation_id(cid)
    if trial != job_id:
        raise HTTPException(400, f"The inference URL's path names trial {short_repr(trial)} but its correlation "
                                 f"id names job {short_repr(job_id)}: /v1/<job_id>/trace_<job_id>:<rollout_id>"
                                 "/chat/completions; use the inference URL the trainer gave")
    query_cid = request.query_params.get("cid")
    if query_cid and query_cid != cid:
        raise HTTPException(400, "The inference URL carries two different correlation ids, one in its path "
                                 "and one as ?cid=; use the inference URL the trainer gave")
    return await _answer_chat(b, request, cid)


async def _answer_chat(b: _Backend, request: Request, cid: str) -> dict[str, Any]:
    """The policy's answer to a checked chat request (ChatRequest): the job's live policy while
    it trains, else its last recorded one. The policy answers in a worker thread, whichever it
    is: a language model generates for seconds, and /health, events and other rollouts must not
    wait for it."""
    body = await request.json()  # as sent (FastAPI parsed it once): the policy reads it whole
    job_id, rollout_id = parse_correlation_id(cid)
    run = b.trainer.runs.get(job_id) if b.trainer else None
    try:
        if run is not None:
            act = await asyncio.to_thread(run.act, rollout_id, body, cid)
            model = run.plan.model
        else:
            job = b.job_or_404(job_id)
            policy = await asyncio.to_thread(b.saved_policy, job)
            act = await asyncio.to_thread(policy.act, body["messages"], body.get("tools"),
                                          body.get("tool_choice"), cid, random.Random())
            model = _job_view(job)["model"]
    except PolicyFailed as exc:  # a rank of a data-parallel policy died: the job fails naming it
        if run is not None:
            b.live_trainer().policy_broke(job_id, str(exc), exc.data)
        raise HTTPException(503, f"The job's policy stopped: {exc}") from None
    except PolicyCannotAct as exc:
        message = f"The task app's request cannot be answered by the embedded policy: {exc}"
        if run is not None:
            b.live_trainer().abort(job_id, message)
        raise HTTPException(422, message) from None
    return _completion(body.get("model") or model, act, body["messages"])


def _completion(model: str, act: Act, messages: list[Any]) -> dict[str, Any]:
    tool, _ = answer_of(act.message)
    prompt_tokens = sum(len(str(m.get("content") or "").split()) for m in messages if isinstance(m, dict))
    return {
        "id": f"chatcmpl-{secrets.token_hex(12)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": act.message, "logprobs": None,
                     "finish_reason": "tool_calls" if tool else "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1, "total_tokens": prompt_tokens + 1},
    }


# Registered once: every path of /api/rl/jobs is also served under /api/learning/jobs.
api.include_router(rl)
for _prefix in ("/rl/jobs", "/learning/jobs"):
    api.include_router(jobs, prefix=_prefix)

# How each route words a request FastAPI found invalid (app/local/server/errors.py).
REFUSALS: dict[Callable[..., Any], Refusal] = {
    create_job: JOB_REFUSAL, verify_task_app: VERIFY_REFUSAL, verify_model: VERIFY_MODEL_REFUSAL,
    chat_completions: CHAT_REFUSAL,
    chat_completions_in_path: CHAT_REFUSAL, rollouts: ROLLOUTS_REFUSAL,
}
