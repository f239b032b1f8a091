"""Issue 40 item 2: the `lm` policy one step off-policy (`[training] async_generation`,
app/local/policies/lm/off_policy.py): TRL's truncated importance ratio, the lock taken per
micro-batch so acting runs between them, and a seeded tiny-model job that plays each next
step's rollouts during the update and learns (docs/embedded-policy.md#async-generation)."""

from __future__ import annotations

import math
import random
import threading
from pathlib import Path
from typing import Any

import pytest

from app.local.policies.base import Episode, PolicySettings
from app.local.servers import ServerHandle, start_backend
from app.local.taskapps.press import PRESS_TOOL, SYSTEM_PROMPT, TOOL_CHOICE
from support.lm_fixtures import press_payload

from ..conftest import API_KEY, ENV_KEY, api_client, create_job, events_of, wait_terminal

pytestmark = pytest.mark.usefixtures("trainer_extra")  # torch: the slow tier; fails, never skips, without it


def test_the_importance_ratio_is_truncated_per_token_as_trl_does() -> None:
    """exp(trainer - sampled) per token, 1 where the loss does not count or the sampler gave no
    logprob, at most the cap (TRL's token_truncate)."""
    import torch

    from app.local.policies.lm.off_policy import truncated_ratio

    trainer = torch.tensor([[-1.0, -2.0, -0.1, -0.7, 0.0]])
    sampled = torch.tensor([[-1.5, -1.0, -2.1, math.nan, -3.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    ratio = truncated_ratio(trainer, sampled, mask, cap=3.0)
    # 0.5 up: e^0.5; 1.0 down: e^-1; 2.0 up: e^2 = 7.39, truncated to 3; NaN: 1; masked out: 1
    expected = torch.tensor([[math.exp(0.5), math.exp(-1.0), 3.0, 1.0, 1.0]])
    assert torch.allclose(ratio, expected, atol=1e-6), ratio
    assert torch.allclose(truncated_ratio(trainer, sampled, mask, cap=1.5),
                          torch.tensor([[1.5, math.exp(-1.0), 1.5, 1.0, 1.0]]), atol=1e-6)


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_weighing_the_advantages_is_trls_weighing_of_the_token_losses(level: str) -> None:
    """TRL multiplies each token's clipped loss by the ratio; off_policy.py multiplies each token's
    advantage, which is the same product for any ratio >= 0 (the module's docstring)."""
    import torch

    from app.local.policies.lm.off_policy import _weighted_advantages

    generator = torch.Generator().manual_seed(0)
    advantages = torch.tensor([1.5, -0.5, 0.0, -2.0])
    coef = torch.exp(torch.randn(4, 6 if level == "token" else 1, generator=generator) * 0.4)
    ratio = torch.clamp(torch.exp(torch.randn(4, 6, generator=generator)), max=3.0)
    clipped = torch.clamp(coef, 0.8, 1.2)
    trl = -torch.min(coef * advantages.unsqueeze(1), clipped * advantages.unsqueeze(1)) * ratio
    weighed = _weighted_advantages({"advantages": advantages}, ratio)
    ours = -torch.min(coef * weighed, clipped * weighed)
    assert ours.shape == trl.shape == (4, 6)
    assert torch.allclose(ours, trl, atol=1e-6)


def _settings(model: Path, **options: Any) -> PolicySettings:
    return PolicySettings(model=str(model), learning_rate=1e-2, seed=0, total_steps=2, batch_size=2, group_size=2,
                          options={"trainer_mode": "full", "micro_batch_size": 1, **options})


def _played(policy: Any, seed: int) -> list[list[Episode]]:
    """Two groups of two scored press episodes, played by `policy` as it is now."""
    rng = random.Random(seed)
    groups = []
    for label, scores in (("A", (0.0, 1.0)), ("B", (1.0, 0.25))):
        group = []
        for i, score in enumerate(scores):
            messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": f"Press {label}."}]
            act = policy.act(messages, [PRESS_TOOL], TOOL_CHOICE, f"{seed}-{label}-{i}", rng)
            group.append(Episode([act.memo], score))
        groups.append(group)
    return groups


class _OwnedLock:
    """A Lock that knows which thread holds it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.owner: int | None = None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._lock.acquire(blocking, timeout)
        if got:
            self.owner = threading.get_ident()
        return got

    def release(self) -> None:
        self.owner = None
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@pytest.mark.parametrize("ahead", [False, True])
def test_acting_gets_the_lock_between_micro_batches_only_with_async_generation(tiny_model: Path,
                                                                             ahead: bool) -> None:
    """Without async_generation the update holds the lock from its batch to its logs (acting
    waits for the whole step); with it, only within each micro-batch and optimizer step. The
    second step's four micro-batches (micro_batch_size 1) each check whether the lock is free."""
    from app.local.policies.lm.policy import LmPolicy

    policy = LmPolicy(_settings(tiny_model, async_generation=ahead))
    policy.lock = _OwnedLock()  # type: ignore[assignment]
    free: list[tuple[int, bool]] = []  # (the optimizer steps taken before, whether the lock is free)

    def watch(trainer: Any) -> None:
        step = trainer.training_step

        def watched(model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
            # Does the training thread itself hold it? (Another thread's short hold, e.g. update()
            # forgetting the step's episodes, is not the update's.)
            # (Keyed by the step: the trainer enters the next step's first micro-batch, where it
            # waits for that step's episodes, as soon as it has logged the last one's.)
            free.append((trainer.state.global_step, policy.lock.owner != threading.get_ident()))
            return step(model, inputs, num_items_in_batch)

        trainer.training_step = watched

    policy.trainer_hooks.append(watch)
    try:
        first, second = _played(policy, 5), _played(policy, 6)
        policy.update(first)
        policy.update(second)
    finally:
        policy.close()
    second_step = [was_free for step, was_free in free if step == 1]
    assert second_step == ([True] * 4 if ahead else [True, False, False, False])


def test_the_ratio_is_one_on_policy_and_moves_one_step_off(tiny_model: Path) -> None:
    """Episodes sampled by the weights being trained weigh 1 (the recorded logprobs are the
    trainer's own, within float error); episodes sampled before the last update do not."""
    from app.local.policies.lm.policy import LmPolicy

    policy = LmPolicy(_settings(tiny_model, async_generation=True, importance_sampling_cap=3.0))
    try:
        first, second = _played(policy, 5), _played(policy, 6)  # both by the initial weights
        on = policy.update(first).extra
        off = policy.update(second).extra  # one step off-policy
    finally:
        policy.close()
    assert abs(on["is_ratio_min"] - 1) < 1e-3 and abs(on["is_ratio_max"] - 1) < 1e-3, on
    assert max(abs(off["is_ratio_min"] - 1), abs(off["is_ratio_max"] - 1)) > 1e-2, off
    assert 0 < off["is_ratio_min"] <= off["is_ratio_mean"] <= off["is_ratio_max"] <= 3.0, off
    assert policy.describe().data["async_generation"] is True


def test_a_seeded_async_job_plays_ahead_and_learns(tiny_model: Path, press_app: ServerHandle,
                                                   tmp_path: Path) -> None:
    """The tiny model on the press app, 8 steps, async_generation on: every step after the first
    was played during the previous step's update, and the score rises as without it
    (tests/local/policies/test_lm_policy.py test_the_backend_trains_the_tiny_model_and_its_score_rises)."""
    body = press_payload(press_app.url, tiny_model, "full", steps=8, lr=1e-2)
    body["data"]["config"]["training"]["async_generation"] = True
    with start_backend(api_key=API_KEY, db_path=tmp_path / "state.sqlite3", env_api_keys=[ENV_KEY],
                       policy_kind="lm") as backend, api_client(backend) as api:
        job_id = create_job(api, body)
        job = wait_terminal(api, job_id, timeout=600)
        events = events_of(api, job_id)
        assert job["status"] == "succeeded", (job, [e["message"] for e in events][-5:])
    steps = [e["data"] for e in events if e["type"] == "rl.train.step"]
    assert [s["step"] for s in steps] == list(range(1, 9))
    assert [s["off_policy"] for s in steps] == [False] + [True] * 7
    for before, after in zip(steps, steps[1:], strict=False):
        assert after["rollouts_started_at"] < before["update_ended_at"], (before, after)
    assert all(0 < s["is_ratio_min"] <= s["is_ratio_max"] <= 3.0 for s in steps), steps
    policy = next(e for e in events if e["type"] == "rl.train.policy")["data"]
    assert policy["async_generation"] is True and policy["importance_sampling_cap"] == 3.0
    scores = [s["mean_score"] for s in steps]
    assert sum(scores[-3:]) / 3 - sum(scores[:3]) / 3 >= 0.3, scores
