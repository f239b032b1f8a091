"""Admission control of the embedded backend: how many jobs train at once, and how many
rollouts are in flight across them (docs/architecture.md#admission).

- At most ``max_jobs`` jobs train at once; the others wait with status ``queued`` and start
  in the order they were submitted (FIFO) as a slot frees. ``lm`` jobs also need a device:
  one per CUDA device when there are any, else one on the CPU. A queued ``lm`` job waiting
  for a device lets a stand-in job behind it take a free slot.
- At most ``max_rollouts`` rollouts are in flight across every job, on top of each job's
  ``max_concurrent_rollouts``. A rollout takes its slot before it is sent, so its time limit
  counts from the send, not from the wait.

The defaults come from the CPUs this process may use (os.sched_getaffinity, else
os.cpu_count): ``max_jobs`` = that count, from 2 to 16 (one backend is one Python process:
more jobs at once only share the same cores), and ``max_rollouts`` = 8 rollouts per job slot
(the job runner's default ``max_concurrent_rollouts``), so the default jobs run at full width.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx

from app.local.training.retry import client_limits

MAX_JOBS_LIMIT = 256
MAX_ROLLOUTS_LIMIT = 4096
ROLLOUTS_PER_JOB_SLOT = 8  # runner.DEFAULT_MAX_CONCURRENT: the default job runs at full width
KEYED_ANSWER_THREADS = 4  # chat calls with a key (a finished job's policy) beside the rollouts' own
JOBS_FLAG = "--max-jobs"
ROLLOUTS_FLAG = "--max-rollouts"


def usable_cpus() -> int:
    """The CPUs this process may run on (a container's or taskset's limit counts)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def default_max_jobs(cpus: int | None = None) -> int:
    return min(16, max(2, cpus if cpus is not None else usable_cpus()))


def default_max_rollouts(max_jobs: int | None = None) -> int:
    return min(MAX_ROLLOUTS_LIMIT, ROLLOUTS_PER_JOB_SLOT * (max_jobs or default_max_jobs()))


def bound_problem(name: str, value: object, high: int) -> str | None:
    """Why a limit is not usable (a whole number from 1 to ``high``), or None."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        return f"{name} must be a whole number from 1 to {high:,} (got {value!r})"
    return None


def lm_devices(processes: int = 1) -> int:
    """How many `lm` jobs can train at once: one per CUDA device, else one (the CPU); a job of
    N processes (docs/design/data-parallel.md) takes N devices. Blocking (imports torch):
    called in a thread, once, when the first `lm` job asks."""
    try:
        import torch
    except ImportError:
        return 1
    try:
        gpus = int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except (RuntimeError, AssertionError):  # a CUDA build without a usable driver
        gpus = 0
    return max(1, gpus // max(processes, 1))


def answer_threads(admission: Admission) -> int:
    """The threads the chat endpoint answers on (app/local/server/backend.py's lifespan): one for
    every rollout in flight, each waiting on its policy for a turn at a time, and a few for callers
    with a key. Not asyncio's default executor: it has os.cpu_count() + 4 threads (6 on 2 cores),
    shared with the updates, the checkpoint writes and the parsing of task-app answers, so 8
    rollouts in flight had at most 6 turns generated together (docs/embedded-policy.md#batched-generation)."""
    return admission.max_rollouts + KEYED_ANSWER_THREADS


def rollout_pool(admission: Admission) -> httpx.Limits:
    """The job runner's HTTP client: a connection for every rollout in flight and every job's
    /openapi.json, so a rollout never waits for a pooled connection inside its time limit
    (httpx counts that wait in the request's timeout)."""
    return client_limits(admission.max_rollouts + admission.max_jobs)


@dataclass
class _Ticket:
    job_id: str
    device: bool | None = None  # needs a device (an `lm` job); None until the job says
    admitted: asyncio.Future[None] | None = None


@dataclass
class Admission:
    """The backend's job slots (FIFO queue) and its rollout slots. Lives on the event loop."""

    max_jobs: int = field(default_factory=default_max_jobs)
    max_rollouts: int = 0  # 0: default_max_rollouts(max_jobs)
    devices: Callable[[], int] = lm_devices

    def __post_init__(self) -> None:
        if not self.max_rollouts:
            self.max_rollouts = default_max_rollouts(self.max_jobs)
        for name, value, high in (("max_jobs", self.max_jobs, MAX_JOBS_LIMIT),
                                  ("max_rollouts", self.max_rollouts, MAX_ROLLOUTS_LIMIT)):
            if problem := bound_problem(name, value, high):
                raise ValueError(problem)
        self._waiting: list[_Ticket] = []
        self._running: set[str] = set()
        self._on_device: set[str] = set()
        self._device_count: int | None = None
        self._rollout_slots: asyncio.Semaphore | None = None
        self.rollouts_in_flight = 0
        self.most_rollouts_in_flight = 0

    def fresh(self) -> Admission:
        """The same limits, nothing admitted or queued (a backend that starts serving again)."""
        return Admission(self.max_jobs, self.max_rollouts, self.devices)

    # -- jobs -------------------------------------------------------------------------

    def enqueue(self, job_id: str, device: bool | None = None) -> None:
        """Take the job's place in the queue now (synchronously: the order of submission, or
        of resumption after a restart, is the order of admission). With ``device`` known (the
        job says whether it trains a language model) it is admitted at once when a slot is free,
        so the create answer of a job that does not wait carries no queue position."""
        if job_id in self._running or any(t.job_id == job_id for t in self._waiting):
            return
        ticket = _Ticket(job_id, device)
        self._waiting.append(ticket)
        if device is not None and not (device and self._device_count is None):
            ticket.admitted = asyncio.get_running_loop().create_future()
            self._admit()

    def position(self, job_id: str) -> int | None:
        """1-based place of a queued job, None when it is not waiting."""
        for index, ticket in enumerate(self._waiting, start=1):
            if ticket.job_id == job_id:
                return index
        return None

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def device_slots(self) -> int | None:
        return self._device_count

    def why_waiting(self, ahead: int, for_device: bool) -> str:
        """Why a job waits, in words true of the moment: after a restart the jobs ahead of it may
        not have started yet, so "0 are running" is not the reason (docs/hardening.md#8)."""
        if for_device:
            return (f"`lm` jobs train one per device and this backend has {self.device_slots or 1} "
                    "(each CUDA device, else the CPU)")
        at_most = f"the backend runs at most {self.max_jobs} job{'s' * (self.max_jobs != 1)} at once ({JOBS_FLAG})"
        running = self.running
        if running >= self.max_jobs or ahead == 0:
            return f"{at_most}, and {running} {'is' if running == 1 else 'are'} running"
        starting = min(ahead, self.max_jobs - running)
        now = f"{running} {'is' if running == 1 else 'are'} running and " if running else ""
        return (f"{at_most}: {now}{starting} job{'s' * (starting != 1)} ahead of it "
                f"{'is' if starting == 1 else 'are'} starting first")

    async def admit(self, job_id: str, *, device: bool, on_wait: Callable[[int, bool], None] | None = None) -> None:
        """Wait for the job's slot (and a device for an `lm` job). ``on_wait(ahead, for_device)``
        is called once when the job has to wait. Cancelling the wait leaves the queue."""
        self.enqueue(job_id)
        if job_id in self._running:
            return
        if device and self._device_count is None:
            count = await asyncio.to_thread(self.devices)
            self._device_count = self._device_count or max(1, count)
        ticket = next(t for t in self._waiting if t.job_id == job_id)
        ticket.device = device
        if ticket.admitted is None:
            ticket.admitted = asyncio.get_running_loop().create_future()
        self._admit()
        if ticket.admitted.done():
            return
        if on_wait is not None:
            position = self.position(job_id) or 1
            for_device = device and len(self._running) < self.max_jobs
            on_wait(position - 1, for_device)
        try:
            await ticket.admitted
        except asyncio.CancelledError:
            self.release(job_id)
            raise

    def release(self, job_id: str) -> None:
        """The job ended (or left the queue): its slot goes to the first job that fits."""
        self._waiting = [t for t in self._waiting if t.job_id != job_id]
        self._running.discard(job_id)
        self._on_device.discard(job_id)
        self._admit()

    def _admit(self) -> None:
        for ticket in list(self._waiting):
            if len(self._running) >= self.max_jobs:
                return
            if ticket.admitted is None or ticket.device is None:
                return  # its job has not said yet what it needs: nobody passes it
            if ticket.admitted.done():  # cancelled: it leaves in release()
                continue
            if ticket.device:
                if len(self._on_device) >= (self._device_count or 1):
                    continue  # waits for a device; a stand-in job behind it may go first
                self._on_device.add(ticket.job_id)
            self._waiting.remove(ticket)
            self._running.add(ticket.job_id)
            ticket.admitted.set_result(None)

    # -- rollouts ---------------------------------------------------------------------

    @asynccontextmanager
    async def rollout_slot(self) -> AsyncIterator[None]:
        """Hold one of the backend's rollout slots while a rollout is sent and answered."""
        if self._rollout_slots is None:
            self._rollout_slots = asyncio.Semaphore(self.max_rollouts)
        async with self._rollout_slots:
            self.rollouts_in_flight += 1
            self.most_rollouts_in_flight = max(self.most_rollouts_in_flight, self.rollouts_in_flight)
            try:
                yield
            finally:
                self.rollouts_in_flight -= 1
