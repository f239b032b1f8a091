"""Numbers that say what happened (issue 39, item 2): an `lm` step event counts the tokens the
model sampled apart from those the grammar forced, reports tokens/s over the sampled ones, an
entropy over the positions the model chose (a 4-way choice reads at most ln 4; TRL's figure is
over the whole vocabulary), and reward_std as the mean of the groups' standard deviations.
docs/embedded-policy.md#metrics."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import pytest

from app.local.policies.base import Episode, PolicySettings
from app.local.servers import ServerHandle, start_backend
from app.local.taskapps.press import LABELS, PRESS_TOOL, SYSTEM_PROMPT, TOOL_CHOICE
from support.lm_fixtures import press_payload

from ..conftest import API_KEY, ENV_KEY, api_client, create_job, events_of, wait_terminal

pytestmark = pytest.mark.usefixtures("trainer_extra")  # torch: the slow tier; fails, never skips, without it


def _policy(model: Path) -> Any:
    from app.local.policies.lm.policy import LmPolicy

    return LmPolicy(PolicySettings(model=str(model), learning_rate=1e-2, seed=0, total_steps=2, batch_size=2,
                                   group_size=2, options={"trainer_mode": "full"}))


def _press(policy: Any, cid: str, rng: random.Random) -> Any:
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "Press B."}]
    return policy.act(messages, [PRESS_TOOL], TOOL_CHOICE, cid, rng)


def test_the_entropy_of_a_choice_among_k_allowed_tokens_is_at_most_ln_k() -> None:
    import torch

    from app.local.policies.lm.acting import sampling_entropy

    row = torch.full((50,), -math.inf)
    row[[3, 7, 11, 19]] = torch.tensor([2.0, -1.0, 0.5, 4.0])  # the grammar allows 4 tokens
    assert 0.0 < sampling_entropy(row) < math.log(4)
    row[[3, 7, 11, 19]] = 1.5  # all alike: exactly ln 4
    assert sampling_entropy(row) == pytest.approx(math.log(4), abs=1e-6)
    # top_p keeps the nucleus: of four alike tokens, those with less than 0.6 before them (0, 0.25, 0.5)
    assert sampling_entropy(row, top_p=0.6) == pytest.approx(math.log(3), abs=1e-6)
    one = torch.full((50,), -math.inf)
    one[5] = 0.0
    assert sampling_entropy(one) == 0.0  # one allowed token: no choice


def test_a_turn_counts_its_sampled_and_forced_tokens_and_its_entropy_is_over_the_choice(tiny_model: Path) -> None:
    """The press call is a 4-way choice (the label) in a scaffold the grammar forces: its
    entropy reads at most ln 4 while TRL's, over the whole vocabulary, reads more."""
    policy = _policy(tiny_model)
    rng = random.Random(2)
    try:
        groups = []
        for g, scores in enumerate(((0.0, 1.0), (1.0, 1.0))):
            group = []
            for i, score in enumerate(scores):
                memo = _press(policy, f"f{g}-{i}", rng).memo
                completion = memo.sequence.mask[memo.end - memo.tokens:memo.end]
                assert memo.sampled == sum(completion)  # the tokens the model chose: mask 1
                assert 1 <= memo.sampled < memo.tokens  # the grammar forced the scaffold
                assert 0.0 < memo.entropy_sum / memo.sampled <= math.log(len(LABELS)) + 1e-6
                group.append(Episode([memo], score))
            groups.append(group)
        stats = policy.update(groups)
    finally:
        policy.close()
    extra = stats.extra
    assert extra["sampled_tokens"] + extra["forced_tokens"] == extra["completion_tokens"]
    assert 0 < extra["sampled_tokens"] < extra["completion_tokens"]
    assert extra["generation_tokens_per_s"] == pytest.approx(extra["sampled_tokens"] / extra["generation_seconds"],
                                                             rel=0.02)
    assert 0.0 < stats.entropy <= math.log(len(LABELS)) + 1e-6
    assert extra["entropy_full_vocab"] > math.log(len(LABELS))  # TRL's: over every token of the vocabulary
    # the groups' stds (TRL's advantages divide by the Bessel-corrected one): 0.7071 and 0; not the
    # whole batch's std of [0, 1, 1, 1] (0.5), which TRL logs as reward_std
    assert extra["reward_std"] == pytest.approx(math.sqrt(0.5) / 2)
    assert extra["frac_reward_zero_std"] == pytest.approx(0.5)


def test_a_tiny_model_jobs_step_events_say_what_happened(tiny_model: Path, press_app: ServerHandle,
                                                         tmp_path: Path) -> None:
    with start_backend(api_key=API_KEY, db_path=tmp_path / "state.sqlite3", env_api_keys=[ENV_KEY],
                       policy_kind="lm") as backend, api_client(backend) as api:
        job_id = create_job(api, press_payload(press_app.url, tiny_model, "lora", steps=1, lr=1e-2))
        job = wait_terminal(api, job_id, timeout=600)
        events = events_of(api, job_id)
    assert job["status"] == "succeeded", (job, [e["message"] for e in events][-5:])
    steps = [e["data"] for e in events if e["type"] == "rl.train.step"]
    assert steps
    for data in steps:
        assert data["sampled_tokens"] + data["forced_tokens"] == data["completion_tokens"]
        assert 0 < data["sampled_tokens"] < data["completion_tokens"]
        assert data["entropy"] <= math.log(len(LABELS)) + 1e-6
        assert data["rollout_seconds"] > 0 and data["step_seconds"] > 0
        # the update is timed apart from the rollout phase: together within the step's seconds
        assert data["rollout_seconds"] + data["step_seconds"] <= data["seconds"] + 0.01
