"""The `lm` policy's objective, named in the config (app/local/policies/lm/objective.py,
grpo_thread.py): loss_type, variety, num_iterations, epsilon, the zero-std step and filter, LoRA
dropout, temperature 0. CPU, offline, seeded with the tiny model. docs/embedded-policy.md#the-objective."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from app.local.policies.base import Episode, PolicySettings
from app.local.taskapps.press import PRESS_TOOL, SYSTEM_PROMPT, TOOL_CHOICE
from app.local.training.plan import policy_options

pytestmark = pytest.mark.usefixtures("trainer_extra")  # torch: the slow tier; fails, never skips, without it


def settings(model: Path, total_steps: int = 2, **options: Any) -> PolicySettings:
    return PolicySettings(model=str(model), learning_rate=1e-2, seed=0, total_steps=total_steps, batch_size=1,
                          group_size=2, options={"trainer_mode": "full", **options})


def press_messages(label: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": f"Press {label}."}]


def group(policy: Any, rng: random.Random, label: str, scores: tuple[float, ...]) -> list[Episode]:
    return [Episode([policy.act(press_messages("B"), [PRESS_TOOL], TOOL_CHOICE, f"{label}-{i}", rng).memo], score)
            for i, score in enumerate(scores)]


def test_the_config_names_the_objective_and_the_policy_event_says_it(tiny_model: Path) -> None:
    from trl import GRPOConfig

    from app.local.policies.lm.policy import LmPolicy

    options = policy_options({"algorithm": {"type": "online", "method": "policy_gradient", "variety": "GSPO"},
                              "training": {"loss_type": "grpo", "num_iterations": 2, "epsilon": 0.1,
                                           "epsilon_high": 0.28}})
    assert options["loss_type"] == "grpo" and options["num_iterations"] == 2 and options["variety"] == "GSPO"
    policy = LmPolicy(settings(tiny_model, total_steps=3, **options))
    config = policy.grpo_config()
    assert (config.loss_type, config.importance_sampling_level, config.num_iterations, config.epsilon,
            config.epsilon_high) == ("grpo", "sequence", 2, 0.1, 0.28)
    assert config.max_steps == 6  # each step's batch trained on twice
    info = policy.describe()
    assert (info.data["loss_type"], info.data["variety"], info.data["num_iterations"]) == ("grpo", "gspo", 2)
    assert "loss_type grpo, variety gspo, num_iterations 2" in info.message

    plain = LmPolicy(settings(tiny_model))  # left out: TRL's own defaults
    assert plain.grpo_config().loss_type == GRPOConfig.loss_type == plain.describe().data["loss_type"]
    assert plain.grpo_config().num_iterations == 1 and plain.grpo_config().epsilon == GRPOConfig.epsilon


@pytest.mark.parametrize(("options", "words"), [
    ({"loss_type": "ppo"}, "one of grpo, dapo, dr_grpo"), ({"variety": "grpo"}, "one of gspo"),
    ({"temperature": 0.0}, "Set [policy] temperature = 1.0")])
def test_what_the_backend_cannot_train_is_refused_with_what_it_can(tiny_model: Path, options: dict[str, Any],
                                                                   words: str) -> None:
    from app.local.policies.lm.model import ModelUnavailable
    from app.local.policies.lm.policy import LmPolicy

    with pytest.raises(ModelUnavailable) as refused:
        LmPolicy(settings(tiny_model, **options))
    assert words in str(refused.value)


def test_a_payload_with_an_unknown_loss_type_or_too_many_iterations_is_refused() -> None:
    from app.local.server.bodies import Training

    base = {"num_epochs": 1, "iterations_per_epoch": 1, "max_turns": 1, "batch_size": 1, "group_size": 2,
            "learning_rate": 0.01}
    assert Training.model_validate({**base, "loss_type": "DAPO", "num_iterations": 4}).loss_type == "DAPO"
    with pytest.raises(ValidationError, match='one of "grpo", "dapo", "dr_grpo"'):
        Training.model_validate({**base, "loss_type": "ppo"})
    with pytest.raises(ValidationError, match="num_iterations"):
        Training.model_validate({**base, "num_iterations": 17})


def test_lora_dropout_is_0_unless_the_config_sets_it(tiny_model: Path) -> None:
    from app.local.policies.lm.policy import LmPolicy

    default = LmPolicy(settings(tiny_model, trainer_mode="lora"))
    assert default.describe().data["lora"]["dropout"] == 0.0
    assert default.model.peft_config["default"].lora_dropout == 0.0
    assert LmPolicy(settings(tiny_model, trainer_mode="lora", lora={"dropout": 0.1})).lora["dropout"] == 0.1


def test_a_step_whose_every_group_scored_alike_leaves_weights_and_adam_moments_unchanged(tiny_model: Path) -> None:
    """All advantages 0, yet AdamW's momentum from the step before would move the weights: the
    step is skipped (optimizer and scheduler)."""
    from app.local.policies.lm.policy import LmPolicy

    policy = LmPolicy(settings(tiny_model, total_steps=3))
    rng = random.Random(7)
    try:
        policy.update([group(policy, rng, "a", (0.0, 1.0))])
        assert policy.training is not None
        optimizer = policy.training.trainer.optimizer
        weights = {n: p.detach().clone() for n, p in policy.model.named_parameters()}
        moments = {k: {n: v.clone() for n, v in s.items()} for k, s in optimizer.state_dict()["state"].items()}
        assert moments  # the first step made them
        stats = policy.update([group(policy, rng, "b", (1.0, 1.0))])
        assert stats.extra["frac_reward_zero_std"] == 1.0
        for name, param in policy.model.named_parameters():
            assert param.detach().equal(weights[name]), name
        after = optimizer.state_dict()["state"]
        for key, state in moments.items():
            for name, value in state.items():
                assert after[key][name].equal(value), (key, name)
        policy.update([group(policy, rng, "c", (0.0, 1.0))])  # a step that learns moves them again
        assert any(not p.detach().equal(weights[n]) for n, p in policy.model.named_parameters())
    finally:
        policy.close()


def test_num_iterations_trains_each_batch_again_against_the_generation_logprobs(tiny_model: Path) -> None:
    """num_iterations 2: two optimizer steps per backend step, and the ratio's old logprobs are
    those recorded when the model sampled (shifted here, so a recomputed forward pass would show)."""
    import torch

    from app.local.policies.lm.acting import TurnMemo
    from app.local.policies.lm.policy import LmPolicy

    policy = LmPolicy(settings(tiny_model, num_iterations=2, loss_type="grpo"))
    seen: list[dict[str, Any]] = []

    def spy(trainer: Any) -> None:
        compute = trainer.compute_loss

        def recording(model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            seen.append({k: inputs[k].detach().clone() for k in ("old_per_token_logps", "completion_mask")
                         if k in inputs})
            return compute(model, inputs, *args, **kwargs)

        trainer.compute_loss = recording

    policy.trainer_hooks.append(spy)
    rng = random.Random(3)
    try:
        episodes = group(policy, rng, "n", (0.0, 1.0))
        recorded = []
        for episode in episodes:
            memo = episode.memos[0]
            assert isinstance(memo, TurnMemo)
            sequence = memo.sequence
            sequence.logprobs = [lp - 0.5 if m else lp for lp, m in zip(sequence.logprobs, sequence.mask, strict=True)]
            recorded.append(sum(sequence.logprobs[sequence.prompt_len:memo.end]))
        stats = policy.update([episodes])
        assert policy.training is not None
        steps = {float(s["step"]) for s in policy.training.trainer.optimizer.state_dict()["state"].values()}
    finally:
        policy.close()
    assert steps == {2.0} and len(seen) == 2
    for inputs in seen:
        old = inputs["old_per_token_logps"] * inputs["completion_mask"]
        assert sorted(old.sum(-1).tolist()) == pytest.approx(sorted(recorded), abs=1e-4)
    assert torch.isfinite(torch.tensor(stats.loss))


def test_the_zero_std_filter_takes_alike_groups_out_of_the_loss(tiny_model: Path) -> None:
    from app.local.policies.lm.policy import LmPolicy

    rng = random.Random(1)
    for flag, masked in ((False, False), (True, True)):
        policy = LmPolicy(PolicySettings(model=str(tiny_model), learning_rate=1e-2, seed=0, total_steps=1,
                                         batch_size=2, group_size=2,
                                         options={"trainer_mode": "full", "zero_std_filter": flag}))
        alike, apart = group(policy, rng, f"s{flag}", (1.0, 1.0)), group(policy, rng, f"d{flag}", (0.0, 1.0))
        batch = policy._batch([alike, apart])
        masks = batch.samples["env_mask"]
        assert all(not any(m) for m in masks[:2]) is masked
        assert all(any(m) for m in masks[2:])
        assert batch.learns and not policy._batch([alike]).learns
