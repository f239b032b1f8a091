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
(app/local/admission.py, docs/architecture.md#admission).

Errors are always `{"detail": ...}` JSON. Job events are also served as server-sent events
when the client asks for `text/event-stream`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import random
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from app.core.api.urls import http_url_problem, without_credentials
from app.core.api.wire import JOB_ID_MAX_CHARS, KNOWN_GENERATIONS, RL_CONTRACT_HEADER
from app.core.config.trainable import payload_problems, short_repr
from app.core.redact import held_key_prefix, scrub_key_fragments
from app.local import policies
from app.local.admission import Admission, default_max_jobs, rollout_pool
from app.local.answers import NOT_COMPRESSED, SMALL_ANSWER_BYTES, AnswerTooLarge, send_capped
from app.local.api_schemas import (
    BODY_ERRORS,
    CHAT,
    CID,
    CID_PATH,
    IDEMPOTENCY_KEY,
    JOB_CREATE,
    ROLLOUT_QUERY,
    TRIAL_PATH,
    VERIFY,
    error_responses,
    json_body,
)
from app.local.checkpoints import Checkpoints
from app.local.errors import describe_http_error, install_json_errors, response_detail
from app.local.guard import RequestGuard
from app.local.journal import Journal
from app.local.policies.base import Act, Policy, PolicyCannotAct
from app.local.policies.tabular import TabularPolicy
from app.local.retry import client_limits
from app.local.rollout_contract import parse_correlation_id
from app.local.rollout_store import BadCursor
from app.local.store import TERMINAL_STATUSES, IdempotencyConflict, Store, UnknownCursor
from app.local.trainer import InvalidJobPayload, Trainer, answer_of, plan_from_payload, policy_settings

MAX_IDEMPOTENCY_KEY_CHARS = 255  # docs/hardening.md; printable ASCII
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
                 trainer: str = policies.DEFAULT_POLICY, admission: Admission | None = None):
        self.api_key = api_key
        self.db_path = Path(db_path)
        self.env_api_keys = [k for k in env_api_keys if k]
        self.public_base_url = public_base_url.rstrip("/") if public_base_url else None
        # Where task apps reach a job resumed at start-up, before any request said the address.
        self.listen_url = listen_url.rstrip("/") if listen_url else None
        self.infra_events = infra_events
        self.resume = resume
        self.trainer_choice = trainer  # auto | lm | tabular (policies.make_policy)
        self.admission = admission or Admission()  # jobs at once, rollouts in flight (admission.py)
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
    admission = Admission(default_max_jobs() if max_jobs is None else max_jobs, max_rollouts or 0)
    b = _Backend(api_key, db_path, env_api_keys, public_base_url, listen_url, infra_events, resume, trainer,
                 admission)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        b.store = Store(b.db_path)
        b.journal = Journal(b.store)
        b.admission = b.admission.fresh()  # an app served again starts with an empty queue
        # The trainer has its own client, sized so that a rollout never waits for a pooled
        # connection inside its time limit (admission.rollout_pool); verify uses the other.
        async with httpx.AsyncClient(limits=client_limits()) as http, \
                httpx.AsyncClient(limits=rollout_pool(b.admission)) as rollout_http:
            b.http = http
            b.trainer = Trainer(b.journal, b.env_api_keys, rollout_http, b.checkpoints, other_secrets=[b.api_key],
                                policy_kind=b.trainer_choice, infra_events=b.infra_events, admission=b.admission)
            b.resume_interrupted(b.trainer)
            try:
                yield
            finally:
                tasks = b.trainer.stop_all()
                b.journal.wake_all()
                await asyncio.gather(*tasks, return_exceptions=True)
                b.trainer = None
                b.store.close()

    app = FastAPI(title="synth-tui embedded backend", lifespan=lifespan)
    app.state.begin_shutdown = b.begin_shutdown
    app.state.hold_env_keys = b.hold_env_keys
    app.state.admission_limits = (b.admission.max_jobs, b.admission.max_rollouts)
    install_json_errors(app)
    app.add_middleware(RequestGuard, limits={path: CHAT_BODY_LIMIT for path in CHAT_PATHS},
                       pattern_limits=[(_CHAT_PATH_FORM, CHAT_BODY_LIMIT)])

    def require_key(request: Request) -> None:
        if not b.bearer_ok(request):
            raise HTTPException(401, "Missing or invalid API key: send Authorization: Bearer <SYNTH_API_KEY>",
                                headers={"WWW-Authenticate": "Bearer"})

    @app.get("/api/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "service": "synth-tui-embedded-backend"}

    api = APIRouter(prefix="/api", dependencies=[Depends(require_key)])
    _job_routes(api, b)
    app.include_router(api)
    chat = _chat_handler(b)
    chat_errors = error_responses(400, 401, 404, *BODY_ERRORS)
    for path in CHAT_PATHS:
        app.add_api_route(path, chat, methods=["POST"], openapi_extra=json_body(CHAT, CID), responses=chat_errors)
    for path in CHAT_PATH_FORMS:
        app.add_api_route(path, chat, methods=["POST"], openapi_extra=json_body(CHAT, TRIAL_PATH, CID_PATH),
                          responses=chat_errors)
    return app


EVENT_STREAM = "text/event-stream"


class EventStreamResponse(StreamingResponse):
    """Server-sent events; as a route's response_class it puts text/event-stream in /openapi.json."""

    media_type = EVENT_STREAM


async def _json_body(request: Request) -> Any:
    try:
        return await request.json()
    except ValueError:
        raise HTTPException(422, "The request body must be JSON") from None
    except RecursionError:  # the guard counts depth first; this is the last line of defence
        raise HTTPException(422, "The JSON body nests too deeply") from None


def idempotency_key_problem(key: str | None) -> str | None:
    """What is wrong with an Idempotency-Key header (None when it is absent or fine); the key
    is not quoted back."""
    if key is None:
        return None
    if not 1 <= len(key) <= MAX_IDEMPOTENCY_KEY_CHARS:
        return f"must be 1 to {MAX_IDEMPOTENCY_KEY_CHARS} characters (got {len(key):,}); a UUID is 36"
    if not all(" " <= ch <= "~" for ch in key):
        return "must be printable ASCII (letters, digits, punctuation and spaces)"
    return None


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


def _job_routes(api: APIRouter, b: _Backend) -> None:
    @api.post("/rl/verify_task_app", openapi_extra=json_body(VERIFY), responses=error_responses(401, *BODY_ERRORS))
    async def verify_task_app(request: Request) -> dict[str, Any]:
        body = await _json_body(request)
        url = body.get("endpoint_base_url") if isinstance(body, dict) else None
        problem = http_url_problem(url)
        if problem or not isinstance(url, str):  # a URL that is not a string is a problem too
            raise HTTPException(422, f"endpoint_base_url must be the task app's http(s) URL: {problem}")
        return await _verify(b, url)

    @api.post("/rl/jobs", status_code=201, openapi_extra=json_body(JOB_CREATE, IDEMPOTENCY_KEY),
              responses={200: {"description": "The job this Idempotency-Key created before, for the same body",
                               "content": {"application/json": {"schema": {"type": "object"}}}},
                         **error_responses(400, 401, 409, 503, *BODY_ERRORS)})
    async def create_job(request: Request) -> JSONResponse:
        key = request.headers.get("idempotency-key")
        problem = idempotency_key_problem(key)
        if problem:
            raise HTTPException(400, f"Idempotency-Key {problem}")
        body = await _json_body(request)
        # The whole payload first (strings anywhere, tags, top-level compute), then the job itself.
        problems = payload_problems(body)
        if problems:
            raise HTTPException(422, "Invalid RL job payload: " + "; ".join(f"{p.location}: {p.message}"
                                                                          for p in problems))
        try:
            plan = plan_from_payload(body)
        except InvalidJobPayload as exc:
            raise HTTPException(422, str(exc)) from None
        body_hash = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
        try:
            job, created = b.store.create_job(f"job_{secrets.token_hex(12)}", body, body_hash, key)
        except IdempotencyConflict as exc:
            raise HTTPException(409, f"Idempotency-Key {exc.key!r} was already used for job {exc.job_id} "
                                     "with a different request body; send a new key to create another job") from None
        if not created:
            return JSONResponse(b.view(job), status_code=200)
        b.journal.event(job["id"], "rl.job.created", f"Job created: train {plan.model} on {plan.task_url}",
                        data={"model": plan.model, "task_app_url": plan.task_url, "total_steps": plan.total_steps})
        base = b.public_base_url or str(request.base_url).rstrip("/")
        b.live_trainer().start(job["id"], plan, f"{base}/api/v1")
        return JSONResponse(b.view(job), status_code=201)

    async def list_jobs(response: Response, limit: int = Query(50, ge=1, le=500),
                        status: str | None = None,
                        after: str | None = Query(None, min_length=1, max_length=JOB_ID_MAX_CHARS)) -> dict[str, Any]:
        # Both generations' configs are accepted here, and both event stream paths served.
        response.headers[RL_CONTRACT_HEADER] = ", ".join(KNOWN_GENERATIONS)
        try:  # `after`: the id of the last job of the page before (docs/wire-contract.md#job-list)
            jobs = b.store.list_jobs(limit=limit, status=status, after=after)
        except UnknownCursor:
            raise HTTPException(400, "after must be the job_id of a job of this backend (the last job of the "
                                     "page before); no job has this id") from None
        return {"jobs": [b.view(j) for j in jobs]}

    async def get_job(job_id: str) -> dict[str, Any]:
        return b.view(b.job_or_404(job_id))

    async def start_job(job_id: str) -> dict[str, Any]:
        job = b.job_or_404(job_id)
        return {"job_id": job_id, "status": job["status"], "message": "Jobs start when they are created"}

    async def cancel_job(job_id: str) -> JSONResponse:
        job = b.job_or_404(job_id)
        if job["status"] in TERMINAL_STATUSES:
            return JSONResponse({"detail": f"Job {job_id} already {job['status']}; only queued or running jobs "
                                           "can be cancelled", "status": job["status"]}, status_code=409)
        await b.live_trainer().cancel(job_id)
        job = b.job_or_404(job_id)
        return JSONResponse({"job_id": job_id, "status": job["status"], "message": "Job cancelled"})

    async def events(request: Request, job_id: str, since_seq: int = Query(0, ge=-1, le=MAX_CURSOR),
                     limit: int = Query(200, ge=1, le=1000)) -> Response | dict[str, Any]:
        b.job_or_404(job_id)
        if "text/event-stream" in request.headers.get("accept", ""):
            return _event_stream(b, job_id, _resume_from(request, since_seq))
        return {"events": b.store.events(job_id, since_seq=since_seq, limit=limit)}

    async def event_stream(request: Request, job_id: str,
                           since_seq: int = Query(0, ge=-1, le=MAX_CURSOR)) -> EventStreamResponse:
        b.job_or_404(job_id)
        return _event_stream(b, job_id, _resume_from(request, since_seq))

    async def metrics(job_id: str, after_step: int = Query(-1, ge=-1, le=MAX_CURSOR),
                      limit: int = Query(200, ge=1, le=1000)) -> dict[str, Any]:
        b.job_or_404(job_id)
        return {"job_id": job_id, "points": b.store.metrics(job_id, after_step=after_step, limit=limit)}

    async def rollouts(request: Request, job_id: str) -> dict[str, Any]:
        b.job_or_404(job_id)
        step, phase, limit, after = _rollout_query(request)
        try:
            items, next_after = b.store.rollouts.list(job_id, step=step, phase=phase, limit=limit, after=after)
        except BadCursor:
            raise HTTPException(400, "after must be the next_after of a page before, as the backend sent it "
                                     "(<step>.<train|eval>.<index>)") from None
        return {"job_id": job_id, "rollouts": items, "next_after": next_after}

    async def rollout(job_id: str, rollout_id: str) -> dict[str, Any]:
        b.job_or_404(job_id)
        found = b.store.rollouts.get(job_id, rollout_id)
        if found is None:
            raise HTTPException(404, f"Rollout {short_repr(rollout_id)} of job {job_id} not found: it was never "
                                     "kept, or was dropped to keep the job's rollouts within their size cap")
        return {"job_id": job_id, **found}

    # /learning/... mirrors /rl/... with the same data (and the same event seq numbers).
    for prefix in ("/rl/jobs", "/learning/jobs"):
        api.add_api_route(prefix, list_jobs, methods=["GET"], responses=error_responses(400, 401, 422))
        api.add_api_route(f"{prefix}/{{job_id}}", get_job, methods=["GET"], responses=error_responses(401, 404))
        api.add_api_route(f"{prefix}/{{job_id}}/start", start_job, methods=["POST"],
                          responses=error_responses(401, 404))
        api.add_api_route(f"{prefix}/{{job_id}}/cancel", cancel_job, methods=["POST"],
                          responses=error_responses(401, 404, 409, 503))
        # JSON or an event stream, by the Accept header: no response model.
        api.add_api_route(f"{prefix}/{{job_id}}/events", events, methods=["GET"], response_model=None,
                          responses={200: {"description": "The events after since_seq: JSON, or an event stream "
                                                          "when the client accepts text/event-stream",
                                           "content": {"application/json": {"schema": {"type": "object"}},
                                                       EVENT_STREAM: {"schema": {"type": "string"}}}},
                                     **error_responses(401, 404, 422)})
        api.add_api_route(f"{prefix}/{{job_id}}/events/stream", event_stream, methods=["GET"],
                          response_class=EventStreamResponse, responses=error_responses(401, 404, 422))
        api.add_api_route(f"{prefix}/{{job_id}}/metrics", metrics, methods=["GET"],
                          responses=error_responses(401, 404, 422))
        # The query is read by the route itself, so that a bad one is a 400 naming it.
        api.add_api_route(f"{prefix}/{{job_id}}/rollouts", rollouts, methods=["GET"],
                          openapi_extra={"parameters": ROLLOUT_QUERY}, responses=error_responses(400, 401, 404))
        api.add_api_route(f"{prefix}/{{job_id}}/rollouts/{{rollout_id}}", rollout, methods=["GET"],
                          responses=error_responses(401, 404))


def _rollout_query(request: Request) -> tuple[int | None, str | None, int, str | None]:
    """(step, phase, limit, after) of a rollout list's query; a 400 naming what is wrong."""
    query = request.query_params
    problems = []

    def whole(name: str, low: int, high: int) -> int | None:
        text = query.get(name)
        if text is None:
            return None
        if not (text.isascii() and text.isdigit() and len(text) <= 19 and low <= int(text) <= high):
            problems.append(f"{name} must be a whole number from {low} to {high:,} (got {short_repr(text)})")
            return None
        return int(text)

    step = whole("step", 0, MAX_CURSOR)
    limit = whole("limit", 1, ROLLOUT_PAGE_MAX)
    phase = query.get("phase")
    if phase is not None and phase not in ("train", "eval"):
        problems.append(f"phase must be train or eval (got {short_repr(phase)})")
    after = query.get("after")
    if after is not None and not after:
        problems.append("after must be the next_after of a page before, or left out")
    if problems:
        raise HTTPException(400, "Invalid rollout query: " + "; ".join(problems))
    return step, phase, limit or ROLLOUT_PAGE, after


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
            # Read up to SMALL_ANSWER_BYTES: a status and a detail are all that is kept (answers.py).
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


def _chat_handler(b: _Backend) -> Callable[[Request], Awaitable[dict[str, Any]]]:
    async def chat_completions(request: Request) -> dict[str, Any]:
        body = await _json_body(request)
        # The correlation id: in the path (rollout contract 0.4/0.5), else ?cid= (0.2); any of the
        # prefixes trace_, cid_, eval_, or none.
        query_cid = request.query_params.get("cid", "")
        cid = request.path_params.get("cid", query_cid)
        job_id, rollout_id = parse_correlation_id(cid)
        run = b.trainer.runs.get(job_id) if b.trainer else None
        if not (b.bearer_ok(request) or (run is not None and rollout_id in run.open_rollouts)):
            raise HTTPException(401, "Missing or invalid credentials: send Authorization: Bearer <SYNTH_API_KEY>, "
                                     "or call the inference URL the trainer gave for a rollout in flight",
                                headers={"WWW-Authenticate": "Bearer"})
        if not job_id:
            raise HTTPException(400, "The inference URL must name the job: ?cid=trace_<job_id>[:<rollout_id>] "
                                     "or, in the path, /v1/<job_id>/trace_<job_id>[:<rollout_id>]/chat/completions")
        trial = request.path_params.get("trial")
        if trial is not None and trial != job_id:
            raise HTTPException(400, f"The inference URL's path names trial {short_repr(trial)} but its correlation "
                                     f"id names job {short_repr(job_id)}: /v1/<job_id>/trace_<job_id>:<rollout_id>"
                                     "/chat/completions; use the inference URL the trainer gave")
        if query_cid and cid != query_cid:
            raise HTTPException(400, "The inference URL carries two different correlation ids, one in its path "
                                     "and one as ?cid=; use the inference URL the trainer gave")
        problem = chat_body_problem(body)
        if problem:
            raise HTTPException(422, f"Invalid chat completion request: {problem}")
        # The policy answers in a worker thread, whichever it is: a language model generates for
        # seconds, and /health, events and other rollouts must not wait for it.
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
        except PolicyCannotAct as exc:
            message = f"The task app's request cannot be answered by the embedded policy: {exc}"
            if run is not None:
                b.live_trainer().abort(job_id, message)
            raise HTTPException(422, message) from None
        return _completion(body.get("model") or model, act, body["messages"])

    return chat_completions


MAX_CHAT_MESSAGES = 10_000


def chat_body_problem(body: Any) -> str | None:
    """What makes a chat completion request unusable, or None. Only what this endpoint reads
    is checked; unknown keys are allowed, as OpenAI's API allows them."""
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages must be a non-empty list of chat messages"
    if len(messages) > MAX_CHAT_MESSAGES:
        return f"at most {MAX_CHAT_MESSAGES:,} messages"
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            return f"messages[{index}] must be an object with a string role"
        content = message.get("content")
        if not (content is None or isinstance(content, str) or isinstance(content, list)):
            return f"messages[{index}].content must be a string, a list of content parts or null"
    tools = body.get("tools")
    if tools is None:
        return None
    if not isinstance(tools, list):
        return "tools must be a list of tools"
    for index, tool in enumerate(tools):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            return f"tools[{index}] must be {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}"
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            return f"tools[{index}].function.parameters must be a JSON schema object"
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        return "model must be a string"
    return None


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
