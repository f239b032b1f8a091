"""The embedded backend's shared object: what every route of the backend reaches through the
`Backend` dependency (the store, the journal, the job runner and the HTTP client, which exist while
serving), the Bearer check of everything under /api, and a job's view as the API shows it.

Kept apart from the app (backend.py) and the routes (routes_jobs.py, routes_chat.py, verify.py),
which all import it.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar

import httpx
from fastapi import Depends, HTTPException, Request

from app.core.api.urls import without_credentials
from app.local import policies
from app.local.policies.base import Parallel, Policy
from app.local.policies.tabular.policy import TabularPolicy
from app.local.server.model_checks import ModelChecks
from app.local.server.saved_policies import SavedPolicies
from app.local.state.checkpoints import Checkpoints
from app.local.state.journal import Journal
from app.local.state.store import Store
from app.local.training.admission import Admission
from app.local.training.job_run import policy_settings
from app.local.training.plan import InvalidJobPayload, plan_from_payload
from app.local.training.runner import JobRunner

T = TypeVar("T")


class BackendState:
    """What the routes share; the store, job runner and HTTP client exist while serving."""

    def __init__(self, api_key: str, db_path: Path, env_api_keys: Sequence[str], public_base_url: str | None,
                 listen_url: str | None = None, infra_events: bool = False, resume: bool = True,
                 policy_kind: str = policies.DEFAULT_POLICY, admission: Admission | None = None,
                 parallel: Parallel = policies.ONE_PROCESS):
        self.api_key = api_key
        self.db_path = Path(db_path)
        self.env_api_keys = [k for k in env_api_keys if k]
        self.public_base_url = public_base_url.rstrip("/") if public_base_url else None
        # Where task apps reach a job resumed at start-up, before any request said the address.
        self.listen_url = listen_url.rstrip("/") if listen_url else None
        self.infra_events = infra_events
        self.resume = resume
        self.policy_kind = policy_kind  # auto | lm | tabular (policies.make_policy)
        self.parallel = parallel  # the lm policy's processes (docs/design/data-parallel.md)
        self.admission = admission or Admission()  # jobs at once, rollouts in flight (app/local/training/admission.py)
        # Beside the state file: every job's policy, one folder per recorded step.
        self.checkpoints = Checkpoints(self.db_path.parent / "checkpoints")
        self.store: Store
        self.journal: Journal
        self.runner: JobRunner | None = None
        self.http: httpx.AsyncClient
        self.model_checks = ModelChecks()  # running and finished model checks (model_checks.py)
        self.saved_policies = SavedPolicies()  # finished jobs' policies the chat endpoint answers with
        self.stopping = asyncio.Event()  # set as the server begins to stop; a new one each serving (lifespan)
        self.answering: ThreadPoolExecutor | None = None  # the chat answers' threads, while serving (lifespan)

    def hold_env_keys(self, keys: Sequence[str]) -> None:
        """Hold these task-app keys from now on (``--backend local`` hands them over in memory:
        the backend runs in the flow's own process, docs/compatibility.md)."""
        self.env_api_keys[:] = [k for k in keys if k]
        if self.runner is not None:
            self.runner.env_api_keys[:] = self.env_api_keys

    def answer_in_thread(self, act: Callable[[], T]) -> asyncio.Future[T]:
        """`act` (a policy answering a chat call: seconds of generation) on the answering threads,
        one per rollout that may be in flight (admission.answer_threads)."""
        return asyncio.get_running_loop().run_in_executor(self.answering, act)

    def begin_shutdown(self) -> None:
        """Called by servers.py as uvicorn starts shutting down: end live streams and
        training now, and a model check's waiting request, or uvicorn would wait for them."""
        self.stopping.set()
        if self.runner is not None:
            self.runner.stop_all()
            self.journal.wake_all()
        self.saved_policies.close()

    def live_runner(self) -> JobRunner:
        """The job runner, which exists while the app serves (between lifespan start and end)."""
        if self.runner is None:
            raise HTTPException(503, "The embedded backend is not serving (starting or shutting down)")
        return self.runner

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

    @contextmanager
    def saved_policy(self, job: dict[str, Any]) -> Iterator[Policy]:
        """The last recorded policy of a job that is not training in this process (blocking),
        held while the block runs: a chat call acts inside it (SavedPolicies.use)."""
        plan = plan_from_payload(job["payload"])
        folder = self.model_path(job["id"])
        if folder is None:  # a job finished before checkpoints kept its table in the database
            yield TabularPolicy.from_json(self.store.get_policy(job["id"]))
            return
        saved = folder
        with self.saved_policies.use(job["id"], folder,
                                     lambda: policies.load(saved, policy_settings(job["id"], plan))) as policy:
            yield policy

    def view(self, job: dict[str, Any]) -> dict[str, Any]:
        view = job_view(job)
        # An extension of the embedded backend (docs/wire-contract.md#queue-position): the
        # job's 1-based place in the queue, only while it waits for a slot.
        position = self.admission.position(job["id"]) if job["status"] == "queued" and self.runner else None
        if position is not None:
            view["queue_position"] = position
        # A cancelled job's too: its last recorded step's folder (docs/embedded-policy.md#checkpoints-and-artifacts).
        folder = self.model_path(job["id"]) if job["status"] in ("succeeded", "cancelled") else None
        if folder is not None:
            view["artifacts"] = {"model_path": str(folder)}
        return view

    def resume_interrupted(self, runner: JobRunner) -> None:
        """Jobs a previous run of the backend left queued or running go on (JobRunner.resume):
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
            runner.resume(job_id, plan, f"{base}/api/v1")


def _backend_of(request: Request) -> BackendState:
    backend: BackendState = request.app.state.backend
    return backend


# The backend object of the app serving the request: a parameter of every route.
Backend = Annotated[BackendState, Depends(_backend_of)]


def require_key(request: Request, b: Backend) -> None:
    """Everything under /api but /api/health needs the Bearer key; checked before anything of
    the request is validated, so a stranger learns nothing but 401."""
    if not b.bearer_ok(request):
        raise HTTPException(401, "Missing or invalid API key: send Authorization: Bearer <SYNTH_API_KEY>",
                            headers={"WWW-Authenticate": "Bearer"})


def job_view(job: dict[str, Any]) -> dict[str, Any]:
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

