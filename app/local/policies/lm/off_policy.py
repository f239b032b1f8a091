"""The `lm` policy one step off-policy (`[training] async_generation`): the update lets acting in
between its micro-batches, and TRL's importance-sampling correction weighs each token by how far
the model that sampled it is from the one being trained (docs/embedded-policy.md#async-generation).

With async_generation the next step's rollouts play while a step's update runs, so the update
must not hold the policy's lock from its batch to its logs (the turns would queue behind it and
wait past the task app's timeout). The lock is taken per micro-batch (TRL's `training_step`: a
forward and backward, the model in train mode) and per optimizer step; acting takes it per
forward pass, in eval mode, and puts the mode back before it lets go (acting.py).

The correction is TRL's for a vLLM server (GRPOTrainer._generate_and_score_completions with
`vllm_importance_sampling_correction`, mode `token_truncate`): the trainer's log-probabilities
of the batch before the update (`old_per_token_logps`) against the sampler's recorded ones,
ratio = exp(old - sampled) per token, truncated above at the cap. TRL multiplies each token's
loss by it; here each token's advantage is (`_weighted_advantages`), which is the same product:
GRPO's token loss is -min(r·A, clip(r)·A), and min(r·A·w, clip(r)·A·w) = w·min(r·A, clip(r)·A)
for w ≥ 0, in every loss_type the backend trains (grpo, dapo, dr_grpo).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

# TRL's vllm_importance_sampling_clip_max default (GRPOConfig, TRL 1.16).
DEFAULT_CAP = 3.0


@dataclass(frozen=True)
class OffPolicy:
    """What the config says of generation overlapping training."""

    generate_ahead: bool  # [training] async_generation
    correction: bool  # [training] importance_sampling_correction (TRL's vllm_importance_sampling_correction)
    cap: float  # [training] importance_sampling_cap (TRL's vllm_importance_sampling_clip_max)

    @property
    def corrects(self) -> bool:
        return self.generate_ahead and self.correction

    def describe(self) -> dict[str, Any]:
        if not self.generate_ahead:
            return {"async_generation": False}
        return {"async_generation": True, "importance_sampling_correction": self.correction,
                "importance_sampling_cap": self.cap if self.correction else None}


def off_policy_from(options: dict[str, Any]) -> OffPolicy:
    correction = options.get("importance_sampling_correction")
    cap = options.get("importance_sampling_cap")
    return OffPolicy(generate_ahead=options.get("async_generation") is True,
                     correction=True if correction is None else bool(correction),
                     cap=DEFAULT_CAP if cap is None else float(cap))


def truncated_ratio(trainer_logps: torch.Tensor, sampled_logps: torch.Tensor, mask: torch.Tensor,
                    cap: float) -> torch.Tensor:
    """TRL's token_truncate importance ratio, per token: exp(trainer - sampled) on the tokens the
    loss counts (1 elsewhere), a NaN difference read as 1, at most `cap`."""
    difference = torch.nan_to_num((trainer_logps - sampled_logps) * mask, nan=0.0)
    return torch.clamp(torch.exp(difference), max=cap)


def _weighted_advantages(output: dict[str, Any], ratio: torch.Tensor) -> torch.Tensor:
    advantages: torch.Tensor = output["advantages"]
    if advantages.dim() == 1:  # TRL takes advantages of shape (B,) or (B, T): _compute_loss
        advantages = advantages.unsqueeze(1)
    return advantages * ratio


def _trainer_logps(trainer: Any, output: dict[str, Any]) -> torch.Tensor:
    """The trainer's log-probabilities of the batch's completions, before its update: TRL's own
    forward pass for `old_per_token_logps` (no gradient, checkpointing off)."""
    from trl.models.utils import disable_gradient_checkpointing

    ids = torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1)
    attention = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    with torch.no_grad(), disable_gradient_checkpointing(trainer.model, trainer.args.gradient_checkpointing_kwargs):
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, attention, output["completion_ids"].size(1),
            batch_size=trainer.args.per_device_train_batch_size)
    result: torch.Tensor = logps
    return result


def install_correction(trainer: Any, cap: float, record: Callable[[dict[str, float]], None]) -> None:
    """Each generation batch's tokens weighed by the truncated ratio (the module's docstring);
    `record` gets the ratio's min, mean and max over the loss's tokens (the step event's)."""
    generate = trainer._generate_and_score_completions

    def corrected(*args: Any, **kwargs: Any) -> dict[str, Any]:
        output: dict[str, Any] = generate(*args, **kwargs)
        sampled = output.get("sampling_per_token_logps")
        if sampled is None:
            return output
        old = output.get("old_per_token_logps")
        if old is None:
            old = output["old_per_token_logps"] = _trainer_logps(trainer, output)
        mask = output["completion_mask"]
        if output.get("tool_mask") is not None:
            mask = mask * output["tool_mask"]
        ratio = truncated_ratio(old, sampled, mask, cap)
        output["advantages"] = _weighted_advantages(output, ratio)
        counted = ratio[mask.bool()]
        if counted.numel():
            record({"is_ratio_min": float(counted.min()), "is_ratio_mean": float(counted.mean()),
                    "is_ratio_max": float(counted.max())})
        return output

    trainer._generate_and_score_completions = corrected


def lock_per_micro_batch(trainer: Any, lock: threading.Lock, entered: threading.Event,
                         locked: list[bool]) -> None:
    """TRL's training_step (one micro-batch's forward and backward) under the policy's lock, the
    model in train mode. `entered` is set as the first one begins (the trainer's setup is over);
    `locked[0]` says the training thread holds the lock (its rollout_func lets go while it waits)."""
    step = trainer.training_step

    def locked_step(model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
        entered.set()
        with lock:
            locked[0] = True
            try:
                model.train()
                return step(model, inputs, num_items_in_batch)
            finally:
                locked[0] = False

    trainer.training_step = locked_step
