"""Issue 40 item 3: a step of the `lm` policy in micro-batches with gradient accumulation, and
with gradient checkpointing, is the same step as the whole batch at once
(docs/embedded-policy.md#memory-of-a-step). Tiny model, fp32, seeded; SGD, so the weights'
change is the gradient itself (Adam's first step is about lr * sign(g) and would hide a scale)."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from app.local.policies.base import Episode, PolicySettings
from app.local.policies.lm.memory import DEFAULT_MICRO_BATCH_SIZE, micro_batches
from app.local.taskapps.press import PRESS_TOOL, SYSTEM_PROMPT, TOOL_CHOICE

pytestmark = pytest.mark.usefixtures("trainer_extra")  # torch: the slow tier; fails, never skips, without it


def _settings(model: Path, **options: Any) -> PolicySettings:
    return PolicySettings(model=str(model), learning_rate=0.5, seed=0, total_steps=1, batch_size=2, group_size=2,
                          options={"trainer_mode": "full", **options})


def test_micro_batches_divide_the_step_evenly() -> None:
    assert micro_batches(8, None) == micro_batches(8, DEFAULT_MICRO_BATCH_SIZE)
    assert (micro_batches(8, 1).size, micro_batches(8, 1).count) == (1, 8)
    assert (micro_batches(12, 5).size, micro_batches(12, 5).count) == (4, 3)  # the largest divisor at most 5
    assert (micro_batches(6, 64).size, micro_batches(6, 64).count) == (6, 1)
    assert (micro_batches(7, 3).size, micro_batches(7, 3).count) == (1, 7)


def _episodes(model: Path) -> list[list[Episode]]:
    """Two groups of two scored episodes, played once and fed to every policy below."""
    from app.local.policies.lm.policy import LmPolicy

    policy = LmPolicy(_settings(model))
    rng = random.Random(5)
    groups = []
    try:
        for label, scores in (("A", (0.0, 1.0)), ("B", (1.0, 0.25))):
            group = []
            for i, score in enumerate(scores):
                messages = [{"role": "system", "content": SYSTEM_PROMPT},
                            {"role": "user", "content": f"Press {label}."}]
                act = policy.act(messages, [PRESS_TOOL], TOOL_CHOICE, f"{label}-{i}", rng)
                group.append(Episode([act.memo], score))
            groups.append(group)
    finally:
        policy.close()
    return groups


def _one_step(model: Path, groups: list[list[Episode]], **options: Any) -> tuple[dict[str, Any], float, int, bool]:
    """The weights' change after one SGD step, the step's loss, the forward+backward passes it
    made, and whether the model checkpointed its activations."""
    import torch

    from app.local.policies.lm.policy import LmPolicy

    policy = LmPolicy(_settings(model, **options))
    policy.grpo_overrides = {"optim": "sgd", "max_grad_norm": 0.0}  # the raw accumulated gradient
    before = {name: p.detach().clone() for name, p in policy.model.named_parameters()}
    passes: list[int] = []

    def count_passes(trainer: Any) -> None:
        compute_loss = trainer.compute_loss

        def counted(*args: Any, **kwargs: Any) -> Any:
            passes.append(len(args[1]["completion_ids"]))
            return compute_loss(*args, **kwargs)

        trainer.compute_loss = counted

    policy.trainer_hooks.append(count_passes)
    try:
        stats = policy.update(groups)
        checkpointing = bool(policy.model.is_gradient_checkpointing)
        delta = {name: (p.detach() - before[name]) for name, p in policy.model.named_parameters()}
    finally:
        policy.close()
    assert sum(passes) == 4  # every sequence of the step, once
    assert max(float(torch.linalg.vector_norm(d)) for d in delta.values()) > 0  # the step moved the weights
    return delta, stats.loss, len(passes), checkpointing


def test_a_step_in_micro_batches_is_the_whole_batchs_step(tiny_model: Path) -> None:
    import torch

    groups = _episodes(tiny_model)
    whole, whole_loss, whole_passes, _ = _one_step(tiny_model, groups, micro_batch_size=4)
    for size in (1, 2):
        delta, loss, passes, _ = _one_step(tiny_model, groups, micro_batch_size=size)
        assert passes == 4 // size
        assert loss == pytest.approx(whole_loss, abs=1e-6)
        for name, change in whole.items():
            torch.testing.assert_close(delta[name], change, rtol=1e-4, atol=1e-7, msg=lambda m, n=name: f"{n}: {m}")
    assert whole_passes == 1


def test_gradient_checkpointing_is_on_by_default_and_changes_no_weight(tiny_model: Path) -> None:
    import torch

    groups = _episodes(tiny_model)
    on, loss_on, _, checkpointing_on = _one_step(tiny_model, groups, micro_batch_size=2)
    off, loss_off, _, checkpointing_off = _one_step(tiny_model, groups, micro_batch_size=2,
                                                    gradient_checkpointing=False)
    assert (checkpointing_on, checkpointing_off) == (True, False)
    assert loss_on == pytest.approx(loss_off, abs=1e-6)
    for name, change in on.items():
        torch.testing.assert_close(off[name], change, rtol=1e-4, atol=1e-7, msg=lambda m, n=name: f"{n}: {m}")


def test_the_policy_gives_freed_memory_back_after_loading_and_each_step_and_is_collected_once_closed(
        tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """glibc keeps the pages torch frees (app/local/policies/heap.py): its allocator is bounded
    before the model loads, the pages are trimmed after it loads and after each update, and
    nothing keeps a closed policy's model alive."""
    import gc
    import weakref

    from app.local.policies import heap
    from app.local.policies.lm.policy import LmPolicy

    trims: list[str] = []
    monkeypatch.setattr(heap, "release_freed_memory", lambda collect=True: trims.append("trim") or True)
    monkeypatch.setattr(heap, "bound_the_heap", lambda: trims.append("bound") or True)
    policy = LmPolicy(replace(_settings(tiny_model, trainer_mode="lora"), total_steps=2))
    assert trims == ["bound", "trim"]  # the allocator set before the model loads, trimmed after
    model = weakref.ref(policy.model)
    rng = random.Random(3)
    try:
        for step in range(2):
            messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "Press A."}]
            acts = [policy.act(messages, [PRESS_TOOL], TOOL_CHOICE, f"{step}-{i}", rng) for i in range(4)]
            trims.clear()  # 2 groups of 2 (_settings)
            policy.update([[Episode([act.memo], float(i % 2)) for i, act in enumerate(acts[g:g + 2])]
                           for g in (0, 2)])
            assert trims == ["trim"]
    finally:
        policy.close()
    del policy, acts
    gc.collect()
    assert model() is None
