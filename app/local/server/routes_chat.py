"""The embedded backend's OpenAI-compatible chat endpoint, which serves a job's policy to the
task app (docs/wire-contract.md#embedded-backend, docs/rollout-contracts.md).

`POST /api/v1/chat/completions?cid=...` (also /v1/...; contract 0.2) and the path form
`/api/v1/<job_id>/<cid>/chat/completions` (0.4/0.5). While a rollout is in flight its cid is
the credential; with a Bearer key any job's policy can be queried, finished jobs included
(their last checkpoint is loaded).
"""

from __future__ import annotations

import asyncio
import random
import re
import secrets
import threading
import time
from collections.abc import Awaitable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi import Path as PathParam

from app.core.api.wire_answers import ChatCompletion
from app.core.config.trainable import short_repr
from app.local.policies.base import Act, ActCancelled, ActOptions, PolicyCannotAct, PolicyFailed, PolicyLoading
from app.local.server.api_schemas import BODY_ERRORS, error_responses
from app.local.server.backend_state import Backend, BackendState, job_view
from app.local.server.bodies import ChatRequest, Cid
from app.local.training.job_run import answer_of
from app.local.training.rollout_contract import parse_correlation_id

DISCONNECT_POLL_S = 0.25  # how often a generating request checks that its client is still there
CHAT_BODY_LIMIT = 4 << 20  # chat histories can be long; every other body stays under guard.MAX_BODY_BYTES
CHAT_PATHS = ("/api/v1/chat/completions", "/v1/chat/completions")
# The path form of rollout contract 0.4/0.5: the trial (our job id) and the correlation id in the path.
CHAT_PATH_FORMS = ("/api/v1/{trial}/{cid}/chat/completions", "/v1/{trial}/{cid}/chat/completions")
CHAT_PATH_FORM_RE = re.compile(r"^(/api)?/v1/[^/]+/[^/]+/chat/completions$")

chat = APIRouter()  # the policy, for task apps: its own credentials (chat_access)


def _cid_of(request: Request) -> str:
    """The correlation id, as sent: in the path (rollout contract 0.4/0.5), else ?cid= (0.2)."""
    return str(request.path_params.get("cid", request.query_params.get("cid", "")))


def chat_access(request: Request, b: Backend) -> None:
    """The Bearer key, or the inference URL of a rollout in flight (its cid is the credential):
    checked before anything of the request is validated."""
    job_id, rollout_id = parse_correlation_id(_cid_of(request))
    run = b.runner.runs.get(job_id) if b.runner else None
    if not (b.bearer_ok(request) or (run is not None and rollout_id in run.open_rollouts)):
        raise HTTPException(401, "Missing or invalid credentials: send Authorization: Bearer <SYNTH_API_KEY>, "
                                 "or call the inference URL the job runner gave for a rollout in flight",
                            headers={"WWW-Authenticate": "Bearer"})


CHAT_ERRORS = error_responses(400, 401, 404, 409, 503, *BODY_ERRORS)
CID_WORDS = "trace_<job_id>:<rollout_id> (or with cid_ or eval_), as the job runner writes it into the inference URL"


@chat.post("/api/v1/chat/completions", dependencies=[Depends(chat_access)], response_model=ChatCompletion,
           responses=CHAT_ERRORS)
@chat.post("/v1/chat/completions", dependencies=[Depends(chat_access)], response_model=ChatCompletion,
           responses=CHAT_ERRORS)
async def chat_completions(body: ChatRequest, request: Request, b: Backend,
                           cid: Annotated[Cid, Query(description=CID_WORDS)]) -> dict[str, Any]:
    """Rollout contract 0.2: the correlation id as ?cid=."""
    return await _answer_chat(b, request, cid)


@chat.post("/api/v1/{trial}/{cid}/chat/completions", dependencies=[Depends(chat_access)],
           response_model=ChatCompletion, responses=CHAT_ERRORS)
@chat.post("/v1/{trial}/{cid}/chat/completions", dependencies=[Depends(chat_access)],
           response_model=ChatCompletion, responses=CHAT_ERRORS)
async def chat_completions_in_path(
    body: ChatRequest, request: Request, b: Backend,
    trial: Annotated[str, PathParam(description="the job id, as the job runner writes it into the inference URL")],
    cid: Annotated[Cid, PathParam(description=CID_WORDS)],
) -> dict[str, Any]:
    """Rollout contract 0.4/0.5: the trial (our job id) and the correlation id in the path."""
    job_id, _ = parse_correlation_id(cid)
    if trial != job_id:
        raise HTTPException(400, f"The inference URL's path names trial {short_repr(trial)} but its correlation "
                                 f"id names job {short_repr(job_id)}: /v1/<job_id>/trace_<job_id>:<rollout_id>"
                                 "/chat/completions; use the inference URL the job runner gave")
    query_cid = request.query_params.get("cid")
    if query_cid and query_cid != cid:
        raise HTTPException(400, "The inference URL carries two different correlation ids, one in its path "
                                 "and one as ?cid=; use the inference URL the job runner gave")
    return await _answer_chat(b, request, cid)


async def _answer_chat(b: BackendState, request: Request, cid: str) -> dict[str, Any]:
    """The policy's answer to a checked chat request (ChatRequest): the job's live policy while
    it trains, else its last recorded one. The policy answers in a thread of the answering pool,
    whichever it is: a language model generates for seconds, and /health, events and other
    rollouts must not wait for it; every rollout in flight has a thread, so their turns meet in
    the generation loop. A caller that disconnects meanwhile stops the generation (ActOptions.cancel)."""
    body = await request.json()  # as sent (FastAPI parsed it once): the policy reads it whole
    job_id, rollout_id = parse_correlation_id(cid)
    run = b.runner.runs.get(job_id) if b.runner else None
    options = _options(body)
    try:
        if run is not None:
            act = await _until_disconnect(request, options, b.answer_in_thread(
                lambda: run.act(rollout_id, body, cid, options)))
            model = run.plan.model
        else:
            job = b.job_or_404(job_id)

            def act_saved() -> Act:  # the policy is held while it acts: an eviction closes it after
                with b.saved_policy(job) as policy:
                    return policy.act(body["messages"], body.get("tools"), body.get("tool_choice"), cid,
                                      random.Random(), options)

            act = await _until_disconnect(request, options, b.answer_in_thread(act_saved))
            model = job_view(job)["model"]
    except PolicyFailed as exc:  # a rank of a data-parallel policy died: the job fails naming it
        if run is not None:
            b.live_runner().policy_broke(job_id, str(exc), exc.data)
        raise HTTPException(503, f"The job's policy stopped: {exc}") from None
    except ActCancelled:  # nobody is left to read the answer
        raise HTTPException(499, "The client closed the request; generation stopped") from None
    except PolicyLoading as exc:  # a queued or loading job: the caller asks again; the job goes on
        raise HTTPException(409, f"The job's policy cannot answer yet: {exc}") from None
    except PolicyCannotAct as exc:
        # Only the job's own rollouts can fail it, and only when they keep being refused: a call
        # the job did not make gets its 422 and leaves the job alone (docs/hardening.md).
        message = f"The task app's request cannot be answered by the embedded policy: {exc}"
        if run is not None and run.refused_rollout(rollout_id):
            b.live_runner().abort(job_id, f"{message} ({len(run.refused_rollouts)} rollouts in a row were refused)")
        raise HTTPException(422, message) from None
    return _completion(body.get("model") or model, act)


def _options(body: dict[str, Any]) -> ActOptions:
    """What the request asks of its answer (checked by ChatRequest), with a fresh cancel flag."""
    top = body.get("top_logprobs") or 0
    return ActOptions(temperature=body.get("temperature"), top_p=body.get("top_p"),
                      max_tokens=body.get("max_completion_tokens") or body.get("max_tokens"),
                      logprobs=bool(body.get("logprobs")) or top > 0, top_logprobs=top,
                      cancel=threading.Event())


async def _until_disconnect(request: Request, options: ActOptions, acting: Awaitable[Act]) -> Act:
    """The policy's answer, watching the client meanwhile: when it disconnects, options.cancel
    is set and the policy stops between tokens (issue 41: a prompt whose client went away held
    the model for minutes)."""
    task = asyncio.ensure_future(acting)
    try:
        while not task.done():
            await asyncio.wait([task], timeout=DISCONNECT_POLL_S)
            if not task.done() and await request.is_disconnected() and options.cancel is not None:
                options.cancel.set()
        return task.result()
    finally:
        if not task.done() and options.cancel is not None:  # this coroutine was cancelled: so is the act
            options.cancel.set()


def _completion(model: str, act: Act) -> dict[str, Any]:
    """OpenAI's chat completion of one answer: its tokens counted by the policy (0 for the
    tabular stand-in, which reads none), finish_reason "length" when max_tokens cut it."""
    tool, _ = answer_of(act.message)
    return {
        "id": f"chatcmpl-{secrets.token_hex(12)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": act.message, "logprobs": act.logprobs,
                     "finish_reason": act.finish_reason or ("tool_calls" if tool else "stop")}],
        "usage": {"prompt_tokens": act.prompt_tokens, "completion_tokens": act.completion_tokens,
                  "total_tokens": act.prompt_tokens + act.completion_tokens},
    }
