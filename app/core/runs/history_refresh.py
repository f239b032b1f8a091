"""Bring the run history's statuses up to date: each job not known to have ended is asked
about on the backend it ran on (``GET /rl/jobs/{id}``), and what the backend says is written
back (final for a terminal status), so `synth-tui history` does not show a finished job as
running until someone attaches to it.

Both front ends call :func:`refresh_statuses`: the history screen in a worker, row by row as
answers arrive; `history --no-tui` before it prints. The jobs are grouped per backend and key,
each backend gets a few requests at a time with a short timeout, and a backend that does not
answer is given up on for the rest of its jobs, whose rows keep the status last seen.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from app.core.api.client import SynthClient
from app.core.api.errors import ApiError, AuthError, BackendTimeout, BackendUnreachable, NotFoundError
from app.core.api.transport import ssl_context
from app.core.api.wire import is_terminal_status
from app.core.errors import SynthTuiError
from app.core.runs.history import RunHistory, RunRecord
from app.core.runs.jobs import remember

# Seconds one status request may take (connect and read); a silent backend costs this once.
REFRESH_TIMEOUT_S = 5.0
# Requests in flight per backend.
PER_BACKEND = 4


class JobKeys(Protocol):
    """Where each job's key comes from: the launch session (``LaunchSession.backend_and_key_for``),
    named here by what the refresh asks of it, so the run history does not import the launch."""

    def backend_and_key_for(self, record: RunRecord) -> tuple[str, str] | SynthTuiError:
        """The job's backend and the key to ask it with, or why there is no key."""
        ...


@dataclass(frozen=True)
class StatusAnswer:
    """What the check learned about one job: its status now, or why there is none."""

    job_id: str
    backend: str
    status: str | None = None
    # Why there is no status (the job keeps the one last seen), and whose problem it is:
    # "backend" (what the backend did: "did not answer (connection refused)", "refused the
    # key (HTTP 401)"…), "key" (no SYNTH_API_KEY for it), or "job" (the backend answered but
    # does not know this job).
    problem: str | None = None
    problem_of: str | None = None
    # The run history could not be written (jobs.remember's warning).
    warning: str | None = None


def problem_notes(answers: Iterable[StatusAnswer]) -> list[str]:
    """One line per problem the check met, for a header note or stderr: which backend did not
    answer and why, how many jobs keep the status last seen."""
    counts: dict[tuple[str, str, str], int] = {}
    for answer in answers:
        if answer.problem is not None and answer.problem_of is not None:
            what = (answer.problem_of, answer.backend, answer.problem if answer.problem_of != "job" else answer.job_id)
            counts[what] = counts.get(what, 0) + 1
    notes = []
    for (kind, backend, detail), count in counts.items():
        jobs = "its job marked ? shows" if count == 1 else f"its {count} jobs marked ? show"
        if kind == "backend":
            notes.append(f"{backend} {detail}: {jobs} the status last seen.")
        elif kind == "key":
            notes.append(f"No key for {backend}: {detail.rstrip('.')}; {jobs} the status last seen "
                         f"(--env-file PATH gives one).")
        else:
            notes.append(f"{backend} does not know job {detail}: it shows the status last seen, marked ?.")
    return notes


def backend_trouble(exc: BaseException, timeout: float) -> str:
    """What a backend did instead of answering, after its URL in a note."""
    if isinstance(exc, TimeoutError | BackendTimeout):
        return f"did not answer within {timeout:g} s"
    if isinstance(exc, BackendUnreachable):
        reason = exc.message.rstrip(".").rpartition(": ")[2]  # "… at URL for …: connection refused."
        return f"did not answer ({reason})" if reason and reason != exc.message.rstrip(".") else "did not answer"
    if isinstance(exc, AuthError):
        return f"refused the key (HTTP {exc.status})" if exc.status else "refused the key"
    if isinstance(exc, ApiError) and exc.status:
        return f"answered HTTP {exc.status}"
    return "answered with something that is not the API's"


def needs_refresh(record: RunRecord) -> bool:
    """A job whose status may still change: the history has not seen it end."""
    return record.final_status is None


async def refresh_statuses(session: JobKeys, records: Sequence[RunRecord], *,
                           timeout: float = REFRESH_TIMEOUT_S, per_backend: int = PER_BACKEND,
                           history: RunHistory | None = None) -> AsyncIterator[StatusAnswer]:
    """Ask the backends about every job of ``records`` that has not ended, and yield one
    answer per job as it arrives; each new status is written to the history first. Keys come
    from each job's .env (``session.backend_and_key_for``: --env-file, else the remembered
    .env, else the shell); a job whose key cannot be found is answered with that problem."""
    groups: dict[tuple[str, str], list[RunRecord]] = {}
    found: dict[tuple[str, str | None], tuple[str, str] | SynthTuiError] = {}
    for record in filter(needs_refresh, records):
        where = (record.backend, record.env_path)
        if where not in found:
            found[where] = await asyncio.to_thread(session.backend_and_key_for, record)
        resolved = found[where]
        if isinstance(resolved, SynthTuiError):
            yield StatusAnswer(record.job_id, record.backend, problem=resolved.message, problem_of="key")
            continue
        groups.setdefault(resolved, []).append(record)
    if not groups:
        return
    await asyncio.to_thread(ssl_context)  # built once, off the caller's loop (the UI's, in the TUI)
    answers: asyncio.Queue[StatusAnswer | None] = asyncio.Queue()
    tasks = [asyncio.create_task(_ask_backend(backend, key, jobs, answers, timeout, per_backend, history))
             for (backend, key), jobs in groups.items()]
    try:
        for _ in range(sum(len(jobs) for jobs in groups.values())):
            answer = await answers.get()
            assert answer is not None
            yield answer
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()


async def _ask_backend(backend: str, key: str, records: list[RunRecord], answers: asyncio.Queue[StatusAnswer | None],
                       timeout: float, per_backend: int, history: RunHistory | None) -> None:
    """One backend's jobs, ``per_backend`` at a time; once it fails to answer (or refuses the
    key), its remaining jobs are answered with that problem instead of being asked."""
    down: str | None = None
    limit = asyncio.Semaphore(per_backend)

    async def ask(client: SynthClient, record: RunRecord) -> None:
        nonlocal down
        async with limit:
            if down is not None:
                answers.put_nowait(StatusAnswer(record.job_id, backend, problem=down, problem_of="backend"))
                return
            try:
                # A bound on the whole request, not only on each of its phases.
                status = await asyncio.wait_for(client.get_job(record.job_id, retries=0), timeout)
            except NotFoundError as exc:
                answers.put_nowait(StatusAnswer(record.job_id, backend, problem=exc.message, problem_of="job"))
                return
            except (ApiError, TimeoutError) as exc:
                down = down or backend_trouble(exc, timeout)
                answers.put_nowait(StatusAnswer(record.job_id, backend, problem=down, problem_of="backend"))
                return
        answers.put_nowait(await _write(record, status.status, history))

    try:
        client = SynthClient(backend, key, timeout=timeout, retries=0)
    except SynthTuiError as exc:  # a key a header cannot carry (checked before, so unlikely)
        for record in records:
            answers.put_nowait(StatusAnswer(record.job_id, backend, problem=exc.message, problem_of="backend"))
        return
    async with client:
        await asyncio.gather(*(ask(client, record) for record in records))


async def _write(record: RunRecord, status: str, history: RunHistory | None) -> StatusAnswer:
    """The new status into the history (final when terminal); unchanged ones are not written."""
    final = is_terminal_status(status)
    warning = None
    if final or status != record.last_status:
        warning = await asyncio.to_thread(remember, lambda h: h.record_progress(record.job_id, status=status,
                                                                                final=final), history)
    return StatusAnswer(record.job_id, record.backend, status=status, warning=warning)


__all__ = ["PER_BACKEND", "REFRESH_TIMEOUT_S", "JobKeys", "StatusAnswer", "backend_trouble", "needs_refresh",
           "problem_notes", "refresh_statuses"]
