"""The policy seam: what the embedded backend's chat endpoint and job runner ask of a policy.

Neither knows which policy it drives. The chat endpoint asks `act` for one assistant message;
the job runner keeps what came with it (`Act.memo`) under the message's call id, gives the scored
episodes back to `update` in groups of one seed each, and saves the policy after every step
(`save` into a fresh folder, `load` from the last one) so a restarted backend resumes the job
(docs/embedded-policy.md#checkpoints).
"""

from __future__ import annotations

import json
import math
import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from app.core.atomic import atomic_write_text
from app.core.paths import private_dir

MANIFEST = "policy.json"  # every saved policy's folder holds one: {"kind": ..., ...}


class PolicyCannotAct(ValueError):
    """The request asks for what this policy cannot answer (say, a tool schema it cannot fill).
    The message is a sentence for the task app's author; the job fails with it."""


class PolicyLoading(PolicyCannotAct):
    """The job's policy is not loaded yet (the job is queued or loading its model): a caller
    asks again later; the job is not to blame (docs/hardening.md)."""


class ActCancelled(Exception):
    """The caller went away while the policy generated (ActOptions.cancel was set): the
    generation stopped between tokens and nothing of it was kept."""


class PolicyFailed(RuntimeError):
    """The policy broke while the job ran (say, a rank of a data-parallel policy died); the
    message names what and why, and the job fails with it. `data` goes into the event."""

    def __init__(self, message: str, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.data = data or {}


@dataclass(frozen=True)
class Parallel:
    """How the `lm` policy runs a job: how many processes train it (`synth-tui backend
    --processes N`), the accelerate config file they are launched with (None: ours), the vLLM
    server it generates through (`--vllm-server URL`) or the share of each GPU's memory its
    colocated vLLM takes (`--vllm-colocate [FRACTION]`; both None: the model's own forward
    passes), and, for ranks on several machines, the shared folder of the jobs' rendezvous
    folders (`--shared-dir`). docs/design/data-parallel.md, docs/scaling.md."""

    processes: int = 1
    accelerate_config: str | None = None
    vllm_server: str | None = None
    shared_dir: str | None = None  # several machines: where the jobs' folders go (docs/scaling.md)
    vllm_colocate: float | None = None  # TRL's vllm_gpu_memory_utilization (docs/scaling.md)


@dataclass(frozen=True)
class PolicySettings:
    """What a policy is built from: the job's config as written."""

    model: str
    learning_rate: float
    seed: int
    # What the `lm` policy also reads (the stand-in ignores them): the run's shape and the
    # model's options from the config ([model] trainer_mode, [training] kl_coef and lora,
    # [policy] temperature/top_p/max_tokens), as written.
    total_steps: int = 0
    batch_size: int = 1
    group_size: int = 2
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ActOptions:
    """What one chat request asks of its answer beyond the messages (docs/wire-contract.md#the-chat-answer):
    sampling (None: the job's [policy] values), logprobs, and a cancel flag the endpoint sets when
    the caller disconnects. `training`: the call is one of the job's training rollouts, whose
    sampling is the job's (GRPO's loss assumes the distribution the turn was sampled from)."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int = 0
    training: bool = False
    cancel: threading.Event | None = None


@dataclass
class Act:
    """One chat answer: the assistant message (with its tool calls) and what the update needs."""

    message: dict[str, Any]
    call_id: str  # the tool call's id (or, for a text answer, the id the job runner files it under)
    memo: Any  # opaque to the job runner: handed back to `update` inside an Episode
    # What the chat answer reports: tokens of the prompt the model read and of its completion
    # (0 and 0 for the tabular stand-in, which reads no tokens), "length" when max_tokens cut
    # the turn, and OpenAI's `logprobs` object when asked.
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    logprobs: dict[str, Any] | None = None


@dataclass
class Episode:
    memos: list[Any]  # the memos of the answers the episode used, in order
    score: float
    advantage: float = 0.0
    turns: int | None = None  # as the task app counted them (metrics.num_steps), if it did


@dataclass
class UpdateStats:
    loss: float
    entropy: float
    extra: dict[str, float] = field(default_factory=dict)  # policy-specific numbers for the step event
    # events the policy has to say about the step ({"type", "message", "level", "data"}), after its step event
    events: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class PolicyInfo:
    """How a policy shows: in the `rl.train.policy` event and the job's metadata."""

    kind: str  # "tabular"
    label: str  # "tabular stand-in": what the dashboard and docs call it
    stand_in: bool  # True when it does not train the model the config names
    message: str
    data: dict[str, Any]
    # What the job should be told besides (a warning event each): say, a resumed job whose
    # checkpoint held no optimizer state (docs/hardening.md#8).
    warnings: tuple[str, ...] = ()


class Policy(Protocol):
    kind: ClassVar[str]

    def describe(self) -> PolicyInfo: ...

    def act(self, messages: Sequence[dict[str, Any]], tools: Sequence[Any] | None, tool_choice: Any,
            correlation_id: str, rng: random.Random, options: ActOptions | None = None) -> Act:
        """Answer one chat turn. Raises PolicyCannotAct for a request it cannot answer (options
        it cannot honour included), ActCancelled when options.cancel was set meanwhile."""
        ...

    def update(self, groups: list[list[Episode]]) -> UpdateStats:
        """One training step on groups of scored episodes (each group played one seed)."""
        ...

    def save(self, folder: Path) -> None:
        """Write the policy into `folder` (which exists and is empty), MANIFEST included."""
        ...

    def load(self, folder: Path) -> None:
        """Replace this policy's state with the one saved in `folder`."""
        ...

    def close(self) -> None:
        """The job ended (succeeded, failed, cancelled or stopped): free what the policy holds
        (the `lm` policy's training thread). Idempotent; blocking."""
        ...


@runtime_checkable
class Watched(Protocol):
    """A policy that can break on its own while the job runs (parallel.policy: a rank that dies): the
    trainer hands it a callback, called once, from any thread, with (message, data)."""

    def watch(self, failed: Callable[[str, dict[str, Any]], None]) -> None: ...


# An evaluation's rollouts act greedily (docs/embedded-policy.md#evaluation): the job runner names
# them `eval-<step>-<index>-…` in their correlation id (`trace_<job_id>:eval-…`); a caller of a
# finished job's chat endpoint asks for the same with the SDK's `eval_` prefix. The sampled
# episodes of a pass@k evaluation (`[evaluation] samples = k`) are named `evalk-…`: they sample.
GREEDY_ROLLOUT_PREFIX = "eval-"
TRAINING_ROLLOUT_PREFIX = "rl-"  # a training rollout's id: its turns sample as the job does (job_run.py)
SAMPLED_EVAL_ROLLOUT_PREFIX = "evalk-"


def plays_evaluation(correlation_id: str) -> bool:
    """Whether a chat turn is an evaluation's (greedy or pass@k): a step's figures count its
    own training episodes, not an evaluation's, played before or after it."""
    rollout = correlation_id.partition(":")[2]
    return acts_greedily(correlation_id) or rollout.startswith(SAMPLED_EVAL_ROLLOUT_PREFIX)


def acts_greedily(correlation_id: str) -> bool:
    """Whether a chat turn is an evaluation's that takes the policy's best action (temperature 0)
    instead of sampling: its correlation id says so."""
    if correlation_id.startswith("eval_"):
        return True
    return correlation_id.partition(":")[2].startswith(GREEDY_ROLLOUT_PREFIX)


def group_advantages(episodes: list[Episode], eps: float = 1e-6) -> None:
    """Score minus the group mean, over the group's std: a group that all failed (or all
    succeeded equally) teaches nothing, as in GRPO."""
    scores = [e.score for e in episodes]
    mean = sum(scores) / len(scores)
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    for e in episodes:
        e.advantage = (e.score - mean) / (std + eps)


def message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # OpenAI content parts
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def latest_observation(messages: Sequence[dict[str, Any]]) -> str:
    """What the task app said last: the last user or tool message (a tool result is how many
    task apps give feedback on the call before)."""
    for message in reversed(messages):
        if message.get("role") in ("user", "tool"):
            return message_text(message)
    return ""


def write_json_atomically(path: Path, data: Any) -> None:
    """Write, flush to disk, then rename over `path`: a reader (or a restart after a kill)
    sees the old file or the new one, never half of one."""
    private_dir(path.parent)  # as open_private did: a missing folder is made 0700
    atomic_write_text(path, json.dumps(data, separators=(",", ":")))  # app/core/atomic.py: 0600


def read_manifest(folder: Path) -> dict[str, Any]:
    with open(folder / MANIFEST, encoding="utf-8") as handle:
        data = json.load(handle)
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        raise ValueError(f"{folder / MANIFEST} names no policy kind")
    return data


def reward_spread(groups: list[list[Episode]], *, bessel: bool) -> dict[str, float]:
    """The spread the advantages see: `reward_std`, the mean over groups of each group's
    standard deviation (with Bessel's correction when `bessel`, as TRL's GRPOTrainer divides
    by; without it, as `group_advantages`), and `frac_reward_zero_std`, the share of episodes
    whose group scored all alike (their advantages are 0). A group of one has std 0."""
    stds: list[float] = []
    alike = total = 0
    for group in (g for g in groups if g):
        scores = [e.score for e in group]
        mean = sum(scores) / len(scores)
        squares = sum((s - mean) ** 2 for s in scores)
        dof = len(scores) - 1 if bessel else len(scores)
        std = math.sqrt(squares / dof) if dof > 0 else 0.0
        stds.append(std)
        total += len(group)
        alike += len(group) if math.isclose(std, 0.0, abs_tol=1e-8) else 0
    return {"reward_std": sum(stds) / len(stds) if stds else 0.0,
            "frac_reward_zero_std": alike / total if total else 0.0}
