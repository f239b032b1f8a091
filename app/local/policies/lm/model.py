"""Find and load the language model `[model] base` names, for the `lm` policy (policy.py).

`[model] base` is a local folder in Hugging Face format (config.json, weights, tokenizer), a
GGUF file (or a folder holding one; transformers dequantizes it), or a Hugging Face id already
in the local cache. `[model] chat_template` replaces the model's own template: a template TRL
ships, by name (`qwen2_5`), or a .jinja file (`chat_template_text`).
The backend does not download models unless asked: a job that starts never pulls gigabytes
by surprise. `SYNTH_TUI_MODEL_DOWNLOAD=1` (and HF_HUB_OFFLINE unset) lets it download a
missing id. Otherwise a missing model fails the job at once, with a sentence saying how to get
it. docs/embedded-policy.md#the-lm-policy.

This module imports torch and transformers only inside its functions: `app.local.policies`
must import without the trainer extra.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.config.models import FILE_NOT_FOLDER, file_in_the_way

DOWNLOAD_ENV = "SYNTH_TUI_MODEL_DOWNLOAD"
GGUF_SUFFIX = ".gguf"
TRAINER_EXTRA_HINT = "pip install 'synth-tui[trainer]'"


class ModelUnavailable(ValueError):
    """The model cannot be used here; the message says why and how to get it."""


class ModelNotDownloaded(ModelUnavailable):
    """Not in the cache, and a job would download it (SYNTH_TUI_MODEL_DOWNLOAD=1): what
    `resolve(download=False)` says instead of downloading (the model check, the loading event)."""


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


def resolve(base: str, *, download: bool = True) -> Path:
    """The folder that holds `base` (or the .gguf file it names), or ModelUnavailable. Never
    downloads unless allowed (and `download`: else ModelNotDownloaded when it would)."""
    text = base.strip()
    path = Path(text).expanduser()
    if path.is_file() and path.suffix.lower() == GGUF_SUFFIX:
        return path
    if (blocking := file_in_the_way(path)) is not None:  # the client's words (app/core/config/models.py)
        where = "" if blocking == path else f" is inside '{blocking}', which"
        raise ModelUnavailable(f"[model] base {text!r}{where} {FILE_NOT_FOLDER}: point it at a folder in Hugging "
                               "Face format or a .gguf file")
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
                               "format or a .gguf file, or name a Hugging Face model id")
    try:
        from huggingface_hub import snapshot_download
    except ImportError:
        raise ModelUnavailable(f"the trainer extra is not installed ({TRAINER_EXTRA_HINT})") from None
    try:
        return Path(snapshot_download(text, local_files_only=True))
    except Exception:  # noqa: BLE001 - any miss of the cache (not found, bad id) means "not here"
        pass
    if downloads_allowed() and not download:
        raise ModelNotDownloaded(f"the model {text!r} is not in the local Hugging Face cache: the job downloads it "
                                 f"({DOWNLOAD_ENV}=1)")
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


# [model] trainer_mode, as the lm policy reads it (lower-cased): every weight, or a LoRA adapter.
TRAINER_MODES = ("lora", "full")

# A model this large is taken for a pretrained one (the tiny random one `synth-tui tiny-model`
# writes has 140k parameters): a learning rate above PRETRAINED_MAX_LR would undo its training.
PRETRAINED_MIN_PARAMETERS = 10_000_000
PRETRAINED_MAX_LR = 1e-3
WEIGHT_SUFFIXES = (".safetensors", ".bin", GGUF_SUFFIX)
# transformers kernelizes a model with the Hub's kernels when the `kernels` package is installed
# (it comes with the trainer extra): code fetched at load, which an offline backend does not do,
# and a model kernelized again at every train/eval switch, about 60 ms each way for SmolLM2-135M
# with LoRA, paid at each of the generation loop's passes and each of TRL's micro-batches. On CPU
# no kernel applies: the logits are the same to the bit. docs/embedded-policy.md#batched-generation.
LOAD_OPTIONS: dict[str, Any] = {"use_kernels": False}


def weight_files(path: Path) -> list[Path]:
    """The files that hold the weights of what `resolve` returned (a folder or a .gguf file)."""
    if path.is_file():
        return [path]
    _, gguf_file = gguf_of(path)
    if gguf_file:
        return [path / gguf_file]
    return sorted(p for p in path.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES[:2])


def weights_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in weight_files(path))


def parameter_count(path: Path) -> int | None:
    """How many parameters the weights hold, read from the files' headers (nothing is loaded);
    None when a file does not say (a pickled .bin)."""
    total = 0
    for file in weight_files(path):
        count = _safetensors_count(file) if file.suffix == ".safetensors" else (
            _gguf_count(file) if file.suffix == GGUF_SUFFIX else None)
        if count is None:
            return None
        total += count
    return total or None


def _safetensors_count(file: Path) -> int | None:
    """A safetensors file begins with its header's length (8 bytes, little-endian) and the
    header, JSON naming each tensor's shape."""
    try:
        with open(file, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > 100 << 20:
                return None
            header = json.loads(handle.read(length))
    except (OSError, ValueError, struct.error):
        return None
    total = 0
    for name, tensor in header.items():
        if name != "__metadata__" and isinstance(tensor, dict):
            size = 1
            for dim in tensor.get("shape") or []:
                size *= int(dim)
            total += size
    return total


def _gguf_count(file: Path) -> int | None:
    try:
        from gguf import GGUFReader  # the trainer extra's GGUF reader (numpy only)

        return sum(int(tensor.n_elements) for tensor in GGUFReader(file).tensors)
    except Exception:  # noqa: BLE001 - a file gguf cannot read: its count is unknown, not fatal
        return None


def learning_rate_warning(learning_rate: float, parameters: int | None) -> str | None:
    """A sentence when a pretrained model is given a learning rate that would wreck it."""
    if parameters is None or parameters < PRETRAINED_MIN_PARAMETERS or learning_rate <= PRETRAINED_MAX_LR:
        return None
    return (f"learning_rate {learning_rate:g} is far too high for a pretrained model of {parameters / 1e6:,.0f}M "
            f"parameters: above {PRETRAINED_MAX_LR:g} its training is undone in a few steps. Set [training] "
            "learning_rate to 1e-5 to 1e-4 (a rate like 1e-2 suits only a tiny random model, such as the one "
            "`synth-tui tiny-model` writes)")


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


def gguf_of(path: Path) -> tuple[Path, str | None]:
    """(the folder transformers loads from, the GGUF file's name in it or None): `path` is
    what `resolve` returned, a folder or a .gguf file. A folder with a .gguf file and no
    config.json loads that file."""
    if path.is_file():
        return path.parent, path.name
    ggufs = sorted(path.glob(f"*{GGUF_SUFFIX}")) if not (path / "config.json").is_file() else []
    return path, ggufs[0].name if ggufs else None


def load_tokenizer(path: Path, chat_template: str | None = None) -> Any:
    """The model's tokenizer, with `[model] chat_template` in place of its own when given."""
    from transformers import AutoTokenizer

    folder, gguf_file = gguf_of(path)
    kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
    except (OSError, ValueError, ImportError, KeyError) as exc:
        raise ModelUnavailable(f"the tokenizer in {path} could not be loaded ({type(exc).__name__}: "
                               f"{str(exc)[:300]})") from None
    if chat_template:
        from app.local.policies.lm.chat_templates import chat_template_text  # it imports this module

        tokenizer.chat_template = chat_template_text(chat_template)[0]
    return tokenizer


def load(path: Path, chat_template: str | None = None) -> LoadedModel:
    """Load the model and tokenizer: CUDA in bf16 when present, else CPU float32 with torch
    using this process's cores. `path` is a folder or a .gguf file (`resolve`)."""
    import torch
    from transformers import AutoModelForCausalLM

    quiet_progress_bars()
    cuda = torch.cuda.is_available()
    if not cuda:
        torch.set_num_threads(cpu_threads())
    folder, gguf_file = gguf_of(path)
    kwargs: dict[str, Any] = {"gguf_file": gguf_file} if gguf_file else {}
    dtype = torch.bfloat16 if cuda else torch.float32
    tokenizer = load_tokenizer(path, chat_template)
    try:
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, **LOAD_OPTIONS, **kwargs)
    except (OSError, ValueError, ImportError) as exc:
        raise ModelUnavailable(f"the model in {path} could not be loaded ({type(exc).__name__}: "
                               f"{str(exc)[:300]})") from None
    if gguf_file:
        model = _trainable(model, dtype)
    device = "cuda" if cuda else "cpu"
    movable: Any = model  # transformers types `to` as taking a model; it takes a device
    movable.to(device)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return LoadedModel(model, tokenizer, folder, device, str(dtype).removeprefix("torch."), gguf_file)


def quiet_progress_bars() -> None:
    """The backend reports through its job events: no progress bar or advice on its stderr,
    which is a headless run's output and under the TUI (issue 37). transformers' own bars and
    the hub's obey their switches; the GGUF converter calls tqdm itself ("Converting and
    de-quantizing GGUF tensors"), and tqdm reads its environment only as it is imported, so it
    is given a silent tqdm."""
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as hf_logging

    from app.local.policies.transformers_compat import silence_gguf_loader_bar

    quiet: Any = hf_logging  # untyped functions
    quiet.disable_progress_bar()
    quiet.set_verbosity_error()
    disable_progress_bars()
    silence_gguf_loader_bar()


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
