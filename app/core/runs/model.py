"""Where a finished job's model is and how to load it: the same words in every front end (the
dashboard's final panel, the quit line, the history, the end of a headless run).

A succeeded job's JSON names the folder (``artifacts.model_path``, docs/embedded-policy.md#checkpoints-and-artifacts).
What it holds decides the two lines of Python that load it: a LoRA adapter (peft), a whole
model (transformers) or the tabular stand-in's table, which no library loads. The folder's
``policy.json`` says which; on another machine's backend the folder is not here to read, and
the path is all there is to show.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from app.core.redact import printable

ModelKind = Literal["full", "lora", "tabular", "unknown"]

MANIFEST = "policy.json"  # as app/local/policies/base.py writes it: {"kind", "trainer_mode", ...}
TABULAR_NOTE = ("the tabular stand-in's policy, a table of actions as JSON in policy.json, not a language "
                "model: `synth-tui backend --trainer lm` trains one")


def model_path(payload: Mapping[str, Any] | None) -> str | None:
    """``artifacts.model_path`` of a job's JSON, when it names one (a string, not empty)."""
    artifacts = payload.get("artifacts") if isinstance(payload, Mapping) else None
    path = artifacts.get("model_path") if isinstance(artifacts, Mapping) else None
    return printable(path) if isinstance(path, str) and path.strip() else None


@dataclass(frozen=True)
class SavedModel:
    path: str
    kind: ModelKind
    gguf_file: str | None = None  # an adapter over a .gguf base: its file, in the base's folder

    def load_lines(self) -> list[str]:
        """The two lines of Python that load it (none for the stand-in or an unknown folder)."""
        literal = json.dumps(self.path, ensure_ascii=False)  # a Python string literal as well
        if self.kind == "lora":
            # peft passes gguf_file on to transformers, which reads the base from that file.
            gguf = f", gguf_file={json.dumps(self.gguf_file, ensure_ascii=False)}" if self.gguf_file else ""
            return ["from peft import AutoPeftModelForCausalLM",
                    f"model = AutoPeftModelForCausalLM.from_pretrained({literal}{gguf})"]
        if self.kind == "full":
            return ["from transformers import AutoModelForCausalLM",
                    f"model = AutoModelForCausalLM.from_pretrained({literal})"]
        return []

    def lines(self) -> list[str]:
        """``Model: PATH`` and, indented, the lines that load it (or what it is)."""
        if self.kind == "tabular":
            return [f"Model: {self.path}", f"  ({TABULAR_NOTE})"]
        loading = self.load_lines()
        if not loading:
            return [f"Model: {self.path}"]
        return [f"Model: {self.path}", "  Load it in Python:", *(f"    {line}" for line in loading)]


def saved_model(payload: Mapping[str, Any] | None) -> SavedModel | None:
    """The job's model, when its JSON names one (reads the folder's manifest if it is here)."""
    path = model_path(payload)
    if path is None:
        return None
    folder = Path(path)
    manifest = _manifest(folder)
    name = manifest.get("gguf_file")  # the .gguf file an adapter's base was read from
    gguf_file = printable(name) if isinstance(name, str) and name.strip() else None
    return SavedModel(path, model_kind(folder, manifest), gguf_file)


def _manifest(folder: Path) -> dict[str, Any]:
    """The folder's policy.json, or {} when it is not here or not a JSON object."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) else {}


def model_kind(folder: Path, manifest: Mapping[str, Any] | None = None) -> ModelKind:
    """What the folder holds: its manifest says (read here unless given); without one, peft's
    and transformers' own files."""
    manifest = _manifest(folder) if manifest is None else manifest
    if manifest.get("kind") == "tabular":
        return "tabular"
    if manifest.get("kind") == "lm" and manifest.get("trainer_mode") in ("full", "lora"):
        return "lora" if manifest["trainer_mode"] == "lora" else "full"
    try:
        if (folder / "adapter_config.json").is_file():
            return "lora"
        if (folder / "config.json").is_file():
            return "full"
    except OSError:
        pass
    return "unknown"
