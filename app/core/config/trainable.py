"""What a trainable RL config is, in numbers: one definition shared by every checker.

`--dry-run`, the config picker and the payload preview (through app.core.config.validation) and the
embedded backend (app.local.training.runner, on the job's `data.config`) all call
:func:`size_problems`, so a config the client accepts is never refused by the backend, and a
typo such as ``batch_size = 1000000000`` is refused everywhere before any work starts.
docs/hardening.md explains the bounds.

Each bound is wide enough for the hosted service's real configs and narrow enough that one
job cannot exhaust a machine: the embedded backend builds per-iteration lists of
``batch_size × group_size`` rollouts and ``ops × max_turns`` operations. No Textual import.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_ANSWER_BYTES",
    "MAX_EPISODES_PER_ITERATION",
    "MAX_NAME_CHARS",
    "MAX_TEXT_CHARS",
    "MAX_TOTAL_ITERATIONS",
    "NUMBER_BOUNDS",
    "NumberBound",
    "SizeProblem",
    "bound_at",
    "is_int",
    "number_problem",
    "payload_problems",
    "product_problems",
    "short_repr",
    "size_problems",
    "string_problems",
]

INT64 = 2**63 - 1
MAX_ANSWER_BYTES = 256 << 20  # [rollout] max_answer_bytes at most: see NUMBER_BOUNDS


@dataclass(frozen=True)
class NumberBound:
    """A numeric key of the config and the closed range its value must lie in."""

    location: str  # "section.key"
    integer: bool
    low: float
    high: float
    why: str = ""  # a few words on what the bound protects, shown with the problem

    def allowed(self) -> str:
        def show(value: float) -> str:
            return f"{value:,.0f}" if self.integer else f"{value:g}"

        return f"{show(self.low)} to {show(self.high)}"


@dataclass(frozen=True)
class SizeProblem:
    location: str
    message: str


# Upper bounds: about 100x the largest value in the hosted service's example configs (64
# episodes per batch, 12 concurrent rollouts, 10 turns), and low enough that one job at its
# bounds leaves the embedded backend answering its other clients.
NUMBER_BOUNDS: tuple[NumberBound, ...] = (
    NumberBound("training.num_epochs", True, 1, 1_000),
    NumberBound("training.iterations_per_epoch", True, 1, 100_000),
    NumberBound("training.batch_size", True, 1, 1_024, "groups per iteration"),
    NumberBound("training.group_size", True, 2, 256,
                "group-relative advantages compare at least 2 rollouts of one seed"),
    NumberBound("training.max_turns", True, 1, 1_000),
    NumberBound("training.learning_rate", False, 1e-12, 1.0, "a positive, finite step size"),
    NumberBound("training.gradient_accumulation_steps", True, 1, 1_024),
    NumberBound("training.max_accumulated_minibatch", True, 1, 65_536),
    NumberBound("training.log_interval", True, 1, 100_000),
    NumberBound("training.weight_sync_interval", True, 1, 100_000),
    NumberBound("training.seed", True, -INT64, INT64),
    # The embedded backend's lm policy: GRPO's KL weight (beta); 0 loads no reference model.
    NumberBound("training.kl_coef", False, 0.0, 10.0, "the KL penalty's weight; 0 turns it off"),
    # Its objective (docs/embedded-policy.md#the-objective): passes over each batch, the ratio's clip.
    NumberBound("training.num_iterations", True, 1, 16, "optimizer passes over each step's rollouts"),
    NumberBound("training.epsilon", False, 1e-4, 10.0, "the ratio's clip below 1 (and above, unless epsilon_high)"),
    NumberBound("training.epsilon_high", False, 1e-4, 10.0, "the ratio's clip above 1"),
    NumberBound("training.micro_batch_size", True, 1, 4_096, "sequences per forward and backward of a step"),
    NumberBound("training.importance_sampling_cap", False, 1.0, 1_000.0,
                "the most an off-policy token's importance ratio weighs (TRL's vllm_importance_sampling_clip_max)"),
    NumberBound("training.save_every", True, 1, 100_000, "steps between two checkpoints; the last step is saved"),
    NumberBound("rollout.max_turns", True, 1, 1_000),
    NumberBound("rollout.episodes_per_batch", True, 1, 262_144),
    NumberBound("rollout.max_concurrent_rollouts", True, 1, 256),
    NumberBound("rollout.batches_per_step", True, 1, 1_024),
    NumberBound("rollout.timeout_s", False, 1, 3_600, "seconds one rollout may take before it is retried or fails"),
    # Bytes of one /rollout answer the embedded backend reads (default 32 MiB, app/local/training/answers.py):
    # from 4 KiB to 256 MiB, as a parsed answer takes about ten times its size in memory.
    NumberBound("rollout.max_answer_bytes", True, 4_096, MAX_ANSWER_BYTES,
                "bytes of one task-app answer the backend reads; a larger answer fails the job"),
    NumberBound("evaluation.instances", True, 1, 10_000),
    NumberBound("evaluation.every_n_iters", True, 0, 100_000, "0 evaluates after the last iteration only"),
    NumberBound("evaluation.samples", True, 1, 64, "sampled episodes per eval instance, scored pass@k; left out, "
                "one greedy episode each"),
    NumberBound("compute.gpu_count", True, 1, 1_024),
    NumberBound("compute.nodes", True, 1, 128),
    NumberBound("policy.max_tokens", True, 1, 1_000_000),
    NumberBound("policy.max_prompt_tokens", True, 1, 1_000_000,
                "tokens of one chat prompt the embedded lm policy reads"),
    NumberBound("policy.temperature", False, 0.0, 10.0),
    NumberBound("policy.top_p", False, 0.0, 1.0),
)

# [training] loss_type values the embedded backend trains (TRL's GRPOConfig.loss_type; left out:
# TRL's own default). docs/embedded-policy.md#the-objective.
LOSS_TYPES = ("grpo", "dapo", "dr_grpo")

MAX_EPISODES_PER_ITERATION = 4_096  # training.batch_size × training.group_size
MAX_TOTAL_ITERATIONS = 1_000_000  # training.num_epochs × training.iterations_per_epoch
MAX_TURNS_PER_ITERATION = 1_000_000  # × training.max_turns: the decisions one policy update reads
MAX_EVAL_SEEDS = 10_000
MAX_OPS = 64  # rollout.ops, repeated max_turns times in every rollout request

# Strings, anywhere in a config or a job payload (docs/hardening.md): a name (a label, a model
# id, a tag, any object key) is at most MAX_NAME_CHARS, any other text (a rubric, a prompt) at most
# MAX_TEXT_CHARS. A 900 kB label fits in a request body, and was stored and shown in every list.
MAX_NAME_CHARS = 256
MAX_TEXT_CHARS = 16_384
NAME_KEYS = frozenset({"label", "model", "base_model", "base", "source", "model_name", "env_name", "policy_name",
                       "gpu_type", "job_type", "type", "method", "variety"})
MAX_STRING_PROBLEMS = 5  # named at most; a body of ten thousand long strings needs no ten thousand lines


def bound_at(location: str) -> NumberBound:
    """The bound of the key at `location` ("section.key")."""
    return next(bound for bound in NUMBER_BOUNDS if bound.location == location)


def _lookup(config: Mapping[str, Any], location: str) -> tuple[bool, Any]:
    section, _, key = location.partition(".")
    table = config.get(section)
    if not isinstance(table, Mapping) or key not in table:
        return False, None
    return True, table[key]


def short_repr(value: Any, limit: int = 60) -> str:
    """A value quoted in an error, cut: a hostile body must not come back whole."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def is_int(value: Any) -> bool:
    """A whole number, not a boolean (JSON and TOML booleans are ints to Python)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number_problem(bound: NumberBound, value: Any) -> str | None:
    """What is wrong with `value` for this bound, or None; None (an unset key) is fine here."""
    if value is None:
        return None  # an unset optional key; required keys are checked by their callers
    if bound.integer and not is_int(value):
        return f"must be a whole number from {bound.allowed()} (got {short_repr(value)})"
    if not _is_number(value):
        return f"must be a number from {bound.allowed()} (got {short_repr(value)})"
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number from {bound.allowed()} (got {short_repr(value)})"
    if not bound.low <= value <= bound.high:
        why = f"; {bound.why}" if bound.why else ""
        return f"{value:,} is out of range: allowed {bound.allowed()}{why}" if bound.integer else \
            f"{value!r} is out of range: allowed {bound.allowed()}{why}"
    return None


def _non_finite_floats(value: Any, location: str, depth: int = 0) -> Iterator[str]:
    """Every float anywhere in the config that is inf or nan (TOML can write both)."""
    if depth > 64:
        return
    if isinstance(value, float) and not math.isfinite(value):
        yield location
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _non_finite_floats(item, f"{location}.{key}" if location else str(key), depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _non_finite_floats(item, f"{location}[{index}]", depth + 1)


def _strings(value: Any, location: str, name: bool, depth: int = 0) -> Iterator[SizeProblem]:
    if depth > 64:
        return
    if isinstance(value, str):
        limit = MAX_NAME_CHARS if name else MAX_TEXT_CHARS
        if len(value) > limit:
            what = "a name" if name else "a string"
            yield SizeProblem(location or "the body", f"{what} of {len(value):,} characters; at most {limit:,}")
    elif isinstance(value, Mapping):
        in_tags = location == "tags" or location.endswith(".tags")
        for key, item in value.items():
            if len(str(key)) > MAX_NAME_CHARS:
                yield SizeProblem(location or "the body",
                                  f"a key of {len(str(key)):,} characters; keys are names, at most {MAX_NAME_CHARS:,}")
                continue
            # A table named like a name key ([model]) is not a name itself; everything in a tags table is.
            yield from _strings(item, f"{location}.{key}" if location else str(key),
                                name or in_tags or (key in NAME_KEYS and isinstance(item, str)), depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{location}[{index}]", name, depth + 1)


def string_problems(value: Any, location: str = "") -> list[SizeProblem]:
    """Every string (and object key) of `value` longer than its bound: names (labels, model
    ids, tags, keys) MAX_NAME_CHARS, other text MAX_TEXT_CHARS. At most MAX_STRING_PROBLEMS."""
    return list(itertools.islice(_strings(value, location, False), MAX_STRING_PROBLEMS))


def payload_problems(body: Any) -> list[SizeProblem]:
    """What a whole job payload (not only its config) may not hold, as the embedded backend
    checks it before anything else: over-long strings anywhere, NaN or inf anywhere (the tags,
    the top-level compute). Locations are paths in the body, such as `tags.note`."""
    problems = string_problems(body)
    problems.extend(SizeProblem(location or "the body", "must be a finite number (inf and nan are not allowed)")
                    for location in itertools.islice(_non_finite_floats(body, ""), MAX_STRING_PROBLEMS))
    return problems


def _product_problems(config: Mapping[str, Any], refused: set[str]) -> Iterator[SizeProblem]:
    def value(location: str) -> int | None:
        present, found = _lookup(config, location)
        return found if present and location not in refused and is_int(found) and found > 0 else None

    batch, group = value("training.batch_size"), value("training.group_size")
    if batch and group and batch * group > MAX_EPISODES_PER_ITERATION:
        yield SizeProblem("training.batch_size",
                          f"batch_size × group_size = {batch * group:,} rollouts per iteration; "
                          f"at most {MAX_EPISODES_PER_ITERATION:,}")
    turns = value("training.max_turns")
    if batch and group and turns and batch * group <= MAX_EPISODES_PER_ITERATION \
            and batch * group * turns > MAX_TURNS_PER_ITERATION:
        yield SizeProblem("training.max_turns",
                          f"batch_size × group_size × max_turns = {batch * group * turns:,} turns per iteration; "
                          f"at most {MAX_TURNS_PER_ITERATION:,}")
    epochs, iterations = value("training.num_epochs"), value("training.iterations_per_epoch")
    if epochs and iterations and epochs * iterations > MAX_TOTAL_ITERATIONS:
        yield SizeProblem("training.iterations_per_epoch",
                          f"num_epochs × iterations_per_epoch = {epochs * iterations:,} iterations; "
                          f"at most {MAX_TOTAL_ITERATIONS:,}")


def product_problems(config: Mapping[str, Any]) -> list[SizeProblem]:
    """The bounds on products of sizes (batch_size × group_size and the like), which no single
    key's bound catches; sizes that are not positive whole numbers are left to their own bounds."""
    return list(_product_problems(config, set()))


def _list_problems(config: Mapping[str, Any]) -> Iterator[SizeProblem]:
    present, seeds = _lookup(config, "evaluation.seeds")
    if present and isinstance(seeds, list):
        if len(seeds) > MAX_EVAL_SEEDS:
            yield SizeProblem("evaluation.seeds", f"{len(seeds):,} seeds; at most {MAX_EVAL_SEEDS:,}")
        elif any(is_int(s) and not -INT64 <= s <= INT64 for s in seeds):
            yield SizeProblem("evaluation.seeds", "every seed must fit in 64 bits")
    present, ops = _lookup(config, "rollout.ops")
    if present and isinstance(ops, list) and len(ops) > MAX_OPS:
        yield SizeProblem("rollout.ops", f"{len(ops):,} ops; at most {MAX_OPS} (they repeat every turn)")


def size_problems(config: Mapping[str, Any]) -> list[SizeProblem]:
    """Every size, rate and count of the config that is of the wrong type, not finite or out
    of its range; empty when all are fine. Missing keys are not problems here."""
    problems = []
    checked = set()
    for bound in NUMBER_BOUNDS:
        present, value = _lookup(config, bound.location)
        if present:
            message = number_problem(bound, value)
            if message:
                problems.append(SizeProblem(bound.location, message))
                checked.add(bound.location)
    for location in _non_finite_floats(config, ""):
        if location not in checked:
            problems.append(SizeProblem(location, "must be a finite number (inf and nan are not allowed)"))
    problems.extend(_product_problems(config, checked))
    problems.extend(_list_problems(config))
    problems.extend(string_problems(config))
    return problems
