"""Find and load the language model `[model] base` names, for the `lm` policy (lm.py).

`[model] base` is a local folder in Hugging Face format (config.json, weights, tokenizer; or a
GGUF file, which transformers dequantizes) or a Hugging Face id already in the local cache.
The backend does not download models unless asked: a job that starts never pulls gigabytes
by surprise. `SYNTH_TUI_MODEL_DOWNLOAD=1` (and HF_HUB_OFFLINE unset) lets it download a
missing id. Otherwise a missing model fails the job at once, with a sentence saying how to get
it. docs/embedded-policy.md#the-lm-policy.

This module imports torch and transformers only inside its functions: `app.local.policies`
must import without the trainer extra.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOWNLOAD_ENV = "SYNTH_TUI_MODEL_DOWNLOAD"
TRAINER_EXTRA_HINT = "pip install 'synth-tui[trainer]'"


class ModelUnavailable(ValueError):
    """The model cannot be used here; the message says why and how to get it."""


def downloads_allowed() -> bool:
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    return not offline and os.environ.get(DOWNLOAD_ENV, "").strip() == "1"


def _is_model_folder(folder: Path) -> bool:
    return (folder / "config.json").is_file() or any(folder.glob("*.gguf"))


# What a Hugging Face folder needs beside config.json (any one name of each kind).
WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def _missing_parts(folder: Path) -> list[str]:
    """What a folder with config.json lacks to load (weights, a tokenizer), in words; a
    GGUF folder holds both in its file."""
    if not (folder / "config.json").is_file():
        return []
    missing = []
    if not any(any(folder.glob(pattern)) for pattern in WEIGHT_PATTERNS):
        missing.append("weights (*.safetensors or *.bin)")
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        missing.append("tokenizer files (tokenizer.json, or vocab.json with tokenizer_config.json)")
    return missing


def resolve(base: str) -> Path:
    """The folder that holds `base`, or ModelUnavailable. Never downloads unless allowed."""
    text = base.strip()
    path = Path(text).expanduser()
    if path.is_dir():
        if missing := _missing_parts(path):
            raise ModelUnavailable(f"[model] base {text!r} has config.json but lacks {' and '.join(missing)}: "
                                   "copy the model's whole folder (as `hf download` saves it)")
        if _is_model_folder(path):
            return path
        raise ModelUnavailable(f"[model] base {text!r} is a folder without a model: it needs config.json with "
                               "weights and a tokenizer (Hugging Face format), or a .gguf file")
    if text.startswith(("/", "./", "../", "~")) or path.suffix == ".gguf" or text.count("/") > 1:
        raise ModelUnavailable(f"[model] base {text!r} does not exist: point it at a folder in Hugging Face "
                               "format, or name a Hugging Face model id")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ModelUnavailable(f"the trainer extra is not installed ({TRAINER_EXTRA_HINT})") from None
    try:
        return Path(snapshot_download(text, local_files_only=True))
    except Exception:  # noqa: BLE001 - any miss of the cache (not found, bad id) means "not here"
        pass
    if downloads_allowed():
        try:
            return Path(snapshot_download(text))
        except Exception as exc:  # noqa: BLE001 - network, auth, unknown id: one sentence
            raise ModelUnavailable(f"the model {text!r} could not be downloaded ({type(exc).__name__}: "
                                   f"{str(exc)[:200]})") from None
    raise ModelUnavailable(
        f"the model {text!r} is not in the local Hugging Face cache and this backend does not download "
        f"models unless asked. Get it with `hf download {text}`, or point [model] base at a folder in Hugging "
        f"Face format; or set {DOWNLOAD_ENV}=1 (and leave HF_HUB_OFFLINE unset) to let the backend download it")


@dataclass
class LoadedModel:
    model: Any  # a transformers PreTrainedModel
    tokenizer: Any
    folder: Path
    device: str
    dtype: str
    gguf_file: str | None


def cpu_threads() -> int:
    """The cores this process may use (its affinity, not the machine's count), or fewer when
    OMP_NUM_THREADS says so: the usual way to share a machine between several processes that
    each run torch (two backends, the test suite's workers) without oversubscribing its cores."""
    try:
        cores = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        cores = max(1, os.cpu_count() or 1)
    asked = os.environ.get("OMP_NUM_THREADS", "").strip()
    return min(cores, int(asked)) if asked.isdigit() and int(asked) > 0 else cores


def load(folder: Path) -> LoadedModel:
    """Load the model and tokenizer: CUDA in bf16 when present, else CPU float32 with torch
    using this process's cores. A folder with a .gguf file and no config.json loads that file."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    # The backend reports through its job events: no progress bars or advice on its stderr.
    quiet: Any = hf_logging  # untyped functions
    quiet.disable_progress_bar()
    quiet.set_verbosity_error()
    cuda = torch.cuda.is_available()
    if not cuda:
        torch.set_num_threads(cpu_threads())
    ggufs = sorted(folder.glob("*.gguf")) if not (folder / "config.json").is_file() else []
    kwargs: dict[str, Any] = {"gguf_file": ggufs[0].name} if ggufs else {}
    dtype = torch.bfloat16 if cuda else torch.float32
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **kwargs)
    except (OSError, ValueError, ImportError) as exc:
        raise ModelUnavailable(f"the model in {folder} could not be loaded ({type(exc).__name__}: "
                               f"{str(exc)[:300]})") from None
    if ggufs:
        model = _trainable(model, dtype)
    device = "cuda" if cuda else "cpu"
    movable: Any = model  # transformers types `to` as taking a model; it takes a device
    movable.to(device)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return LoadedModel(model, tokenizer, folder, device, str(dtype).removeprefix("torch."),
                       ggufs[0].name if ggufs else None)


def _trainable(model: Any, dtype: Any) -> Any:
    """A model loaded from GGUF is dequantized but still marked as GGUF-quantized, which
    transformers refuses to train or save: the same weights in a model built from the same
    config, without the mark."""
    from transformers import AutoModelForCausalLM

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    auto: Any = AutoModelForCausalLM  # from_config is untyped
    plain = auto.from_config(config, dtype=dtype)
    plain.load_state_dict(model.state_dict())
    plain.generation_config = model.generation_config
    return plain
