"""Which models and algorithms an RL job may use (docs/wire-contract.md#models).

The rules copy the SDK's allow-lists (`synth_ai/api/models/supported.py` and
`synth_ai/api/train/supported_algos.py`): ids match case-insensitively, fine-tuned ids must
name a supported base as one `:`-separated segment, and experimental models are blocked
unless the user opts in. Every failure is a ConfigError with a hint, never a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from app.core import shell_env
from app.core.errors import ConfigError

# Every Qwen3 base the service knows (SFT and/or RL). An id outside this catalogue is
# "not supported"; an id inside it but outside RL_CAPABLE_MODELS "does not support RL".
QWEN3_MODELS: tuple[str, ...] = (
    "Qwen/Qwen3-0.6B",
    "Qwen/Qwen3-1.7B",
    "Qwen/Qwen3-4B",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-14B",
    "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-32B",
    "Qwen/Qwen3-4B-2507",
    "Qwen/Qwen3-4B-Instruct-2507",
    "Qwen/Qwen3-4B-Instruct-2507-FP8",
    "Qwen/Qwen3-30B-A3B-Instruct-2507",
    "Qwen/Qwen3-30B-A3B-Instruct-2507-FP8",
    "Qwen/Qwen3-235B-A22B-Instruct-2507",
    "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8",
    "Qwen/Qwen3-4B-Thinking-2507",
    "Qwen/Qwen3-4B-Thinking-2507-FP8",
    "Qwen/Qwen3-30B-A3B-Thinking-2507",
    "Qwen/Qwen3-30B-A3B-Thinking-2507-FP8",
    "Qwen/Qwen3-235B-A22B-Thinking-2507",
    "Qwen/Qwen3-235B-A22B-Thinking-2507-FP8",
    "Qwen/Qwen3-Coder-30B-A3B-Instruct",
    "Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8",
    "Qwen/Qwen3-Coder-480B-A35B-Instruct",
    "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8",
    "Qwen/Qwen3-VL-2B-Instruct",
    "Qwen/Qwen3-VL-2B-Thinking",
    "Qwen/Qwen3-VL-4B-Instruct",
    "Qwen/Qwen3-VL-4B-Thinking",
    "Qwen/Qwen3-VL-8B-Instruct",
    "Qwen/Qwen3-VL-8B-Thinking",
    "Qwen/Qwen3-VL-30B-A3B-Instruct",
    "Qwen/Qwen3-VL-30B-A3B-Thinking",
    "Qwen/Qwen3-VL-32B-Instruct",
    "Qwen/Qwen3-VL-32B-Thinking",
    "Qwen/Qwen3-VL-235B-A22B-Instruct",
    "Qwen/Qwen3-VL-235B-A22B-Thinking",
)

# The bases that accept online policy_gradient / gspo jobs (docs/wire-contract.md#models).
RL_CAPABLE_MODELS: tuple[str, ...] = (
    "Qwen/Qwen3-0.6B",
    "Qwen/Qwen3-1.7B",
    "Qwen/Qwen3-4B",
    "Qwen/Qwen3-8B",
    "Qwen/Qwen3-14B",
    "Qwen/Qwen3-30B-A3B",
    "Qwen/Qwen3-4B-2507",
    "Qwen/Qwen3-4B-Instruct-2507",
    "Qwen/Qwen3-4B-Instruct-2507-FP8",
    "Qwen/Qwen3-30B-A3B-Instruct-2507",
    "Qwen/Qwen3-30B-A3B-Instruct-2507-FP8",
    "Qwen/Qwen3-4B-Thinking-2507",
    "Qwen/Qwen3-4B-Thinking-2507-FP8",
    "Qwen/Qwen3-30B-A3B-Thinking-2507",
    "Qwen/Qwen3-30B-A3B-Thinking-2507-FP8",
    "Qwen/Qwen3-Coder-30B-A3B-Instruct",
    "Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8",
    "Qwen/Qwen3-VL-2B-Instruct",
    "Qwen/Qwen3-VL-2B-Thinking",
    "Qwen/Qwen3-VL-4B-Instruct",
    "Qwen/Qwen3-VL-4B-Thinking",
    "Qwen/Qwen3-VL-8B-Instruct",
    "Qwen/Qwen3-VL-8B-Thinking",
)

# Blocked unless --allow-experimental / SDK_EXPERIMENTAL=1: the 235B/480B models and every
# *-Thinking-2507* variant. SDK_EXPERIMENTAL_MODELS can add more ids.
DEFAULT_EXPERIMENTAL_MODELS: tuple[str, ...] = (
    "Qwen/Qwen3-235B-A22B-Instruct-2507",
    "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8",
    "Qwen/Qwen3-235B-A22B-Thinking-2507",
    "Qwen/Qwen3-235B-A22B-Thinking-2507-FP8",
    "Qwen/Qwen3-Coder-480B-A35B-Instruct",
    "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8",
    "Qwen/Qwen3-4B-Thinking-2507",
    "Qwen/Qwen3-4B-Thinking-2507-FP8",
    "Qwen/Qwen3-30B-A3B-Thinking-2507",
    "Qwen/Qwen3-30B-A3B-Thinking-2507-FP8",
)

FINE_TUNED_PREFIXES: tuple[str, ...] = ("ft:", "fft:", "qft:", "rl:")

EXPERIMENTAL_HINT = "pass --allow-experimental or set SDK_EXPERIMENTAL=1"

_CANONICAL_BY_LOWER: dict[str, str] = {model.lower(): model for model in QWEN3_MODELS}
_RL_CAPABLE_LOWER: frozenset[str] = frozenset(model.lower() for model in RL_CAPABLE_MODELS)

# The only RL algorithm triple the SDK accepts (supported_algos.py), compared lower-cased.
SUPPORTED_RL_ALGORITHM: tuple[str, str, str] = ("online", "policy_gradient", "gspo")
RL_ALGORITHM_LABEL = "online policy_gradient / gspo"


def _canonical_base(candidate: str) -> str | None:
    return _CANONICAL_BY_LOWER.get(candidate.strip().lower())


def _has_fine_tuned_prefix(model_id: str) -> bool:
    return model_id.lower().startswith(FINE_TUNED_PREFIXES)


def _base_segment_index(segments: list[str]) -> int | None:
    """Index of the first segment after the prefix that is a supported base id."""
    for index, segment in enumerate(segments[1:], start=1):
        if _canonical_base(segment):
            return index
    return None


def normalize_model_id(model_id: str) -> str:
    """Canonical spelling of a model id; unknown ids come back stripped but unchanged.

    A fine-tuned id keeps its prefix and job suffix; only its base segment is re-cased.
    # Differs from the SDK on purpose: the SDK sends fine-tuned ids exactly as typed, so
    # `rl:qwen/qwen3-4b:job_1` reached the backend lower-cased. We canonicalise the base part.
    """
    cleaned = (model_id or "").strip()
    canonical = _canonical_base(cleaned)
    if canonical:
        return canonical
    if not _has_fine_tuned_prefix(cleaned):
        return cleaned
    segments = cleaned.split(":")
    index = _base_segment_index(segments)
    if index is None:
        return cleaned
    segments[index] = _canonical_base(segments[index]) or segments[index]
    return ":".join(segments)


def base_model_of(model_id: str, *, allow_fine_tuned: bool = True) -> str | None:
    """The canonical base a model id stands on, or None when it is not supported."""
    cleaned = (model_id or "").strip()
    canonical = _canonical_base(cleaned)
    if canonical or not allow_fine_tuned:
        return canonical
    if not _has_fine_tuned_prefix(cleaned):
        return None
    segments = cleaned.split(":")
    index = _base_segment_index(segments)
    return None if index is None else _canonical_base(segments[index])


def experimental_allowed(flag: bool | None, env: Mapping[str, str] | None = None) -> bool:
    """The --allow-experimental flag wins; without it, SDK_EXPERIMENTAL == "1" decides."""
    if flag is not None:
        return flag
    environ = shell_env.given_or_shell(env)
    return environ.get("SDK_EXPERIMENTAL", "").strip() == "1"


def experimental_models(env: Mapping[str, str] | None = None) -> frozenset[str]:
    """Lower-cased experimental ids: the defaults plus SDK_EXPERIMENTAL_MODELS.

    """
    # Differs from the SDK on purpose: the SDK reads SDK_EXPERIMENTAL_MODELS once at import
    # time; we read it per call so a changed environment (or a test) takes effect.
    environ = shell_env.given_or_shell(env)
    extra = environ.get("SDK_EXPERIMENTAL_MODELS", "")
    added = {item.strip().lower() for item in extra.split(",") if item.strip()}
    return frozenset({model.lower() for model in DEFAULT_EXPERIMENTAL_MODELS} | added)


LOCAL_PATH_PREFIXES = ("/", "./", "../", "~")


def _why_not_a_model_folder(path: str) -> str:
    try:
        folder = Path(path).expanduser()
        if not folder.exists():
            return "does not exist"
        if not folder.is_dir():
            return "is not a folder"
    except (OSError, ValueError, RuntimeError) as exc:
        return f"cannot be read ({exc.__class__.__name__})"
    return "holds no model (no config.json and no .gguf file)"


def is_local_model_folder(model_id: str) -> bool:
    """A path to a folder holding a model in Hugging Face format (config.json) or a .gguf file."""
    if not model_id.startswith(LOCAL_PATH_PREFIXES):
        return False
    try:
        folder = Path(model_id).expanduser()
        return folder.is_dir() and ((folder / "config.json").is_file() or any(folder.glob("*.gguf")))
    except (OSError, ValueError, RuntimeError):
        return False


def check_rl_model(
    model_id: str,
    *,
    allow_experimental: bool,
    env: Mapping[str, str] | None = None,
    allow_fine_tuned: bool = True,
) -> str:
    """Return the canonical id of a model an RL job may use, or raise ConfigError.

    Order of checks as in the SDK: supported at all, then the experimental gate, then
    RL capability. `allow_fine_tuned=False` is for `[model].base`, which (as in the SDK)
    must be a plain base id.
    """
    cleaned = (model_id or "").strip()
    if not cleaned:
        raise ConfigError(
            "Model identifier is empty",
            hint="set a base model such as Qwen/Qwen3-4B",
        )
    if is_local_model_folder(cleaned):
        # Differs from the SDK on purpose: the embedded backend trains a model from a folder of
        # this machine (docs/embedded-policy.md#the-lm-policy); the hosted service refuses it.
        return cleaned
    if cleaned.startswith(LOCAL_PATH_PREFIXES):
        why = _why_not_a_model_folder(cleaned)
        # A folder not made yet: say how to make one (a relative path is read from where this runs).
        make = ("; to try the trainer without the hub, `synth-tui tiny-model DIR` writes a tiny one, or "
                "`hf download Qwen/Qwen3-0.6B --local-dir DIR` fetches a real one" if why == "does not exist" else "")
        raise ConfigError(f"Model folder '{cleaned}' {why}.",
                          hint="point [model] base at a folder in Hugging Face format (config.json, "
                               f"the weights and the tokenizer files) or a .gguf file's folder{make}")
    base = base_model_of(cleaned, allow_fine_tuned=allow_fine_tuned)
    if base is None:
        raise ConfigError(
            f"Model '{cleaned}' is not supported.", hint=_unsupported_hint(cleaned, allow_fine_tuned)
        )
    if base.lower() in experimental_models(env) and not allow_experimental:
        raise ConfigError(f"Model '{base}' is experimental and disabled.", hint=EXPERIMENTAL_HINT)
    if base.lower() not in _RL_CAPABLE_LOWER:
        raise ConfigError(
            f"Model '{cleaned}' does not support {RL_ALGORITHM_LABEL} workloads "
            "(missing training mode 'rl').",
            hint="RL-capable models: " + ", ".join(RL_CAPABLE_MODELS),
        )
    return normalize_model_id(cleaned)


def _unsupported_hint(model_id: str, allow_fine_tuned: bool) -> str:
    if not allow_fine_tuned and _has_fine_tuned_prefix(model_id):
        return "a base model id is expected here; put fine-tuned ids in `source` instead"
    return (
        "use a supported base such as Qwen/Qwen3-4B, or a fine-tuned id that names one, "
        "e.g. rl:Qwen/Qwen3-4B:<job id>"
    )


def unsupported_algorithm_message(algo_type: object, method: object, variety: object) -> str | None:
    """None for the one supported RL triple, else the SDK-style explanation."""
    triple = tuple(_normalise_algorithm_value(value) for value in (algo_type, method, variety))
    if triple == SUPPORTED_RL_ALGORITHM:
        return None
    got_type, got_method, got_variety = triple
    want_type, want_method, want_variety = SUPPORTED_RL_ALGORITHM
    return (
        f"Unsupported algorithm configuration: type={got_type!r}, method={got_method!r}, "
        f"variety={got_variety!r}. Supported combinations are: type='{want_type}', "
        f"method='{want_method}', variety='{want_variety}'"
    )


def _normalise_algorithm_value(value: object) -> str:
    return "" if value is None else str(value).strip().lower()
