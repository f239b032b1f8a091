"""One job being trained (`JobRun`): its policy, its rollouts in flight, its counters, and
what a restarted backend needs to go on (`saved_state` / `restore`).

Each rollout in flight is an `OpenRollout`: its own RNG and the memos of the chat answers the
policy gave it (recorded by `JobRun.act`, which the backend's chat endpoint calls).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.local.policies.base import (
    TRAINING_ROLLOUT_PREFIX,
    Act,
    ActOptions,
    Policy,
    PolicyLoading,
    PolicySettings,
)
from app.local.training.plan import TrainingPlan
from app.local.training.rollout_contract import GEN_02
from app.local.training.rollout_record import (
    ROLLOUT_MEMORY_CHARS,
    TURNS_MAX,
    StepSample,
    chat_turn,
    turn_chars,
    within_budget,
)

REFUSED_ROLLOUTS_TO_FAIL = 3  # distinct rollouts in a row whose chat call the policy refused


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
    eval_score: float | None = None  # the latest evaluation's mean score (after a step)
    eval_ci: list[float] | None = None  # its 95 % interval [low, high], if any
    baseline_done: bool = False  # the step-0 evaluation is recorded (steps._evaluate_baseline)
    baseline_score: float | None = None  # its mean score
    baseline_ci: list[float] | None = None  # its 95 % interval
    eval_pending: list[dict[str, Any]] | None = None  # `step` trained, its evaluation not yet recorded
    resumed: dict[str, Any] | None = None  # the checkpoint this run started from, if any
    recorded_step: int = 0  # the last step whose events and metrics are stored: a replayed one's are not again
    writing: asyncio.Task[None] | None = None  # the last checkpoint's write, off the step (steps.py)
    contract: str = GEN_02  # the rollout contract generation spoken to the task app
    contract_announced: bool = False
    sample: StepSample | None = None  # the train rollouts of the current step the inspector may keep
    inspect_warned: bool = False  # a rollout could not be stored (said once: _keep)
    calling_rollouts: int = 0  # rollouts that called the policy at least once (_require_policy_calls)
    slow_noted: dict[tuple[str, int], int] = field(default_factory=dict)  # (mode, step): slow rollouts said
    lm: bool | None = None  # trains a language model (needs a device: admission.py); None: by the job runner choice
    admitted: bool = False  # it holds one of the backend's job slots (admission.py)
    # async_generation: the seeds' RNG before the step played ahead drew its seeds, saved with
    # the step being updated meanwhile (a resumed job draws them again: steps._train_ahead).
    rng_ahead: tuple[Any, ...] | None = None
    # Rollouts whose own chat call the policy refused since one was last answered
    # (refused_rollout): the job fails only when its rollouts keep failing.
    refused_rollouts: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.seed = job_seed(self.job_id, self.plan)
        self.rng = random.Random(self.seed)

    def act(self, rollout_id: str | None, request: dict[str, Any], correlation_id: str,
            options: ActOptions | None = None) -> Act:
        """The policy's answer to one chat turn, recorded if the rollout is ours (and, for the
        inspector, what the chat `request` showed, when it keeps it)."""
        rollout = self.open_rollouts.get(rollout_id or "")
        if self.policy is None:
            raise PolicyLoading("the job's policy is still loading; call again once its rollouts start")
        options = options or ActOptions()
        if rollout is not None and str(rollout_id).startswith(TRAINING_ROLLOUT_PREFIX):  # rollouts.py names it
            # It samples as the job samples, whatever the request says: GRPO's loss assumes the
            # distribution the turn came from (docs/wire-contract.md#the-chat-answer).
            options = dataclasses.replace(options, temperature=None, top_p=None, training=True)
        # A call from outside the job's rollouts never draws from the job's own RNG.
        act = self.policy.act(request["messages"], request.get("tools"), request.get("tool_choice"),
                              correlation_id, rollout.rng if rollout else random.Random(), options)
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
        if rollout is not None:
            self.refused_rollouts.clear()
        self.chat_completions += 1
        return act

    def refused_rollout(self, rollout_id: str | None) -> bool:
        """A call of one of the job's rollouts was refused (PolicyCannotAct): that rollout fails
        (its task app gets the 422). True when REFUSED_ROLLOUTS_TO_FAIL rollouts in a row were
        refused: the task app keeps asking what the policy cannot answer and the job fails.
        Calls the job did not make (no open rollout) never count (docs/hardening.md)."""
        if rollout_id not in self.open_rollouts:
            return False
        self.refused_rollouts.add(str(rollout_id))
        return len(self.refused_rollouts) >= REFUSED_ROLLOUTS_TO_FAIL

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
        version, internal, gauss = self.rng_ahead or self.rng.getstate()
        return {"step": self.step, "policy": self.policy.kind if self.policy else None,
                "eval_pending": self.eval_pending,
                "rng": [version, list(internal), gauss], "flat_steps": self.flat_steps,
                "first_score": self.first_score, "last_train_score": self.last_train_score,
                "eval_score": self.eval_score, "eval_ci": self.eval_ci, "baseline_done": self.baseline_done,
                "baseline_score": self.baseline_score, "baseline_ci": self.baseline_ci, "contract": self.contract,
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
        self.eval_ci = state.get("eval_ci")
        self.baseline_done = bool(state.get("baseline_done", False))
        self.baseline_score = state.get("baseline_score")
        self.baseline_ci = state.get("baseline_ci")
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

