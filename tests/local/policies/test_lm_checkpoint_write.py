"""An lm checkpoint is copied under the model's lock and written after it is released (issue 40
item 4): a turn acts while the save's write is blocked, and the files load back equal.
app/local/policies/lm/checkpoint.py, docs/embedded-policy.md#checkpoints."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pytest

from app.local.policies.base import Episode, PolicySettings
from app.local.taskapps.press import PRESS_TOOL, SYSTEM_PROMPT, TOOL_CHOICE

pytestmark = pytest.mark.usefixtures("trainer_extra")  # torch: the slow tier; fails, never skips, without it

BLOCKED_WRITE_S = 60.0  # only reached when the act waits for the write (the failure this test catches)


def _settings(model: Path) -> PolicySettings:
    return PolicySettings(model=str(model), learning_rate=1e-2, seed=0, total_steps=3, batch_size=1, group_size=2,
                          options={"trainer_mode": "lora"})


def _messages() -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "Press B."}]


def _equal(a: Any, b: Any) -> bool:
    import torch

    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a.cpu(), b.cpu())
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def test_a_turn_acts_while_the_checkpoint_is_written_and_the_files_load_back_equal(
        tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import peft.peft_model
    import torch

    from app.local.policies import load
    from app.local.policies.lm.checkpoint import OPTIMIZER
    from app.local.policies.lm.policy import LmPolicy

    policy = LmPolicy(_settings(tiny_model))
    rng = random.Random(7)
    try:
        group = [Episode([policy.act(_messages(), [PRESS_TOOL], TOOL_CHOICE, f"s-{i}", rng).memo], float(i))
                 for i in range(2)]
        policy.update([group])  # the trainer exists: its optimizer state is saved too
        assert policy.training is not None
        optimizer_then = policy.training.trainer.optimizer.state_dict()
        weights_then = {k: v.clone() for k, v in policy.model.state_dict().items()}

        writing, release, order = threading.Event(), threading.Event(), []
        real_write = peft.peft_model.safe_save_file

        def blocked_write(*args: Any, **kwargs: Any) -> Any:  # the adapter's file, held until the turn acted
            writing.set()
            release.wait(BLOCKED_WRITE_S)
            order.append("written")
            return real_write(*args, **kwargs)

        monkeypatch.setattr(peft.peft_model, "safe_save_file", blocked_write)
        folder = tmp_path / "step-000001"
        folder.mkdir()
        errors: list[BaseException] = []

        def save() -> None:
            try:
                policy.save(folder)
            except BaseException as exc:  # noqa: BLE001 - the test reports it
                errors.append(exc)

        saver = threading.Thread(target=save)
        saver.start()
        assert writing.wait(BLOCKED_WRITE_S)
        act = policy.act(_messages(), [PRESS_TOOL], TOOL_CHOICE, "during-save", rng)
        order.append("acted")
        release.set()
        saver.join(BLOCKED_WRITE_S)
        assert errors == [] and not saver.is_alive()
        assert act.message["tool_calls"]
        assert order == ["acted", "written"]  # the turn did not wait for the disk
    finally:
        policy.close()
    monkeypatch.undo()
    again = load(folder, _settings(tiny_model))
    try:
        assert isinstance(again, LmPolicy)
        loaded = again.model.state_dict()
        assert loaded.keys() == weights_then.keys()
        assert all(torch.equal(loaded[k], weights_then[k]) for k in weights_then)
    finally:
        again.close()
    assert _equal(torch.load(folder / OPTIMIZER, weights_only=True), optimizer_then)


def test_a_later_save_writes_the_files_the_first_did_without_peft_or_the_tokenizer(
        tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first save writes through peft and the tokenizer; a later one writes the same bytes
    itself (checkpoint.RepeatedFiles): every file equal, optimizer.pt aside, and it loads."""
    import peft.peft_model

    from app.local.policies import load
    from app.local.policies.lm.checkpoint import OPTIMIZER
    from app.local.policies.lm.policy import LmPolicy

    policy = LmPolicy(_settings(tiny_model))
    rng = random.Random(7)
    first, later = tmp_path / "first", tmp_path / "later"
    try:
        group = [Episode([policy.act(_messages(), [PRESS_TOOL], TOOL_CHOICE, f"s-{i}", rng).memo], float(i))
                 for i in range(2)]
        policy.update([group])
        first.mkdir()
        policy.save(first)

        def refused(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("a later save went through peft's save_pretrained or the tokenizer's")

        monkeypatch.setattr(peft.peft_model.PeftModel, "save_pretrained", refused)
        monkeypatch.setattr(type(policy.tokenizer), "save_pretrained", refused)
        later.mkdir()
        policy.save(later)
        monkeypatch.undo()
    finally:
        policy.close()
    names = sorted(path.name for path in first.iterdir())
    assert names == sorted(path.name for path in later.iterdir())
    assert {"adapter_model.safetensors", "adapter_config.json", "tokenizer_config.json"} <= set(names)
    for name in names:
        if name != OPTIMIZER:  # torch.save's archive names its folder after the file's path
            assert (first / name).read_bytes() == (later / name).read_bytes(), name
    again = load(later, _settings(tiny_model))
    again.close()
