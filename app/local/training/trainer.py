"""The embedded backend's RL loop: rollouts from the task app, a GRPO-style update, events.

Each job runs as an asyncio task on the backend's event loop, so cancel is immediate and the
policy is served by the backend's own chat endpoint while the task app plays episodes.

Per iteration: `batch_size` groups, each of `group_size` rollouts on one seed (so
batch_size × group_size episodes; the hosted example config has episodes_per_batch =
batch_size × group_size), at most `rollout.max_concurrent_rollouts` in flight. Then one
policy-gradient step with group-relative advantages (policy.py). Evaluation: every
`every_n_iters` iterations and after the last one, `instances` episodes cycling over the
eval seeds, in mode "eval", with the same sampled policy (a greedy memoryless policy can
loop forever around a wall).

Every rollout gets its own RNG seeded from (job seed, mode, step, index), so a job with
`[training] seed` set is reproducible whatever order the concurrent turns arrive in.

Before the first rollout the job learns which rollout contract generation the task app speaks
(0.2 or 0.4/0.5) from its /openapi.json, else from the refusal of a body in the other one
(rollout_contract.py, docs/rollout-contracts.md), and says so in an `rl.taskapp.contract` event.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from app.core.api.failures import describe_http_error, response_detail
from app.core.api.retry import Attempts
from app.core.config.trainable import MAX_ANSWER_BYTES
from app.core.redact import printable, scrub_key_fragments
from app.core.runs.series import shown_number
from app.local import policies
from app.local.policies.base import (
    Act,
    Episode,
    Parallel,
    Policy,
    PolicyCannotAct,
    PolicyFailed,
    PolicySettings,
    Watched,
    read_manifest,
)
from app.local.policies.lm.model import ModelUnavailable, learning_rate_warning
from app.local.server.bodies import JOB_REFUSAL, JobCreate
from app.local.server.model_check import loading_words
from app.local.state.checkpoints import Checkpoints
from app.local.state.journal import Journal
from app.local.state.store import utc_now
from app.local.training.admission import JOBS_FLAG, Admission
from app.local.training.answers import DEFAULT_MAX_ANSWER_BYTES, NOT_COMPRESSED, AnswerTooLarge, send_capped, show_bytes
from app.local.training.retry import ROLLOUT_BACKOFF, send_with_retries
from app.local.training.rollout_contract import (
    GEN_02,
    GENERATION_NAMES,
    RolloutAsk,
    TaskAppError,
    fetch_openapi,
    generation_from_openapi,
    read_answer,
    refusal_asks_for,
    rollout_body,
)
from app.local.training.rollout_record import (
    DEFAULT_MAX_BYTES,
    DEFAULT_PER_STEP,
    PHASES,
    ROLLOUT_MEMORY_CHARS,
    TURNS_MAX,
    KeptRollout,
    Scrubber,
    StepSample,
    chat_turn,
    match_turns,
    read_step_reports,
    turn_chars,
    within_budget,
)

ROLLOUT_TIMEOUT_S = 120.0
RETRY_EVENTS_SHOWN = 5
# A phase's rollouts done so far, said at most this often (never for a phase done sooner): a
# real model on a CPU takes minutes a step, and a job that says nothing looks frozen (issue 37).
ROLLOUT_PROGRESS_EVERY_S = 10.0
ROLLOUT_PROGRESS_EVENT = "rl.train.rollouts"
TASK_APP_GONE_HINT = "Check that the task app is running and reachable at that address; its log says why it failed."
TASK_APP_CLOSED_HINT = ("The task app closed the connection without an answer; its log says why (it may have "
                        "crashed or restarted).")
NO_POLICY_CALL_DOC = "docs/embedded-policy.md#a-task-app-that-never-calls-the-policy"
LARGE_ANSWER_IN_THREAD = 1 << 20  # bytes: a larger answer is parsed off the event loop every client shares
DEFAULT_MAX_CONCURRENT = 8


class InvalidJobPayload(ValueError):
    """The POST /rl/jobs body cannot be trained; the message says what to fix."""


# A policy's own numbers that are also metrics (a chart each on the dashboard, a column in the
# export): what a GRPO practitioner reads beside the score, loss and entropy (docs/embedded-policy.md#metrics).
GRID_STATS = ("reward_std", "kl", "clip_ratio", "completion_tokens", "generation_tokens_per_s", "step_seconds",
              "allreduce_s")  # allreduce_s: data-parallel jobs only (app/local/parallel/policy.py)


def _point(name: str, value: float, phase: str, n: int) -> dict[str, Any]:
    return {"name": name, "value": value, "phase": phase, "data": {"n": n}}


@dataclass(frozen=True)
class TrainingPlan:
    task_url: str
    model: str
    epochs: int
    iterations_per_epoch: int
    batch_size: int
    group_size: int
    learning_rate: float
    max_turns: int
    max_concurrent: int
    env_name: str
    policy_name: str
    ops: tuple[str, ...]
    rollout_timeout_s: float = ROLLOUT_TIMEOUT_S
    eval_seeds: tuple[int, ...] = ()
    eval_instances: int = 0
    eval_every: int = 0
    seed: int | None = None
    # What the inspector keeps (rollout_record.py): train rollouts per step, bytes per job.
    inspect_per_step: int = DEFAULT_PER_STEP
    inspect_max_bytes: int = DEFAULT_MAX_BYTES
    # The most of one /rollout answer read (app/local/training/answers.py): a larger one fails the job.
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    # What the `lm` policy reads from the config as written (policy_options): trainer_mode,
    # kl_coef, lora, temperature, top_p, max_tokens. The stand-in ignores them.
    policy_options: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def total_steps(self) -> int:
        return self.epochs * self.iterations_per_epoch

    def eval_due(self, step: int) -> bool:
        if not self.eval_instances:
            return False
        return step == self.total_steps or bool(self.eval_every and step % self.eval_every == 0)


def plan_from_payload(body: Any) -> TrainingPlan:
    """Check a job payload (docs/wire-contract.md#job-creation; app.local.server.bodies.JobCreate, as
    POST /api/rl/jobs does) and read what training needs from it: a stored job's, on resume."""
    try:
        job = JobCreate.model_validate(body)
    except ValidationError as exc:
        raise InvalidJobPayload(JOB_REFUSAL.detail(exc.errors(), from_fastapi=False)) from None
    return training_plan(job, body["data"]["config"])


def training_plan(job: JobCreate, config: dict[str, Any]) -> TrainingPlan:
    """What training needs from a checked job payload; `config` is its data.config as sent."""
    data = job.data
    rollout, training, evaluation = data.config.rollout, data.config.training, data.config.evaluation
    return TrainingPlan(
        task_url=data.endpoint_base_url.rstrip("/"),
        model=data.model_name,
        epochs=training.num_epochs,
        iterations_per_epoch=training.iterations_per_epoch,
        batch_size=training.batch_size,
        group_size=training.group_size,
        learning_rate=float(training.learning_rate),
        max_turns=training.max_turns,
        max_concurrent=rollout.max_concurrent_rollouts or DEFAULT_MAX_CONCURRENT,
        env_name=str(rollout.env_name or "default"),
        policy_name=str(rollout.policy_name or "policy"),
        ops=tuple(rollout.ops or ("agent", "env")),
        rollout_timeout_s=float(rollout.timeout_s or ROLLOUT_TIMEOUT_S),
        max_answer_bytes=int(rollout.max_answer_bytes or DEFAULT_MAX_ANSWER_BYTES),
        eval_seeds=tuple(evaluation.seeds) if evaluation else (),
        eval_instances=evaluation.instances if evaluation else 0,
        eval_every=evaluation.every_n_iters if evaluation else 0,
        seed=training.seed,
        inspect_per_step=rollout.inspect_per_step,
        inspect_max_bytes=rollout.inspect_max_bytes,
        policy_options=policy_options(config),
    )


def policy_options(config: dict[str, Any]) -> dict[str, Any]:
    """The options of the `lm` policy, from the config as written (docs/embedded-policy.md#the-lm-policy):
    [model] (or [policy]) trainer_mode and chat_template; [training] kl_coef; [training.lora] (or
    the older top-level [lora]) r, alpha, dropout, target_modules; [policy] temperature, top_p,
    max_tokens."""
    def table(value: Any) -> dict[str, Any]:
        return value if isinstance(value, dict) else {}

    model, policy, training = table(config.get("model")), table(config.get("policy")), table(config.get("training"))
    lora = table(training.get("lora")) or table(config.get("lora"))
    options: dict[str, Any] = {
        "trainer_mode": model.get("trainer_mode") or policy.get("trainer_mode"),
        "chat_template": model.get("chat_template") or policy.get("chat_template"),
        "kl_coef": training.get("kl_coef"),
        "lora": {k: lora.get(k) for k in ("r", "alpha", "dropout", "target_modules") if lora.get(k) is not None},
        "temperature": policy.get("temperature"), "top_p": policy.get("top_p"), "max_tokens": policy.get("max_tokens"),
    }
    return {k: v for k, v in options.items() if v is not None}


@dataclass
class OpenRollout:
    """A rollout in flight: its RNG, and what the policy needs of every answer the chat
    endpoint gave it (Act.memo), by tool-call id. A retried chat call or a replayed rollout can
    leave answers the episode never used; only those the returned trajectory names are learned
    from (`used_memos`)."""

    rng: random.Random
    memos: dict[str, Any] = field(default_factory=dict)
    record: bool = False  # keep its chat turns for the inspector (rollout_record.py)
    turns: list[dict[str, Any]] = field(default_factory=list)
    turns_cut: int = 0
    turn_chars: int = 0  # what its kept turns hold, bounded by ROLLOUT_MEMORY_CHARS

    def used_memos(self, used: frozenset[str] | set[str]) -> list[Any]:
        """The memos of the tool calls the answer names (rollout_contract.read_tool_call_ids)."""
        # A task app that does not report its tool calls: every answer counts.
        return [memo for call_id, memo in self.memos.items() if not used or call_id in used]


@dataclass
class JobRun:
    """One job being trained: its policy, its rollouts in flight and its counters. What a
    restarted backend needs to go on after the last step recorded is `saved_state()`."""

    job_id: str
    plan: TrainingPlan
    api_base: str  # the backend's `{base}/api/v1`: rollout_contract.inference_url builds on it
    policy: Policy | None  # None until `loader` ran (the lm policy loads a model: in a thread)
    # Called with `stop`, an Event set when the job ends first (a data-parallel policy then stops
    # waiting for its ranks).
    loader: Callable[..., tuple[Policy, str | None]] | None = None
    policy_warning: str | None = None  # why `auto` trains the stand-in
    open_rollouts: dict[str, OpenRollout] = field(default_factory=dict)
    chat_completions: int = 0
    rollouts: int = 0
    retries: int = 0
    started: float = field(default_factory=time.monotonic)
    elapsed_before: float = 0.0  # seconds trained before a restart of the backend
    task: asyncio.Task[None] | None = None
    cancel_requested: bool = False
    stopping: bool = False  # the backend is shutting down: record nothing more (stop_all)
    abort_reason: str | None = None  # set by abort(): the job fails with this message
    step: int = 0  # the last step recorded (events, metrics and checkpoint)
    flat_steps: int = 0  # steps whose rollouts all scored the same
    first_score: float | None = None  # step 1's train mean score
    last_train_score: float | None = None
    eval_score: float | None = None  # the latest evaluation's mean score
    eval_pending: list[dict[str, Any]] | None = None  # `step` trained, its evaluation not yet recorded
    resumed: dict[str, Any] | None = None  # the checkpoint this run started from, if any
    contract: str = GEN_02  # the rollout contract generation spoken to the task app
    contract_announced: bool = False
    sample: StepSample | None = None  # the train rollouts of the current step the inspector may keep
    inspect_warned: bool = False  # a rollout could not be stored (said once: _keep)
    calling_rollouts: int = 0  # rollouts that called the policy at least once (_require_policy_calls)
    lm: bool | None = None  # trains a language model (needs a device: admission.py); None: by the trainer choice
    admitted: bool = False  # it holds one of the backend's job slots (admission.py)

    def __post_init__(self) -> None:
        self.seed = job_seed(self.job_id, self.plan)
        self.rng = random.Random(self.seed)

    def act(self, rollout_id: str | None, request: dict[str, Any], correlation_id: str) -> Act:
        """The policy's answer to one chat turn, recorded if the rollout is ours (and, for the
        inspector, what the chat `request` showed, when it keeps it)."""
        rollout = self.open_rollouts.get(rollout_id or "")
        if self.policy is None:
            raise PolicyCannotAct("the job's policy is still loading; call again once its rollouts start")
        # A call from outside the job's rollouts never draws from the job's own RNG.
        act = self.policy.act(request["messages"], request.get("tools"), request.get("tool_choice"),
                              correlation_id, rollout.rng if rollout else random.Random())
        if rollout is not None:
            rollout.memos[act.call_id] = act.memo
            if rollout.record:
                tool, arguments = answer_of(act.message)
                turn = within_budget(chat_turn(request, tool, arguments, act.call_id), rollout.turn_chars)
                # Once one turn is cut, every later one is too: the kept turns stay the first ones.
                if (not rollout.turns_cut and len(rollout.turns) < TURNS_MAX
                        and rollout.turn_chars + turn_chars(turn) <= ROLLOUT_MEMORY_CHARS):
                    rollout.turns.append(turn)
                    rollout.turn_chars += turn_chars(turn)
                else:
                    rollout.turns_cut += 1
        self.chat_completions += 1
        return act

    def counters(self) -> dict[str, Any]:
        seconds = max(self.elapsed_before + time.monotonic() - self.started, 1e-9)
        return {
            "seconds": round(seconds, 3),
            "rollouts": self.rollouts,
            "chat_completions": self.chat_completions,
            "rollouts_per_s": round(self.rollouts / seconds, 2),
            "retries": self.retries,
            "chat_completions_per_s": round(self.chat_completions / seconds, 2),
        }

    def saved_state(self) -> dict[str, Any]:
        """What resumes this job after `step` (with the policy saved in that step's folder)."""
        version, internal, gauss = self.rng.getstate()
        return {"step": self.step, "policy": self.policy.kind if self.policy else None,
                "eval_pending": self.eval_pending,
                "rng": [version, list(internal), gauss], "flat_steps": self.flat_steps,
                "first_score": self.first_score, "last_train_score": self.last_train_score,
                "eval_score": self.eval_score, "contract": self.contract,
                "counters": {"rollouts": self.rollouts, "chat_completions": self.chat_completions,
                             "retries": self.retries, "seconds": self.counters()["seconds"]}}

    def restore(self, state: dict[str, Any]) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.step = int(state["step"])
        self.eval_pending = state.get("eval_pending")
        self.flat_steps = int(state.get("flat_steps", 0))
        self.first_score = state.get("first_score")
        self.last_train_score = state.get("last_train_score")
        self.eval_score = state.get("eval_score")
        self.contract = state.get("contract", GEN_02)
        counters = state.get("counters") or {}
        self.rollouts = int(counters.get("rollouts", 0))
        self.chat_completions = int(counters.get("chat_completions", 0))
        self.retries = int(counters.get("retries", 0))
        self.elapsed_before = float(counters.get("seconds", 0.0))
        self.resumed = state


def job_seed(job_id: str, plan: TrainingPlan) -> int:
    return plan.seed if plan.seed is not None else int(job_id[-8:], 16)


def policy_settings(job_id: str, plan: TrainingPlan) -> PolicySettings:
    return PolicySettings(model=plan.model, learning_rate=plan.learning_rate, seed=job_seed(job_id, plan),
                          total_steps=plan.total_steps, batch_size=plan.batch_size, group_size=plan.group_size,
                          options=dict(plan.policy_options))


def answer_of(message: dict[str, Any]) -> tuple[str | None, Any]:
    """The tool an assistant message calls and its arguments (None and the text for a text answer)."""
    calls = message.get("tool_calls") or []
    if not calls:
        return None, {"content": message.get("content")}
    function = calls[0].get("function") or {}
    try:
        arguments = json.loads(function.get("arguments") or "{}")
    except ValueError:
        arguments = function.get("arguments")
    return function.get("name"), arguments


class PolicyUnavailable(Exception):
    """The job's policy cannot be loaded (say, the model is missing); the message says how to fix it."""


def _load_saved(folder: Any, settings: PolicySettings, parallel: Parallel,
                stop: threading.Event | None = None) -> tuple[Policy, str | None]:
    return policies.load(folder, settings, parallel, stop), None


async def _in_own_thread(fn: Callable[[], None]) -> None:
    """Run `fn` in a thread of its own, not the default executor: chat turns blocked on a
    broken policy (a stopped rank) can fill that pool, and closing is what unblocks them."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def finished() -> None:
        if not done.done():
            done.set_result(None)

    def run() -> None:
        try:
            fn()
        finally:
            try:
                loop.call_soon_threadsafe(finished)
            except RuntimeError:  # the loop closed meanwhile (the backend stopped): nobody waits
                pass

    threading.Thread(target=run, name="close-policy", daemon=True).start()
    await done


def _close_when_loaded(loading: asyncio.Future[tuple[Policy, str | None]]) -> None:
    if not loading.cancelled() and loading.exception() is None:
        threading.Thread(target=loading.result()[0].close, name="close-late-policy", daemon=True).start()


class Trainer:
    def __init__(self, journal: Journal, env_api_keys: Sequence[str], http: httpx.AsyncClient,
                 checkpoints: Checkpoints, other_secrets: Sequence[str] = (), *,
                 policy_kind: str = policies.DEFAULT_POLICY, infra_events: bool = False,
                 admission: Admission | None = None, parallel: Parallel = policies.ONE_PROCESS) -> None:
        self.journal = journal
        # How many jobs train at once and how many rollouts are in flight across them.
        self.admission = admission or Admission()
        self.env_api_keys = [k for k in env_api_keys if k]
        self.http = http
        self.checkpoints = checkpoints
        self.policy_kind = policy_kind
        self.parallel = parallel  # the lm policy's processes (`--processes N`): docs/design/data-parallel.md
        # The hosted service's hatchet.* and rl.runtime.modal.* chatter, imitated only when asked
        # (`synth-tui backend --infra-events`): here it would describe nothing real.
        self.infra_events = infra_events
        self.runs: dict[str, JobRun] = {}
        # Kept rollouts never hold a key: the task-app keys held now and the backend's own key.
        self.scrubber = Scrubber(lambda: [*self.env_api_keys, *other_secrets])

    def start(self, job_id: str, plan: TrainingPlan, api_base: str) -> None:
        """Train a job; `api_base` is the backend's `{base}/api/v1`, which the task app reaches."""
        loader = partial(policies.make_policy, self.policy_kind, policy_settings(job_id, plan), self.parallel)
        self._launch(JobRun(job_id, plan, api_base.rstrip("/"), None, loader))

    def resume(self, job_id: str, plan: TrainingPlan, api_base: str) -> None:
        """Go on with a job a previous run of the backend left queued or running: from the
        checkpoint of its last recorded step, or from the start when it recorded none. A job
        whose checkpoint cannot be read is failed, saying why."""
        store = self.journal.store
        state = store.get_checkpoint(job_id)
        settings = policy_settings(job_id, plan)
        policy: Policy | None = None
        loader: Callable[..., tuple[Policy, str | None]] | None = None
        try:
            if state is None:
                loader = partial(policies.make_policy, self.policy_kind, settings, self.parallel)
            else:
                folder = self.checkpoints.step_dir(job_id, int(state["step"]))
                kind = read_manifest(folder)["kind"]
                if kind == "tabular":
                    policy = policies.load(folder, settings)
                else:  # a model: loaded in a thread as the job starts (_load_policy)
                    loader = partial(_load_saved, folder, settings, self.parallel)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            store.fail_interrupted(job_id, f"its checkpoint could not be read ({type(exc).__name__}: {exc})")
            return
        run = JobRun(job_id, plan, api_base.rstrip("/"), policy, loader)
        if state is not None:
            run.lm = kind == "lm"
        job = store.get_job(job_id)
        if state is not None:
            run.restore(state)
        elif job is not None and job["status"] == "queued":
            self._launch(run)  # it never started: a plain start
            return
        run.resumed = state or {"step": 0}
        # Rollouts kept for what will be played again would show twice in the inspector.
        store.rollouts.forget_replayed(job_id, run.step, eval_too=run.eval_pending is not None)
        self._launch(run)

    def _launch(self, run: JobRun) -> None:
        self.runs[run.job_id] = run
        # Its place in the queue is taken now, in the order jobs are launched (admission.py).
        self.admission.enqueue(run.job_id, self._device_known(run))
        run.task = asyncio.get_running_loop().create_task(self._train(run), name=f"train-{run.job_id}")
        # Whatever ends the task (even a cancel before its first line ran) frees its slot.
        run.task.add_done_callback(partial(self._task_done, run.job_id))

    def _task_done(self, job_id: str, _task: asyncio.Task[None]) -> None:
        self.admission.release(job_id)

    async def cancel(self, job_id: str) -> None:
        run = self.runs.get(job_id)
        if run is not None and run.task is not None and not run.task.done():
            run.cancel_requested = True
            run.task.cancel()
            await asyncio.wait([run.task], timeout=1.0)
        # Also covers a task cancelled before its first line ran (no handler ever executed).
        self.runs.pop(job_id, None)
        self.journal.finish(job_id, "cancelled", "rl.job.cancelled", "Job cancelled by request")

    def abort(self, job_id: str, reason: str) -> None:
        """Fail a running job at once (say, the task app asks for what the policy cannot do)."""
        run = self.runs.get(job_id)
        if run is not None and run.task is not None and not run.task.done() and run.abort_reason is None:
            run.abort_reason = reason
            run.task.cancel()

    def stop_all(self) -> list[asyncio.Task[None]]:
        """Server shutdown: stop training without recording anything more, so the next start
        of the backend resumes these jobs from their last recorded step."""
        tasks = []
        for run in self.runs.values():
            if run.task is not None and not run.task.done():
                run.stopping = True
                run.task.cancel()
                tasks.append(run.task)
        return tasks

    # -- the loop -----------------------------------------------------------------------

    async def _train(self, run: JobRun) -> None:
        j, job_id = self.journal, run.job_id
        try:
            await self._run_job(run)
        except asyncio.CancelledError:
            if not self._end_cancelled(run):
                raise  # server shutdown: see stop_all
        except (TaskAppError, PolicyUnavailable, PolicyFailed) as exc:
            j.finish(job_id, "failed", "rl.job.failed", str(exc), level="error",
                     data={"step": run.step, **run.counters(), **getattr(exc, "data", {})}, error=str(exc))
        except Exception as exc:  # a bug here must still end the job, not leave it running
            message = f"Internal error in the embedded trainer at step {run.step + 1}: {type(exc).__name__}: {exc}"
            j.finish(job_id, "failed", "rl.job.failed", message, level="error",
                     data={"step": run.step}, error=message)
        finally:
            self.runs.pop(job_id, None)
            if run.policy is not None:
                try:  # the lm policy's training thread ends here, whatever ended the job
                    await asyncio.shield(_in_own_thread(run.policy.close))
                except BaseException:  # noqa: BLE001 - a second cancel while closing: the thread is a daemon
                    pass

    async def _run_job(self, run: JobRun) -> None:
        """The job from its slot to its last step (or the steps a resumed job has left)."""
        j, job_id, plan = self.journal, run.job_id, run.plan
        await self._wait_for_slot(run)
        if run.resumed is None:
            if not j.set_running(job_id):
                return
            await self._load_policy(run)
            self._announce(run)
        else:
            await self._load_policy(run)
            self._announce_resume(run)
        if not self.env_api_keys:
            raise TaskAppError(
                "The embedded backend holds no ENVIRONMENT_API_KEY, so it cannot call the "
                "task app; restart it with the key the task app expects"
            )
        if not run.contract_announced:
            await self._learn_contract(run)
        if run.eval_pending is not None:  # resumed between a step's training and its evaluation
            await self._evaluate_step(run, run.step, run.eval_pending)
        while run.step < plan.total_steps:
            await self._train_step(run, run.step + 1)
            if self.infra_events and run.step % 5 == 0:
                j.event(job_id, "hatchet.worker.heartbeat",
                        "Embedded stand-in for the Hatchet worker heartbeat", data={"step": run.step})
        if self.infra_events:
            j.event(job_id, "rl.runtime.modal.stopped", "In-process stand-in for the Modal runtime stopped")
        self._complete(run)

    def _end_cancelled(self, run: JobRun) -> bool:
        """End a job whose task was cancelled: aborted (failed) or cancelled by request. False
        when neither: the server is stopping, and the job stays for the next start."""
        j, job_id = self.journal, run.job_id
        if run.abort_reason is not None:
            j.finish(job_id, "failed", "rl.job.failed", run.abort_reason, level="error",
                     data={"step": run.step, **run.counters()}, error=run.abort_reason)
            return True
        if not run.cancel_requested:
            return False
        when = (f"during step {run.step + 1}/{run.plan.total_steps}" if run.admitted
                else "while it waited in the queue")
        j.finish(job_id, "cancelled", "rl.job.cancelled", f"Job cancelled by request {when}",
                 data={"step": run.step, **run.counters()})
        return True

    async def _wait_for_slot(self, run: JobRun) -> None:
        """Wait for one of the backend's job slots (and a device for an `lm` job), saying so
        in an event when the job has to wait and again when it starts (admission.py)."""
        admission, job_id = self.admission, run.job_id
        device = await self._needs_device(run)
        waited_since: float | None = None

        def waiting(ahead: int, for_device: bool) -> None:
            nonlocal waited_since
            waited_since = time.monotonic()
            if run.resumed is not None:  # a job left running waits again: it is queued meanwhile
                self.journal.store.requeue(job_id)
            place = "first in the queue" if ahead == 0 else f"{ahead} job{'s' * (ahead != 1)} ahead in the queue"
            if for_device:
                why = (f"`lm` jobs train one per device and this backend has {admission.device_slots or 1} "
                       "(each CUDA device, else the CPU)")
            else:
                why = (f"the backend runs at most {admission.max_jobs} job{'s' * (admission.max_jobs != 1)} at "
                       f"once ({JOBS_FLAG}), and {admission.running} {'is' if admission.running == 1 else 'are'} "
                       "running")
            self.journal.event(job_id, "rl.job.queued", f"Waiting for a slot: {place}; {why}",
                               data={"queue_position": ahead + 1, "ahead": ahead, "max_jobs": admission.max_jobs,
                                     "running": admission.running, "waits_for_device": for_device})

        await admission.admit(job_id, device=device, on_wait=waiting)
        run.admitted = True
        if waited_since is not None:
            waited = time.monotonic() - waited_since
            run.started = time.monotonic()  # its counters' seconds count from now, not from the wait
            self.journal.event(job_id, "rl.job.admitted",
                               f"A slot is free after {waited:.0f} s in the queue: the job starts",
                               data={"waited_seconds": round(waited, 3), "max_jobs": admission.max_jobs})

    def _device_known(self, run: JobRun) -> bool | None:
        """Whether the job trains a language model (one per device), when that is known without
        looking for the model: from its checkpoint when resumed, else from the backend's
        --trainer; `auto` with the trainer extra installed: None (_needs_device looks)."""
        if run.policy is not None:
            return run.policy.kind == "lm"
        if run.lm is not None:
            return run.lm
        if self.policy_kind != "auto":
            return self.policy_kind == "lm"
        return False if policies.trainer_extra_missing() else None

    async def _needs_device(self, run: JobRun) -> bool:
        """_device_known, or for `auto` with the trainer extra: whether the model is here."""
        known = self._device_known(run)
        if known is not None:
            return known
        settings = policy_settings(run.job_id, run.plan)
        return await asyncio.to_thread(lambda: policies.lm_unavailable(settings) is None)

    async def _load_policy(self, run: JobRun) -> None:
        """The job's policy (the lm policy loads its model: seconds, in a thread). A model that
        cannot be had fails the job at once, saying how to get it; `auto` falling back to the
        stand-in says why in a warning event."""
        if run.policy is not None or run.loader is None:
            return
        if self.parallel.processes > 1:  # ranks take a while to start: the log says what it waits for
            self.journal.event(run.job_id, "rl.train.policy.starting", self._starting_ranks(), data={
                "processes": self.parallel.processes, "several_machines": bool(self.parallel.shared_dir)})
        loading_since = await self._announce_loading(run)
        stop = threading.Event()
        loading = asyncio.ensure_future(asyncio.to_thread(run.loader, stop=stop))
        try:
            policy, run.policy_warning = await asyncio.shield(loading)
        except asyncio.CancelledError:
            # The thread goes on loading: whatever it makes is closed (the ranks of a
            # data-parallel policy would otherwise outlive the job); ranks still starting stop now.
            stop.set()
            loading.add_done_callback(_close_when_loaded)
            raise
        except ModelUnavailable as exc:
            raise PolicyUnavailable(f"The policy cannot be loaded: {exc}") from None
        except (OSError, ValueError, KeyError, TypeError, RuntimeError, ImportError) as exc:
            raise PolicyUnavailable(f"The policy cannot be loaded ({type(exc).__name__}: {str(exc)[:300]})") from None
        run.policy = policy
        if loading_since is not None and policy.kind == "lm":
            seconds = time.monotonic() - loading_since
            self.journal.event(run.job_id, "rl.train.policy.loaded", f"Loaded {run.plan.model} in {seconds:.0f} s",
                               data={"model": run.plan.model, "seconds": round(seconds, 3)})
        if isinstance(policy, Watched):  # a rank that dies mid-job fails it at once, naming the rank
            loop = asyncio.get_running_loop()

            def broke(message: str, data: dict[str, Any]) -> None:
                loop.call_soon_threadsafe(self.policy_broke, run.job_id, message, data)

            policy.watch(broke)
        if run.policy_warning:
            self.journal.event(run.job_id, "rl.train.policy.fallback", run.policy_warning, level="warning",
                               data={"policy": policy.kind, "requested": self.policy_kind})

    async def _announce_loading(self, run: JobRun) -> float | None:
        """An event before a language model loads (seconds to minutes, in silence otherwise):
        which and how large; returns when it started, or None when no model is loaded."""
        if self.policy_kind == "tabular" or run.lm is False:
            return None
        settings = policy_settings(run.job_id, run.plan)
        found = await asyncio.to_thread(policies.lm_footprint, settings)
        if found is None:  # the stand-in trains (auto), or the load fails at once, saying why
            return None
        if not isinstance(found, Path):  # policies.DOWNLOAD
            self.journal.event(run.job_id, "rl.train.policy.loading",
                               f"Downloading {run.plan.model} into the Hugging Face cache, then loading it: the first "
                               "step waits for it", data={"model": run.plan.model, "path": None, "bytes": None})
            return time.monotonic()
        words, size = await asyncio.to_thread(loading_words, found)
        self.journal.event(run.job_id, "rl.train.policy.loading",
                           f"Loading {run.plan.model} ({words}): the first step waits for it",
                           data={"model": run.plan.model, "path": str(found), "bytes": size})
        return time.monotonic()

    def _starting_ranks(self) -> str:
        words = (f"Starting the {self.parallel.processes} rank processes (each imports torch and loads the model; "
                 "the first step waits for all of them)")
        if self.parallel.shared_dir:
            words += (f"; the other machines' ranks are started there by `synth-tui ranks-host --shared-dir "
                      f"{self.parallel.shared_dir} --machine-rank K`, which must be running on each")
        return words

    def policy_broke(self, job_id: str, message: str, data: dict[str, Any]) -> None:
        """The job's policy broke (a rank of a data-parallel policy died): an event, and the
        job fails with the message (once, whoever noticed first)."""
        run = self.runs.get(job_id)
        if run is None or run.task is None or run.task.done() or run.abort_reason:
            return
        self.journal.event(run.job_id, "rl.train.worker.failed", message, level="error", data=data)
        self.abort(run.job_id, message)

    def _complete(self, run: JobRun) -> None:
        """The job succeeded; its completion event says so at warning level when it learned
        nothing or ended worse than it began (docs/embedded-policy.md#saying-when-nothing-is-learned)."""
        step, eval_score = run.step, run.eval_score
        final = eval_score if eval_score is not None else run.last_train_score
        got_worse = run.first_score is not None and final is not None and final < run.first_score
        summary = {"steps": step, "final_eval_mean_score": eval_score, "flat_steps": run.flat_steps,
                   "first_step_mean_score": run.first_score, "got_worse": got_worse, **run.counters()}
        score = "" if eval_score is None else f"; final eval mean score {eval_score:.3f}"
        finish = partial(self.journal.finish, run.job_id, "succeeded", "rl.job.completed", data=summary)
        if run.flat_steps == step:
            # Never a quiet success: the job ran, but no step had anything to learn from.
            finish(f"Training finished after {step} steps{score}, but LEARNED NOTHING: in every step all "
                   "rollouts scored the same", level="warning")
        elif got_worse and final is not None and run.first_score is not None:
            which = "final eval mean score" if eval_score is not None else "last step's mean score"
            finish(f"Training finished after {step} steps, but the policy GOT WORSE: its {which} {final:.3f} is "
                   f"below the first step's mean score {run.first_score:.3f}", level="warning")
        else:
            finish(f"Training finished after {step} steps{score}")

    def _announce(self, run: JobRun) -> None:
        j, job_id, plan = self.journal, run.job_id, run.plan
        j.event(job_id, "rl.train.started",
                f"Training {plan.model}: {plan.epochs} epoch(s) x {plan.iterations_per_epoch} iteration(s), "
                f"{plan.batch_size} group(s) of {plan.group_size} rollouts per iteration",
                data={"model": plan.model, "epochs": plan.epochs, "iters_per_epoch": plan.iterations_per_epoch,
                      "batch_size": plan.batch_size, "group_size": plan.group_size,
                      "total_steps": plan.total_steps, "task_app_url": plan.task_url})
        self._announce_policy(run)
        self._warn_learning_rate(run)
        if self.infra_events:
            j.event(job_id, "hatchet.submission.attempt",
                    "Embedded backend: no Hatchet queue, the job runs in this process", data={"attempt": 1})
            j.event(job_id, "rl.runtime.modal.started", "In-process stand-in for the Modal runtime started")

    def _announce_policy(self, run: JobRun) -> None:
        """The `rl.train.policy` event and the job's badge: at the start, and again when a
        resumed job loaded its policy (a data-parallel one runs in new rank processes)."""
        assert run.policy is not None  # _load_policy ran
        info = run.policy.describe()
        self.journal.event(run.job_id, "rl.train.policy", info.message, level="warning" if info.stand_in else "info",
                           data={**info.data, "seed": run.seed})
        badge = {"kind": info.kind, "label": info.label, "stand_in": info.stand_in}
        if run.policy_warning:
            badge["why"] = run.policy_warning
        self._progress(run, run.step, policy=badge)

    def _warn_learning_rate(self, run: JobRun) -> None:
        """A pretrained model given the tiny model's learning rate is wrecked in a few steps: say so."""
        assert run.policy is not None
        info = run.policy.describe()
        parameters = info.data.get("parameters") if info.kind == "lm" else None
        warning = learning_rate_warning(run.plan.learning_rate, parameters if isinstance(parameters, int) else None)
        if warning is not None:
            self.journal.event(run.job_id, "rl.train.policy.warning", f"The {warning}.", level="warning",
                               data={"learning_rate": run.plan.learning_rate, "parameters": parameters})

    def _announce_resume(self, run: JobRun) -> None:
        j, job_id, total = self.journal, run.job_id, run.plan.total_steps
        j.set_running(job_id)  # a job left queued; one left running stays so
        events = j.store.events(job_id, since_seq=0, limit=100_000)
        run.contract_announced = any(e["type"] == "rl.taskapp.contract" for e in events)
        if run.step == 0:
            where = "from the start (no step had been recorded)"
        elif run.eval_pending is not None:
            where = f"with the evaluation after step {run.step}/{total} (the step itself was recorded)"
        else:
            where = f"after step {run.step}/{total}, from its checkpoint"
        j.event(job_id, "rl.train.resumed", f"The embedded backend restarted; the job resumes {where}",
                data={"step": run.step, "total_steps": total, "eval_pending": run.eval_pending is not None})
        self._announce_policy(run)

    async def _train_step(self, run: JobRun, step: int) -> None:
        """Play a step's rollouts, update the policy, save it, and record the step (its events,
        metrics and checkpoint in one transaction; with an evaluation, in two)."""
        plan, job_id = run.plan, run.job_id
        epoch = (step - 1) // plan.iterations_per_epoch
        started = time.monotonic()
        seeds = [run.rng.randrange(1_000_000) for _ in range(plan.batch_size)]
        run.sample = StepSample(plan.inspect_per_step, plan.batch_size * plan.group_size)
        calling = run.calling_rollouts
        episodes = await self._play_all(run, "rl", step, [s for s in seeds for _ in range(plan.group_size)])
        self._require_policy_calls(run, step, len(episodes), run.calling_rollouts - calling)
        kept, run.sample = run.sample.chosen(), None
        await self._keep(run, kept)
        groups = [episodes[i:i + plan.group_size] for i in range(0, len(episodes), plan.group_size)]
        # In a thread: a large batch must not stall the event loop that answers every client.
        assert run.policy is not None  # _load_policy ran
        stats = await asyncio.to_thread(run.policy.update, groups)
        mean = sum(e.score for e in episodes) / len(episodes)
        loss = shown_number(stats.loss)  # an lm job's tiny loss in scientific notation, not "-0.0000"
        events = [{"type": "rl.train.step",
                   "message": f"Step {step}/{plan.total_steps}: mean score {mean:.3f}, loss {loss}, "
                              f"entropy {stats.entropy:.3f}",
                   "data": {"step": step, "total_steps": plan.total_steps, "epoch": epoch, "mean_score": mean,
                            "loss": stats.loss, "entropy": stats.entropy, "rollouts": len(episodes),
                            # One memo per chat answer learned from; for the stand-in, one decision per
                            # tool argument (with the gridworld's one-choice tool, decisions == turns).
                            "decisions": sum(len(m) if isinstance(m, list) else 1
                                             for e in episodes for m in e.memos),
                            "turns": sum(e.turns or 0 for e in episodes),
                            "seconds": round(time.monotonic() - started, 3), **stats.extra}}]
        flat = self._flat_warning(run, step, episodes)
        if flat is not None:
            events.append(flat)
        n = len(episodes)
        own = {key: float(value) for key in GRID_STATS
               if isinstance(value := stats.extra.get(key), int | float) and math.isfinite(value)}
        points = [{**p, "epoch": epoch} for p in (
            _point("train.mean_score", mean, "train", n), _point("train.loss", stats.loss, "train", n),
            _point("train.entropy", stats.entropy, "train", n),
            *(_point(f"train.{key}", value, "train", n) for key, value in own.items()))]
        run.step, run.last_train_score = step, mean
        if run.first_score is None:
            run.first_score = mean
        await asyncio.to_thread(self.checkpoints.save, job_id, step, run.policy)
        if plan.eval_due(step):
            run.eval_pending = points
            self.journal.commit_step(job_id, events, run.saved_state())
            self._progress(run, step, train_mean_score=mean)
            await self._evaluate_step(run, step, points)
        else:
            self.journal.commit_step(job_id, events, run.saved_state(), metrics=(step, points))
            self._progress(run, step, train_mean_score=mean)
            await asyncio.to_thread(self.checkpoints.prune, job_id, step)

    async def _evaluate_step(self, run: JobRun, step: int, points: list[dict[str, Any]]) -> None:
        """The evaluation after a recorded step; then the step's metrics, all together
        (store.add_metrics says why)."""
        try:
            mean, event = await self._evaluate(run, step)
        except BaseException:
            # The step trained (its event says so): its metrics are kept even when the
            # evaluation after it fails or the job is cancelled; not at a shutdown, after which
            # the evaluation is played again.
            if not run.stopping:
                run.eval_pending = None
                self.journal.commit_step(run.job_id, [], run.saved_state(), metrics=(step, points))
            raise
        run.eval_pending, run.eval_score = None, mean
        epoch = points[0]["epoch"] if points else 0
        eval_point = {**_point("eval.mean_score", mean, "eval", run.plan.eval_instances), "epoch": epoch}
        self.journal.commit_step(run.job_id, [event], run.saved_state(), metrics=(step, [*points, eval_point]))
        self._progress(run, step, eval_mean_score=mean)
        await asyncio.to_thread(self.checkpoints.prune, run.job_id, step)

    async def _evaluate(self, run: JobRun, step: int) -> tuple[float, dict[str, Any]]:
        plan = run.plan
        seeds = [plan.eval_seeds[i % len(plan.eval_seeds)] for i in range(plan.eval_instances)]
        episodes = await self._play_all(run, "eval", step, seeds)
        mean = sum(e.score for e in episodes) / len(episodes)
        solved = sum(e.score > 0 for e in episodes) / len(episodes)
        return mean, {"type": "rl.eval.summary",
                      "message": f"Eval after step {step}: mean score {mean:.3f} over {len(episodes)} episodes "
                                 f"({solved:.0%} scored above 0)",
                      "data": {"step": step, "mean_score": mean, "seeds": sorted(set(seeds)),
                               "instances": len(episodes), "success_rate": solved}}

    def _flat_warning(self, run: JobRun, step: int, episodes: list[Episode]) -> dict[str, Any] | None:
        """Rollouts that all score the same teach nothing (every advantage is 0): say so the
        first time, loudly, instead of looking like a healthy run."""
        scores = {e.score for e in episodes}
        if len(scores) != 1:
            return None
        run.flat_steps += 1
        if run.flat_steps != 1:
            return None
        score = scores.pop()
        if run.first_score is not None and score > run.first_score:  # it rose to here: likely solved
            why = ("If every rollout now solves the task, the run has little left to learn from it: a harder task "
                   "(or more of its variants) gives the policy something to compare")
        else:
            why = ("If this goes on, the task app may be rejecting the policy's actions, or its reward does not "
                   "depend on them: check the task app's log and its tool schema")
        return {"type": "rl.train.warning", "level": "warning", "data": {"step": step, "rollouts": len(episodes)},
                "message": f"Step {step}: every one of {len(episodes)} rollouts scored exactly {score:g}, so "
                           f"nothing was learned from it. {why}."}

    def _progress(self, run: JobRun, step: int, **scores: Any) -> None:
        job = self.journal.store.get_job(run.job_id)
        metadata = dict(job["metadata"]) if job else {}
        metadata.update(scores, step=step, total_steps=run.plan.total_steps, counters=run.counters())
        self.journal.store.set_metadata(run.job_id, metadata)

    async def _play_all(self, run: JobRun, mode: str, step: int, seeds: list[int]) -> list[Episode]:
        """Every rollout of a step, at most max_concurrent at a time. A fixed pool of workers
        takes them in turn: thousands of waiting tasks would slow the event loop every client
        shares, and a cancel would have to unwind them all."""
        episodes: list[Episode | None] = [None] * len(seeds)
        queue = iter(enumerate(seeds))
        progress = _RolloutProgress(len(seeds), time.monotonic())

        async def worker() -> None:
            for index, seed in queue:
                # One of the backend's rollout slots, taken before the rollout is sent: its time
                # limit then counts from the send, not from the wait (admission.py).
                async with self.admission.rollout_slot():
                    episodes[index] = await self._rollout(run, mode, step, index, seed)
                if progress.one_done(time.monotonic(), ROLLOUT_PROGRESS_EVERY_S):
                    self._note_progress(run, mode, step, progress)

        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(min(run.plan.max_concurrent, len(seeds))):
                    group.create_task(worker())
        except BaseExceptionGroup as failed:
            # The first failure cancelled the others; report that one, not a group.
            raise failed.exceptions[0] from None
        return [e for e in episodes if e is not None]

    def _note_progress(self, run: JobRun, mode: str, step: int, progress: _RolloutProgress) -> None:
        """`Step 1: 4/16 rollouts done`: the dashboard's sign of life within a long step
        (docs/wire-contract.md#event-types)."""
        what = f"Step {step}" if mode == "rl" else f"Eval after step {step}"
        self.journal.event(run.job_id, ROLLOUT_PROGRESS_EVENT,
                           f"{what}: {progress.done}/{progress.total} rollouts done",
                           data={"step": step, "phase": PHASES.get(mode, mode), "done": progress.done,
                                 "total": progress.total})

    def _headers(self) -> dict[str, str]:
        return {"X-API-Key": self.env_api_keys[0], "X-API-Keys": ",".join(self.env_api_keys)}

    async def _learn_contract(self, run: JobRun) -> None:
        """Which contract generation to speak, from the task app's /openapi.json when it says;
        otherwise 0.2 until a rollout is refused for lacking a field of the other one."""
        doc = await fetch_openapi(self.http, run.plan.task_url, self._headers())
        generation = generation_from_openapi(doc)
        if generation is not None:
            run.contract = generation
            self._announce_contract(run, "from /openapi.json", "openapi")

    def _announce_contract(self, run: JobRun, how: str, source: str) -> None:
        run.contract_announced = True
        self.journal.event(run.job_id, "rl.taskapp.contract",
                           f"The task app speaks rollout contract {run.contract} "
                           f"({GENERATION_NAMES[run.contract]}), learned {how}",
                           data={"contract": run.contract, "source": source, "task_app_url": run.plan.task_url})

    async def _rollout(self, run: JobRun, mode: str, step: int, index: int, seed: int) -> Episode:
        plan = run.plan
        rollout_id = f"{mode}-{step}-{index}-{secrets.token_hex(6)}"
        where = f"seed {seed}, iteration {step}" if mode == "rl" else f"eval seed {seed}, after iteration {step}"
        url = f"{plan.task_url}/rollout"
        ask = RolloutAsk(job_id=run.job_id, rollout_id=rollout_id, mode=mode, seed=seed, env_name=plan.env_name,
                         policy_name=plan.policy_name, model=plan.model, max_turns=plan.max_turns, ops=plan.ops,
                         timeout_s=plan.rollout_timeout_s, api_base=run.api_base)
        rollout = OpenRollout(random.Random(f"{run.seed}:{mode}:{step}:{index}"))
        rollout.record = plan.inspect_max_bytes > 0 and (
            mode == "eval" or (run.sample is not None and run.sample.wants_turns()))
        run.open_rollouts[rollout_id] = rollout
        try:
            resp = await self._post_rollout(run, url, ask, where)
        finally:
            run.open_rollouts.pop(rollout_id, None)
        if rollout.memos:
            run.calling_rollouts += 1
        try:
            answer = await _parsed(resp)
        except (ValueError, RecursionError):
            raise TaskAppError(f"POST {url} failed: the answer is not JSON: {resp.text[:80]!r} ({where})") from None
        try:
            outcome = read_answer(answer)
        except TaskAppError as exc:
            raise TaskAppError(f"POST {url} failed: {exc} ({where})") from None
        if not run.contract_announced:
            self._announce_contract(run, f"by default: /openapi.json did not say, and a {run.contract} rollout "
                                         "was accepted", "default")
        run.rollouts += 1
        if rollout.record:
            trajectory = match_turns(rollout.turns, read_step_reports(answer), outcome.tool_call_ids)
            kept = KeptRollout(rollout_id, PHASES.get(mode, mode), step, index, seed, outcome.score,
                               outcome.turns if outcome.turns is not None else len(trajectory), trajectory,
                               rollout.turns_cut)
            if mode == "eval":
                await self._keep(run, [kept])
            elif run.sample is not None:
                run.sample.offer(kept)
        return Episode(rollout.used_memos(outcome.tool_call_ids), outcome.score, turns=outcome.turns)

    async def _keep(self, run: JobRun, kept: list[KeptRollout]) -> None:
        """Store rollouts for the inspector, scrubbed of every key (compressed and written in a
        thread: a large one must not stall the event loop every client shares)."""
        if not kept or run.plan.inspect_max_bytes <= 0:
            return
        store, scrub, cap = self.journal.store.rollouts, self.scrubber, run.plan.inspect_max_bytes

        def write() -> str | None:
            for rollout in kept:
                summary = {"rollout_id": rollout.rollout_id, "phase": rollout.phase, "step": rollout.step,
                           "index": rollout.index, "seed": rollout.seed, "reward": rollout.reward,
                           "turns": rollout.turns}
                record = {"turns_kept": len(rollout.trajectory), "turns_cut": rollout.turns_cut,
                          "trajectory": scrub.trajectory(rollout.trajectory)}
                try:
                    store.add(run.job_id, summary, record, max_bytes=cap, created_at=utc_now())
                except (sqlite3.Error, ValueError, RecursionError) as exc:
                    # What the inspector keeps never fails the training: it is said once, then skipped.
                    return f"{type(exc).__name__}: {exc}"
            return None

        problem = await asyncio.to_thread(write)
        if problem is not None and not run.inspect_warned:
            run.inspect_warned = True
            self.journal.event(run.job_id, "rl.rollouts.warning",
                               f"A rollout could not be kept for the inspector ({problem}); training goes on, "
                               "and such rollouts are left out", level="warning", data={"step": kept[0].step})

    async def _post_rollout(self, run: JobRun, url: str, ask: RolloutAsk, where: str) -> httpx.Response:
        """POST /rollout in the job's generation, retried on transient failures with the same
        body (the task app answers a repeat from its first run), its answer read up to
        `[rollout] max_answer_bytes` (answers.py). A 400/422 that asks for a field of the other
        generation switches the job to it, and this rollout is sent once more. Any other failure
        is a TaskAppError that says how many requests were sent and why none was answered."""
        plan, headers = run.plan, {**self._headers(), **NOT_COMPRESSED}

        def retried(attempt: int, why: str) -> None:
            # `why` may quote the task app's answer: scrubbed of every key, made safe for a terminal.
            self._note_retry(run, f"POST {url} ({where}), attempt {attempt} of {ROLLOUT_BACKOFF.attempts}: "
                                  f"{printable(self.scrubber.text(why))}; retrying")

        switched = False
        while True:
            sent = run.contract
            body = rollout_body(sent, ask)
            attempts = Attempts()

            async def send(body: dict[str, Any] = body) -> httpx.Response:
                request = self.http.build_request("POST", url, json=body, headers=headers,
                                                  timeout=plan.rollout_timeout_s)
                return await send_capped(self.http, request, plan.max_answer_bytes)

            try:
                resp = await send_with_retries(send, backoff=ROLLOUT_BACKOFF, on_retry=retried, attempts=attempts)
            except httpx.HTTPError as exc:
                raise TaskAppError(_transport_failure(plan, url, exc, attempts.made, where)) from None
            except AnswerTooLarge as exc:
                raise TaskAppError(
                    f"The task app's answer to POST {url} {exc.words()} ([rollout] max_answer_bytes = "
                    f"{plan.max_answer_bytes:,}) ({where}). Make the task app answer less (a rollout's answer "
                    "needs its score, turns and tool calls), or raise [rollout] max_answer_bytes "
                    f"(at most {show_bytes(MAX_ANSWER_BYTES)}).") from None
            if resp.status_code < 400:
                return resp
            if not switched and resp.status_code < 500:
                asked = _refusal_of(sent, resp)
                if asked is not None:
                    generation, field_name = asked
                    switched = True
                    if run.contract == sent:  # the first rollout to learn it says so; the others follow
                        run.contract = generation
                        self._announce_contract(run, f"after a {resp.status_code} that asked for {field_name}",
                                                "refusal")
                    continue
            detail = scrub_key_fragments(response_detail(resp), self.env_api_keys) or "no reason given"
            raise TaskAppError(f"POST {url} failed {_tries(attempts.made)}: HTTP {resp.status_code}: {detail} "
                               f"({where}). {_status_hint(resp.status_code, attempts.made)}")

    def _require_policy_calls(self, run: JobRun, step: int, rollouts: int, calling: int) -> None:
        """A step none of whose rollouts called the policy fails the job: nothing the policy
        did could have made its scores (docs/embedded-policy.md#a-task-app-that-never-calls-the-policy)."""
        if rollouts and not calling:
            raise TaskAppError(
                f"No rollout called the policy in step {step} ({rollouts} rollouts): the task app must call the "
                "chat endpoint it is given for each rollout (policy.config.inference_url of the /rollout request) "
                f"to choose its actions, or there is nothing to learn; see {NO_POLICY_CALL_DOC}")

    def _note_retry(self, run: JobRun, message: str) -> None:
        """Retries are counted in every step's data; the first few are also events, so a
        flaky task app shows in the log without flooding it."""
        run.retries += 1
        if run.retries <= RETRY_EVENTS_SHOWN:
            more = " (further retries are counted in the step data)" if run.retries == RETRY_EVENTS_SHOWN else ""
            self.journal.event(run.job_id, "rl.rollout.retry", message + more, level="warning",
                               data={"retries": run.retries})


@dataclass
class _RolloutProgress:
    """How many of a phase's rollouts are done, and when that was last said."""

    total: int
    last_said: float  # time.monotonic(); the phase's start at first
    done: int = 0

    def one_done(self, now: float, every_s: float) -> bool:
        """Count a finished rollout; True when it is time to say so (not for the last one:
        the step's own event follows at once)."""
        self.done += 1
        if self.done >= self.total or now - self.last_said < every_s:
            return False
        self.last_said = now
        return True


def _refusal_of(sent: str, resp: httpx.Response) -> tuple[str, str] | None:
    """(generation, field) when a 4xx refuses a body of generation `sent` for lacking a field
    of the other one (rollout_contract.refusal_asks_for)."""
    try:
        refusal = resp.json()
    except (ValueError, RecursionError):
        return None
    return refusal_asks_for(sent, resp.status_code, refusal)


async def _parsed(resp: httpx.Response) -> Any:
    """The answer's JSON; a large one parsed in a thread."""
    if len(resp.content) > LARGE_ANSWER_IN_THREAD:
        return await asyncio.to_thread(json.loads, resp.content)
    return resp.json()


def _tries(made: int) -> str:
    return "after 1 attempt" if made == 1 else f"after {made} attempts"


def _status_hint(status: int, made: int) -> str:
    if status >= 500:
        each = " each time" if made > 1 else ""
        return f"The task app failed to answer{each}; its log says why."
    return "The task app refused the request; its log says why."


def _transport_failure(plan: TrainingPlan, url: str, exc: httpx.HTTPError, made: int, where: str) -> str:
    """Why a rollout got no answer, with the number of requests truly sent and what to change.
    No library internals: describe_http_error leaves them out."""
    fewer = f"[rollout] max_concurrent_rollouts (now {plan.max_concurrent})"
    if isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout):
        doing = "no answer" if isinstance(exc, httpx.ReadTimeout) else "the request could not be sent"
        why = f"{doing} within {plan.rollout_timeout_s:g} s (the task app is slow or overloaded)"
        hint = (f"Give each rollout more time with [rollout] timeout_s (now {plan.rollout_timeout_s:g}), or send "
                f"fewer at once with {fewer}.")
    elif isinstance(exc, httpx.PoolTimeout):
        why = f"no free connection to the task app within {plan.rollout_timeout_s:g} s (too many requests at once)"
        hint = f"Send fewer rollouts at once with {fewer}, or run fewer jobs on this backend at once."
    elif isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        why, hint = describe_http_error(exc), TASK_APP_CLOSED_HINT
    else:
        why, hint = describe_http_error(exc), TASK_APP_GONE_HINT
    return f"POST {url} failed {_tries(made)}: {why} ({where}). {hint}"
