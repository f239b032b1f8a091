"""The `lm` policy acts greedily in an evaluation's turn (its correlation id names an `eval-`
rollout) and samples in a training turn (docs/embedded-policy.md#evaluation). Tiny model, CPU."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from app.local.policies.base import PolicySettings
from app.local.taskapps.press import PRESS_TOOL, SYSTEM_PROMPT, TOOL_CHOICE

pytestmark = pytest.mark.usefixtures("trainer_extra")  # torch: the slow tier


def test_an_eval_turn_takes_the_argmax_and_a_training_turn_samples(tiny_model: Path) -> None:
    from app.local.policies.lm.policy import LmPolicy

    policy = LmPolicy(PolicySettings(model=str(tiny_model), learning_rate=1e-2, seed=0, total_steps=2, batch_size=1,
                                     group_size=2, options={"trainer_mode": "full"}))
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "Press C."}]

    def answers(kind: str) -> set[str]:
        return {policy.act(messages, [PRESS_TOOL], TOOL_CHOICE, f"trace_job_1:{kind}-0-{i}-abc",
                           random.Random(i)).message["tool_calls"][0]["function"]["arguments"] for i in range(12)}

    assert len(answers("eval")) == 1  # the same weights, the same answer, whatever the seed
    assert len(answers("rl")) > 1
    assert len(answers("evalk")) > 1  # pass@k's episodes sample
