"""Cancel and rerun of a job, one way for the dashboard and the jobs view: the question before
a cancel, the cancel request, the payload the run history knows, and the submit of a rerun with
its notices. The screens keep what differs: which job, what they ask first, where a rerun opens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.core.launch import service
from app.core.runs.jobs import CANCEL_DETAIL, JobContext, read_history

if TYPE_CHECKING:
    from app.screens.base import FlowScreen


def confirm_cancel(screen: FlowScreen, job_id: str, cancel: Callable[[], object]) -> None:
    """Ask before a cancel is sent (the backend stops the job for good)."""
    screen.flow_app.confirm(f"Cancel job {job_id}?", cancel, label="Cancel job", detail=CANCEL_DETAIL)


async def request_cancel(screen: FlowScreen, job_id: str) -> str:
    """Ask the screen's backend to cancel the job; what it answered, in a word."""
    async with screen.session.client() as client:
        answer = await client.cancel_job(job_id)
    return answer.message or answer.status or "ok"


def payload_from_history(job_id: str) -> dict[str, Any] | None:
    """The payload the run history recorded for the job (file reads: call off the UI thread)."""
    record = read_history(job_id)  # a history that cannot be read knows no payload: never a crash
    return record.payload if record else None


async def submit_rerun(screen: FlowScreen, payload: dict[str, Any], *, rerun_of: str, config_path: str | None,
                       submitted: Callable[[str], str]) -> JobContext | None:
    """Submit ``payload`` again (service.rerun: a new Idempotency-Key, recorded as a rerun of
    ``rerun_of``); the screen is told ``submitted(new job id)``, or why it failed (None)."""
    try:
        rerun = await service.rerun(screen.session, payload, rerun_of=rerun_of, config_path=config_path)
    except service.JobCreationFailed as exc:
        screen.notify(f"{exc.message}. {exc.hint}", title="Rerun", severity="error", markup=False)
        return None
    screen.notify(submitted(rerun.job.job_id), title="Rerun")
    screen.flow_app.warn_history(rerun.history_warning)
    return rerun.job
