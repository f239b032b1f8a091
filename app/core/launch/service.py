"""The launch sequence, written once for both front ends: check, submit, watch.

The headless command, the verification and preview screens, the dashboard's and the jobs view's
rerun all call these; they only print or draw what comes back (docs/architecture.md).

- :func:`check`: probe -> verify, health and the model check -> verdict, under ONE timeout
  and retry policy (:data:`CHECK_TIMEOUT_S` per check, no retries, each check capped).
- :func:`submit`: create -> status check -> remember. What counts as created is
  :func:`created` (docs/wire-contract.md#job-creation).
- watch: :func:`watch_client` is what every watch reads with; the watch itself, its sinks and
  what every watch writes are the job's (``app/core/runs/watch.py``).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.core.errors import ExitCode, SynthTuiError
from app.core.launch.diagnosis import BackendCheck, ModelCheck, OverallVerdict, TaskAppCheck, overall_verdict
from app.core.redact import mask_secret
from app.core.runs.jobs import JobContext

# The client is imported when its step comes: the first screen is drawn before httpx is
# imported (docs/performance.md#first-paint).
if TYPE_CHECKING:
    from app.core.api.client import SynthClient
    from app.core.api.results import CreateResult
    from app.core.launch.session import LaunchSession

# Each check's budget, for both front ends; read per call, so a test can shorten it.
CHECK_TIMEOUT_S = 30.0
# httpx's own timeout fires first and names the phase; this guard only stops an answer that
# trickles in forever, so that no check outlives its budget by more than this.
GUARD_GRACE_S = 0.5
# The answers to POST /rl/jobs that mean "created", with a job id (docs/wire-contract.md#job-creation).
CREATED_STATUSES = frozenset({200, 201})


class VerificationFailed(SynthTuiError):
    exit_code = ExitCode.CHECKS_FAILED


class JobCreationFailed(SynthTuiError):
    """An answer to POST /rl/jobs that is not a created job (:func:`created`)."""

    exit_code = ExitCode.BACKEND
    result: CreateResult | None = None  # the answer, to show


# --------------------------------------------------------------------------- config


def require_configs(config_paths: Sequence[str]) -> None:
    """Every ``--config`` path names something, or the launch stops here, before a front end
    starts (exit 2 in both, in toml_source.config_not_found's words): a missing file is nothing
    the picker could show to fix (the walk). A link to nothing, or in a loop, is left to the
    read, which names it."""
    from app.core.config.toml_source import config_not_found
    from app.core.env.discovery import resolved_user_path, user_path

    for raw in config_paths:
        if not os.path.lexists(user_path(raw)):
            raise config_not_found(resolved_user_path(raw))


# --------------------------------------------------------------------------- check


def check_timeout(timeout: float | None = None) -> float:
    return timeout or CHECK_TIMEOUT_S


@dataclass
class CheckOutcome:
    """The checks as they ended, and what they mean together."""

    backend: BackendCheck
    task_app: TaskAppCheck
    model: ModelCheck | None = None

    @property
    def verdict(self) -> OverallVerdict:
        return overall_verdict(self.backend, self.task_app, self.model)

    def failure(self) -> SynthTuiError | None:
        """What stops the launch, or None when it may go on: the backend's own error (its
        exit code: 5 unreachable, no RL jobs, no answer in time…; 3 for a refused key) first,
        then the verdict's first problem (exit 3)."""
        error = self.backend.error
        if error is not None:
            return error
        verdict = self.verdict
        if verdict.ready:
            return None
        first = verdict.problems[0]
        if self.backend.timed_out:  # as when httpx's own timeout names the phase: the backend's exit code
            from app.core.api.errors import BackendTimeout

            return BackendTimeout(first.message, first.fix)
        return VerificationFailed(first.message, first.fix)

    @property
    def exit_code(self) -> int:
        failure = self.failure()
        return ExitCode.OK if failure is None else failure.exit_code


async def check_backend(session: LaunchSession, *, timeout: float | None = None,
                        clock: Callable[[], float] = time.monotonic) -> BackendCheck:
    """The probe, then the backend's verification of the task app, bounded by the budget."""
    from app.core.api.errors import ApiError

    budget = check_timeout(timeout)
    check = BackendCheck(session.backend_base, mask_secret(session.synth_api_key()), budget)
    started = clock()
    try:
        check.result = await asyncio.wait_for(session.verify(timeout=budget), budget + GUARD_GRACE_S)
    except TimeoutError:
        check.timed_out = True
    except ApiError as exc:  # unreachable, 401, no RL jobs, a broken answer: each becomes a row with its fix
        check.error = exc
    check.elapsed_s = clock() - started
    return check


async def check_task_app(session: LaunchSession, *, timeout: float | None = None,
                         clock: Callable[[], float] = time.monotonic) -> TaskAppCheck:
    """The direct /health and /task_info check from this machine, bounded by the budget."""
    budget = check_timeout(timeout)
    prepared = session.prepare()
    env_key = session.secrets().get("ENVIRONMENT_API_KEY")
    rollout = prepared.payload.get("data", {}).get("config", {}).get("rollout")
    env_name = rollout.get("env_name") if isinstance(rollout, dict) else None
    check = TaskAppCheck(prepared.task_url, mask_secret(env_key), budget,
                         env_name=env_name if isinstance(env_name, str) else None)
    started = clock()
    try:
        check.report = await asyncio.wait_for(session.health(timeout=budget), budget + GUARD_GRACE_S)
    except TimeoutError:
        check.timed_out = True
    check.elapsed_s = clock() - started
    return check


async def check_model(session: LaunchSession, *, timeout: float | None = None,
                      clock: Callable[[], float] = time.monotonic) -> ModelCheck:
    """The backend's check of the model the payload names (the hosted service's list for a
    backend without one), bounded by the budget."""
    from app.core.api.errors import ApiError
    from app.core.launch.asked_model import asked_model

    budget = check_timeout(timeout)
    check = ModelCheck(asked_model(session.prepare().payload).model, budget)
    started = clock()
    try:
        check.result = await asyncio.wait_for(session.verify_model(timeout=budget), budget + GUARD_GRACE_S)
    except TimeoutError:
        check.timed_out = True
    except ApiError as exc:  # unreachable, 401, a refused request: a row with its fix
        check.error = exc
    check.elapsed_s = clock() - started
    return check


async def check(session: LaunchSession, *, timeout: float | None = None) -> CheckOutcome:
    """The three checks at once (as the verification screen runs them), judged by one verdict."""
    backend, task_app, model = await asyncio.gather(check_backend(session, timeout=timeout),
                                                    check_task_app(session, timeout=timeout),
                                                    check_model(session, timeout=timeout))
    return CheckOutcome(backend, task_app, model)


# --------------------------------------------------------------------------- submit


def created(result: CreateResult) -> bool:
    """The one rule for an answer to POST /rl/jobs: 200 or 201 with a job id. A 202 (or any
    other status) says the request was taken, not that the job exists: not created."""
    return result.status in CREATED_STATUSES and bool(result.job_id)


def creation_failure(result: CreateResult) -> JobCreationFailed:
    """Why an answer is not a created job, with the way out: the same Idempotency-Key sent
    again gives back the job if the backend did create it."""
    retry = (f"Submit again with the same Idempotency-Key ({result.idempotency_key}): a job the backend did "
             "create is then returned, never created twice." if result.idempotency_key else
             "Check the backend's job list before submitting again.")
    if result.status not in CREATED_STATUSES:
        named = f" (it named job {result.job_id})" if result.job_id else ""
        return JobCreationFailed(f"Job creation failed: the backend answered HTTP {result.status}{named}, not "
                                 "200 or 201, so no job is known to exist.", retry)
    return JobCreationFailed("Response missing job id", f"The backend answered without job_id or id. {retry}")


@dataclass
class Submitted:
    job: JobContext
    result: CreateResult
    history_warning: str | None = None


async def submit(session: LaunchSession, payload: dict[str, Any], *, config_path: str | None,
                 idempotency_key: str | None = None, rerun_of: str | None = None,
                 answered: Callable[[CreateResult], None] | None = None) -> Submitted:
    """Create the job, check the answer (:func:`created`), record it in the run history.

    ``idempotency_key``: the session's (a retry never creates a second job) unless given (a
    rerun's new one). ``answered`` sees the answer before it is judged (headless prints it).
    Raises JobCreationFailed (exit 5) for an answer that is not a created job; nothing is
    remembered then."""
    key = idempotency_key or session.idempotency_key
    async with session.client() as client:
        result = await client.create_job(payload, idempotency_key=key)
    if answered is not None:
        answered(result)
    if not created(result):
        error = creation_failure(result)
        error.result = result
        raise error
    assert result.job_id is not None
    job = JobContext.of(result.job_id, payload, config_path)
    if rerun_of is None:
        session.job_id = result.job_id
    warning = await asyncio.to_thread(session.remember_submission, job, idempotency_key=key, rerun_of=rerun_of)
    return Submitted(job, result, warning)


async def rerun(session: LaunchSession, payload: dict[str, Any], *, rerun_of: str,
                config_path: str | None) -> Submitted:
    """Submit a job's payload again (the dashboard's and the jobs view's rerun): the same
    submit, with a new Idempotency-Key, recorded as a rerun of ``rerun_of``."""
    from app.core.launch.steps import new_idempotency_key

    return await submit(session, payload, config_path=config_path, idempotency_key=new_idempotency_key(),
                        rerun_of=rerun_of)


# --------------------------------------------------------------------------- watch


def watch_client(session: LaunchSession) -> SynthClient:
    """The client every watch reads with: no retries of its own, the watcher's reconnects
    (with their ConnectionState updates) are the one policy."""
    return session.client(retries=0)
