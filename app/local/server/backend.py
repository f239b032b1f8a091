"""The embedded backend: the hosted Synth RL API (docs/wire-contract.md#embedded-backend) on one machine.

Everything lives under /api and needs `Authorization: Bearer <api_key>`, except:
- `GET /api/health` (reachability, no secret involved);
- the OpenAI-compatible chat endpoint, `POST /api/v1/chat/completions` (also
  `/v1/chat/completions`), which serves the job's current policy to the task app. The job runner
  gives the task app `{base}/api/v1/chat/completions?cid=trace_<job_id>:<rollout_id>` (contract
  0.2) or the path form `{base}/api/v1/<job_id>/trace_<job_id>:<rollout_id>`, to which the task
  app appends /chat/completions (0.4/0.5; docs/rollout-contracts.md). The cid names the job
  and the rollout, and while that rollout is in flight the cid itself is the credential (the
  task app holds no Synth key). With a Bearer key any job's policy can be queried, finished
  jobs included (their last checkpoint is loaded). The endpoint talks to the policy only
  through the seam of app/local/policies (docs/embedded-policy.md).

Jobs left queued or running by a previous run of the backend on the same state file are
resumed from their last checkpoint as the backend starts (runner.JobRunner.resume): those that
were running first, then the queue in its order.

At most `max_jobs` jobs train at once and `max_rollouts` rollouts are in flight across them;
the other jobs wait `queued`, their place in the queue given as `queue_position`
(app/local/training/admission.py, docs/architecture.md#admission).

This module is the app factory (`create_backend_app`), its lifespan and the registration of
the routes, which live in module-level APIRouters: the job routes in routes_jobs.py (registered
once and served under both /api/rl/jobs and /api/learning/jobs), the chat endpoint in
routes_chat.py, the verify routes in verify.py. They reach the backend object of the app serving
the request (backend_state.py) through the `Backend` dependency (app.state.backend). Bodies are the pydantic models of
app/local/server/bodies.py, validated by FastAPI; a request it finds invalid is answered by the one
handler of app/local/server/errors.py in its route's words (REFUSALS). /openapi.json is FastAPI's own.

Errors are always `{"detail": ...}` JSON. Job events are also served as server-sent events
when the client asks for `text/event-stream`.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from fastapi import APIRouter, Depends, FastAPI

from app.core.api.transport import ssl_context
from app.core.api.wire_answers import BackendHealth
from app.local import policies
from app.local.policies.base import Parallel
from app.local.server.backend_state import BackendState, require_key
from app.local.server.bodies import (
    CHAT_REFUSAL,
    JOB_REFUSAL,
    VERIFY_MODEL_REFUSAL,
    VERIFY_REFUSAL,
)
from app.local.server.errors import Refusal, install_json_errors
from app.local.server.guard import RequestGuard
from app.local.server.routes_chat import (
    CHAT_BODY_LIMIT,
    CHAT_PATH_FORM_RE,
    CHAT_PATHS,
    chat,
    chat_completions,
    chat_completions_in_path,
)
from app.local.server.routes_jobs import ROLLOUTS_REFUSAL, create_job, jobs, rl, rollouts
from app.local.server.verify import verify, verify_model, verify_task_app
from app.local.state.journal import Journal
from app.local.state.store import Store
from app.local.training.admission import Admission, answer_threads, default_max_jobs, lm_devices, rollout_pool
from app.local.training.retry import client_limits
from app.local.training.runner import JobRunner


def create_backend_app(
    *, api_key: str, db_path: Path, env_api_keys: Sequence[str], public_base_url: str | None = None,
    listen_url: str | None = None, infra_events: bool = False, resume: bool = True,
    policy_kind: str = policies.DEFAULT_POLICY, max_jobs: int | None = None, max_rollouts: int | None = None,
    parallel: Parallel = policies.ONE_PROCESS,
) -> FastAPI:
    """`infra_events`: imitate the hosted service's hatchet.* and rl.runtime.modal.* events
    (off unless asked: docs/embedded-policy.md#events). `resume`: go on with the jobs a previous
    run left running (a backend of the demo or `--backend local` stops with its run: False).
    `policy_kind`: which policy new jobs train (`--trainer`), auto | lm | tabular (docs/embedded-policy.md).
    `max_jobs`, `max_rollouts`: jobs trained at once and rollouts in flight across them (None:
    sized to the machine; docs/architecture.md#admission)."""
    if not api_key:
        raise ValueError("the embedded backend needs an API key")
    if policy_kind not in policies.POLICY_KINDS:
        raise ValueError(f"policy_kind must be one of {', '.join(policies.POLICY_KINDS)} (got {policy_kind!r})")
    if parallel.processes > 1 and policy_kind != "lm":
        raise ValueError(f"{parallel.processes} processes train the lm policy only (got {policy_kind!r})")
    admission = Admission(default_max_jobs() if max_jobs is None else max_jobs, max_rollouts or 0,
                          functools.partial(lm_devices, parallel.processes))
    b = BackendState(api_key, db_path, env_api_keys, public_base_url, listen_url, infra_events, resume, policy_kind,
                     admission, parallel)
    app = FastAPI(title="synth-tui embedded backend", lifespan=_lifespan)
    app.state.backend = b  # what every route gets through its `Backend` dependency
    app.state.begin_shutdown = b.begin_shutdown
    app.state.hold_env_keys = b.hold_env_keys
    app.state.admission_limits = (b.admission.max_jobs, b.admission.max_rollouts)
    install_json_errors(app, REFUSALS)
    app.add_middleware(RequestGuard, limits={path: CHAT_BODY_LIMIT for path in CHAT_PATHS},
                       pattern_limits=[(CHAT_PATH_FORM_RE, CHAT_BODY_LIMIT)])
    for router in (public, api, chat):
        app.include_router(router)
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    b: BackendState = app.state.backend
    b.store = Store(b.db_path)
    b.journal = Journal(b.store)
    b.admission = b.admission.fresh()  # an app served again starts with an empty queue
    b.stopping = asyncio.Event()  # of this serving's loop
    # The job runner has its own client, sized so that a rollout never waits for a pooled
    # connection inside its time limit (admission.rollout_pool); verify uses the other.
    # Both share the process's one TLS context (transport.ssl_context: each new one loads the CA bundle).
    async with httpx.AsyncClient(limits=client_limits(), verify=ssl_context()) as http, \
            httpx.AsyncClient(limits=rollout_pool(b.admission), verify=ssl_context()) as rollout_http:
        b.http = http
        b.runner = JobRunner(b.journal, b.env_api_keys, rollout_http, b.checkpoints, other_secrets=[b.api_key],
                            policy_kind=b.policy_kind, infra_events=b.infra_events, admission=b.admission,
                            parallel=b.parallel)
        b.answering = ThreadPoolExecutor(answer_threads(b.admission), thread_name_prefix="chat-answer")
        b.resume_interrupted(b.runner)
        try:
            yield
        finally:
            tasks = b.runner.stop_all()
            b.journal.wake_all()
            await asyncio.gather(*tasks, return_exceptions=True)
            # the policies are closed: an answer still in a thread ends with ActCancelled
            b.answering.shutdown(wait=False, cancel_futures=True)
            b.runner = None
            b.store.close()


# -- the routes: registered once in their routers, served by every app create_backend_app makes ------

public = APIRouter()  # no key
api = APIRouter(prefix="/api", dependencies=[Depends(require_key)])


@public.get("/api/health", response_model=BackendHealth)
async def health() -> BackendHealth:
    return BackendHealth(status="ok", service="synth-tui-embedded-backend")


# Registered once: every path of /api/rl/jobs is also served under /api/learning/jobs.
api.include_router(verify)
api.include_router(rl)
for _prefix in ("/rl/jobs", "/learning/jobs"):
    api.include_router(jobs, prefix=_prefix)

# How each route words a request FastAPI found invalid (app/local/server/errors.py).
REFUSALS: dict[Callable[..., Any], Refusal] = {
    create_job: JOB_REFUSAL, verify_task_app: VERIFY_REFUSAL, verify_model: VERIFY_MODEL_REFUSAL,
    chat_completions: CHAT_REFUSAL,
    chat_completions_in_path: CHAT_REFUSAL, rollouts: ROLLOUTS_REFUSAL,
}

