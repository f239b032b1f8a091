"""What app/local/policies/trl_compat.py takes from TRL is still there and behaves as the
data-parallel vLLM adapter relies on (its own weight sync for a step replaces GRPOTrainer's). A
failure names the TRL version the module was written against and the one installed. TRL is read
as source, not imported: importing it imports torch (the slow tier's)."""

from __future__ import annotations

import importlib.util
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import pytest

from app.local.policies import trl_compat
from app.local.policies.trl_compat import mark_weights_synced, synced_step


def test_grpo_trainer_syncs_only_a_step_it_has_not_loaded():
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("TRL is not installed (the trainer extra): nothing relies on it")
    source = (Path(spec.submodule_search_locations[0]) / "trainer" / "grpo_trainer.py").read_text(encoding="utf-8")
    said = (f"GRPOTrainer._last_loaded_step: app/local/policies/trl_compat.py was written against "
            f"{trl_compat.WRITTEN_FOR}, TRL {version('trl')} is installed")
    assert "self.state.global_step != self._last_loaded_step" in source, said
    assert "self._last_loaded_step = self.state.global_step" in source, said


def test_marking_a_step_synced_records_it_as_loaded():
    trainer = SimpleNamespace(state=SimpleNamespace(global_step=7), _last_loaded_step=-1)
    mark_weights_synced(trainer)
    assert trainer._last_loaded_step == synced_step(trainer) == 7
