"""The embedded backend's job routes: create a job (POST /api/rl/jobs) and, registered once
and served under both /api/rl/jobs and /api/learning/jobs, list, read, cancel, its events (JSON
or server-sent events), metrics and kept rollouts (docs/wire-contract.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import secrets
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from app.core.api.wire import JOB_ID_MAX_CHARS, KNOWN_GENERATIONS, RL_CONTRACT_HEADER, JobStatus
from app.core.api.wire_answers import EventPage, JobAction, JobPage, MetricsPage, RolloutPage, RolloutRecord
from app.core.config.trainable import short_repr
from app.local.server.api_schemas import BODY_ERRORS, error_responses
from app.local.server.backend_state import Backend, BackendState
from app.local.server.bodies import IdempotencyKey, JobCreate
from app.local.server.errors import Refusal
from app.local.state.rollout_store import BadCursor
from app.local.state.store import TERMINAL_STATUSES, IdempotencyConflict, UnknownCursor
from app.local.training.plan import training_plan

MAX_CURSOR = 2**62  # seq and step cursors: SQLite integers are 64-bit
ROLLOUT_PAGE = 100  # rollouts per page unless `limit` says (docs/wire-contract.md#rollouts)
ROLLOUT_PAGE_MAX = 500
TERMINAL_EVENT_TYPES = {"rl.job.completed", "rl.job.failed", "rl.job.cancelled"}
SSE_HEARTBEAT_S = 10.0

EVENT_STREAM = "text/event-stream"


class EventStreamResponse(StreamingResponse):
    """Server-sent events; as a route's response_class it puts text/event-stream in /openapi.json."""

    media_type = EVENT_STREAM

rl = APIRouter(prefix="/rl")  # under /api: job creation
jobs = APIRouter()  # under /api/rl/jobs and /api/learning/jobs: the same data, the same event seq numbers


# Every JSON answer is a model of app/core/api/wire.py or wire_answers.py, which the client reads too.
@rl.post("/jobs", status_code=201, response_model=JobStatus,
         responses={200: {"description": "The job this Idempotency-Key created before, for the same body",
                          "model": JobStatus},
                    **error_responses(400, 401, 409, 503, *BODY_ERRORS)})
async def create_job(job: JobCreate, request: Request, response: Response, b: Backend,
                     idempotency_key: Annotated[IdempotencyKey, Header(
                         alias="Idempotency-Key",
                         description="the same key and body answer the same job (200); another body, 409")] = None,
                     ) -> dict[str, Any]:
    body = await request.json()  # as sent, for the store and the key's hash (FastAPI parsed it once)
    plan = training_plan(job, body["data"]["config"])
    body_hash = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    try:
        stored, created = b.store.create_job(f"job_{secrets.token_hex(12)}", body, body_hash, idempotency_key)
    except IdempotencyConflict as exc:
        raise HTTPException(409, f"Idempotency-Key {exc.key!r} was already used for job {exc.job_id} "
                                 "with a different request body; send a new key to create another job") from None
    if not created:
        response.status_code = 200
        return b.view(stored)
    b.journal.event(stored["id"], "rl.job.created", f"Job created: train {plan.model} on {plan.task_url}",
                    data={"model": plan.model, "task_app_url": plan.task_url, "total_steps": plan.total_steps})
    base = b.public_base_url or str(request.base_url).rstrip("/")
    b.live_runner().start(stored["id"], plan, f"{base}/api/v1")
    return b.view(stored)


@jobs.get("", response_model=JobPage, responses=error_responses(400, 401, 422))
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


@jobs.get("/{job_id}", response_model=JobStatus, responses=error_responses(401, 404))
async def get_job(job_id: str, b: Backend) -> dict[str, Any]:
    return b.view(b.job_or_404(job_id))


@jobs.post("/{job_id}/start", response_model=JobAction, responses=error_responses(401, 404))
async def start_job(job_id: str, b: Backend) -> dict[str, Any]:
    job = b.job_or_404(job_id)
    return {"job_id": job_id, "status": job["status"], "message": "Jobs start when they are created"}


@jobs.post("/{job_id}/cancel", response_model=JobAction, responses=error_responses(401, 404, 409, 503))
async def cancel_job(job_id: str, b: Backend) -> JSONResponse | dict[str, Any]:
    job = b.job_or_404(job_id)
    if job["status"] in TERMINAL_STATUSES:
        return JSONResponse({"detail": f"Job {job_id} already {job['status']}; only queued or running jobs "
                                       "can be cancelled", "status": job["status"]}, status_code=409)
    await b.live_runner().cancel(job_id)
    job = b.job_or_404(job_id)
    return {"job_id": job_id, "status": job["status"], "message": "Job cancelled"}


# JSON or an event stream, by the Accept header: the JSON answer's model is declared, and checked here.
@jobs.get("/{job_id}/events", response_model=None,
          responses={200: {"description": "The events after since_seq: JSON, or an event stream "
                                          "when the client accepts text/event-stream",
                           "model": EventPage, "content": {EVENT_STREAM: {"schema": {"type": "string"}}}},
                     **error_responses(401, 404, 422)})
async def events(request: Request, job_id: str, b: Backend, since_seq: int = Query(0, ge=-1, le=MAX_CURSOR),
                 limit: int = Query(200, ge=1, le=1000)) -> Response | EventPage:
    b.job_or_404(job_id)
    if "text/event-stream" in request.headers.get("accept", ""):
        return _event_stream(b, job_id, _resume_from(request, since_seq))
    return EventPage.model_validate({"events": b.store.events(job_id, since_seq=since_seq, limit=limit)})


@jobs.get("/{job_id}/events/stream", response_class=EventStreamResponse, responses=error_responses(401, 404, 422))
async def event_stream(request: Request, job_id: str, b: Backend,
                       since_seq: int = Query(0, ge=-1, le=MAX_CURSOR)) -> EventStreamResponse:
    b.job_or_404(job_id)
    return _event_stream(b, job_id, _resume_from(request, since_seq))


@jobs.get("/{job_id}/metrics", response_model=MetricsPage, responses=error_responses(401, 404, 422))
async def metrics(job_id: str, b: Backend, after_step: int = Query(-1, ge=-1, le=MAX_CURSOR),
                  limit: int = Query(200, ge=1, le=1000)) -> dict[str, Any]:
    b.job_or_404(job_id)
    return {"job_id": job_id, "points": b.store.metrics(job_id, after_step=after_step, limit=limit)}


# A bad query is a 400 naming it (ROLLOUTS_REFUSAL), as docs/wire-contract.md#rollouts says.
@jobs.get("/{job_id}/rollouts", response_model=RolloutPage, responses=error_responses(400, 401, 404))
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


@jobs.get("/{job_id}/rollouts/{rollout_id}", response_model=RolloutRecord, responses=error_responses(401, 404))
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


def _event_stream(b: BackendState, job_id: str, since_seq: int) -> EventStreamResponse:
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
