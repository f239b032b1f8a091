"""Where a finished job's model is and how to load it (issue 37 item 2; app/core/runs/model.py):
the end of a headless run, the dashboard's final panel and quit line, the history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.runs.model import SavedModel, model_path, saved_model


def saved_folder(tmp_path: Path, manifest: dict | None, *files: str) -> Path:
    folder = tmp_path / "checkpoints" / "job_1" / "step-000003"
    folder.mkdir(parents=True)
    if manifest is not None:
        (folder / "policy.json").write_text(json.dumps(manifest))
    for name in files:
        (folder / name).write_text("{}")
    return folder


def test_a_lora_adapter_is_loaded_with_peft(tmp_path):
    folder = saved_folder(tmp_path, {"kind": "lm", "trainer_mode": "lora", "base": "Qwen/Qwen3-0.6B"})
    model = saved_model({"status": "succeeded", "artifacts": {"model_path": str(folder)}})
    assert model == SavedModel(str(folder), "lora")
    assert model.lines() == [f"Model: {folder}", "  Load it in Python:",
                             "    from peft import AutoPeftModelForCausalLM",
                             f'    model = AutoPeftModelForCausalLM.from_pretrained("{folder}")']


def test_an_adapter_over_a_gguf_base_names_the_file_to_read_the_base_from(tmp_path):
    """A LoRA adapter trained on SmolLM2's .gguf: peft passes gguf_file on to transformers, which
    reads the base from that file in the folder the adapter names (written absolute by the backend)."""
    folder = saved_folder(tmp_path, {"kind": "lm", "trainer_mode": "lora", "gguf_file": "SmolLM2.Q4_1.gguf"})
    model = saved_model({"artifacts": {"model_path": str(folder)}})
    assert model == SavedModel(str(folder), "lora", "SmolLM2.Q4_1.gguf")
    assert model.load_lines() == [
        "from peft import AutoPeftModelForCausalLM",
        f'model = AutoPeftModelForCausalLM.from_pretrained("{folder}", gguf_file="SmolLM2.Q4_1.gguf")']


def test_a_full_model_is_loaded_with_transformers(tmp_path):
    folder = saved_folder(tmp_path, {"kind": "lm", "trainer_mode": "full"})
    assert saved_model({"artifacts": {"model_path": str(folder)}}).load_lines() == [
        "from transformers import AutoModelForCausalLM",
        f'model = AutoModelForCausalLM.from_pretrained("{folder}")']


def test_the_tabular_stand_in_says_what_it_is_instead_of_python(tmp_path):
    folder = saved_folder(tmp_path, {"kind": "tabular"})
    model = saved_model({"artifacts": {"model_path": str(folder)}})
    assert model.kind == "tabular" and model.load_lines() == []
    assert model.lines()[0] == f"Model: {folder}"
    assert "not a language model" in model.lines()[1] and "--trainer lm" in model.lines()[1]


@pytest.mark.parametrize(("files", "kind"), [(("adapter_config.json",), "lora"), (("config.json",), "full"),
                                             ((), "unknown")])
def test_a_folder_without_a_manifest_is_read_by_its_files(tmp_path, files, kind):
    folder = saved_folder(tmp_path, None, *files)
    assert saved_model({"artifacts": {"model_path": str(folder)}}).kind == kind


def test_a_folder_on_another_machine_shows_its_path_only():
    model = saved_model({"artifacts": {"model_path": "/srv/backend/checkpoints/job_1/step-000009"}})
    assert model.lines() == ["Model: /srv/backend/checkpoints/job_1/step-000009"]


@pytest.mark.parametrize("payload", [None, {}, {"artifacts": None}, {"artifacts": {"model_path": 3}},
                                     {"artifacts": {"model_path": "  "}}, {"artifacts": ["x"]}])
def test_no_model_named_is_none(payload):
    assert model_path(payload) is None and saved_model(payload) is None


def test_a_hostile_path_cannot_move_the_terminal():
    path = model_path({"artifacts": {"model_path": "/tmp/m\x1b[2J\rx"}})
    assert path is not None and "\x1b" not in path and "\r" not in path
