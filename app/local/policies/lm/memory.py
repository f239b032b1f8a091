"""How much of a step's batch the `lm` policy's update holds at once: micro-batches with gradient
accumulation, and gradient checkpointing (docs/embedded-policy.md#memory-of-a-step).

A step's episodes reach GRPOTrainer as one generation batch (rollout_func); TRL splits it into
`steps_per_generation` slices of `per_device_train_batch_size` sequences, runs forward and
backward on each, and steps the optimizer after `gradient_accumulation_steps` of them. With
`loss_type = "grpo"` each slice's loss is divided by the number of slices, so equal slices give
the gradient of the whole batch. TRL computes the log-probabilities through a fused LM head in
chunks already (add_fused_lm_head): the full logits are never held.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Sequences per forward and backward when the config does not say: the README walk's step
# (2 seeds x 4 episodes = 8) in four: SmolLM2-135M's step peaked at 2,484 MB on CPU, 5,290 MB whole
# (docs/embedded-policy.md#memory-of-a-step has the figures).
DEFAULT_MICRO_BATCH_SIZE = 2


@dataclass(frozen=True)
class MicroBatches:
    size: int  # sequences per forward/backward: TRL's per_device_train_batch_size
    count: int  # slices of one step: gradient_accumulation_steps = steps_per_generation

    def grpo_arguments(self) -> dict[str, Any]:
        return {"per_device_train_batch_size": self.size, "gradient_accumulation_steps": self.count,
                "steps_per_generation": self.count}


def micro_batches(sequences: int, wanted: int | None) -> MicroBatches:
    """The slices of a step of `sequences` (one process's share): the largest size at most
    `wanted` (default DEFAULT_MICRO_BATCH_SIZE) that divides it, so every slice is as large and
    the accumulated gradient is the whole batch's."""
    limit = max(1, min(int(wanted or DEFAULT_MICRO_BATCH_SIZE), sequences))
    size = next(n for n in range(limit, 0, -1) if sequences % n == 0)
    return MicroBatches(size, sequences // size)


def memory_arguments(options: dict[str, Any], sequences: int) -> dict[str, Any]:
    """GRPOConfig's batch, accumulation and checkpointing arguments for a step of `sequences`
    on one process, from the job's [training] micro_batch_size and gradient_checkpointing."""
    checkpointing = options.get("gradient_checkpointing")
    return {**micro_batches(sequences, options.get("micro_batch_size")).grpo_arguments(),
            "gradient_checkpointing": True if checkpointing is None else bool(checkpointing)}
