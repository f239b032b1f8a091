"""Which models and algorithms an RL job may use (docs/wire-contract.md#models).

The rules copy the SDK's allow-lists (`synth_ai/api/models/supported.py` and
`synth_ai/api/train/supported_algos.py`): ids match case-insensitively, fine-tuned ids must
name a supported base as one `:`-separated segment, and experimental models are blocked
unless the user opts in. Every failure is a ConfigError with a hint, never a traceback.

That list is the hosted service's. Any other Hugging Face id and a model on this machine pass
here and are judged by the backend the job goes to, at verification (its model check, or this
list for a backend without one: app/core/launch/service.py `check_model`).
"""

from __future__ import annotations

import re
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
GGUF_SUFFIX = ".gguf"
JINJA_SUFFIX = ".jinja"

# A Hugging Face repo id: owner/name, letters, digits, "-", "_" and ".", neither "--" nor ".."
# inside, "-" and "." not at either end, at most 96 characters a part (the hub's own rules).
_HUB_PART = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?$")


class ModelNotMadeYet(ConfigError):
    """A local model path that does not exist (yet): a step to take before the config can run,
    not a mistake in it (docs/wire-contract.md#models). The message names the step."""


def is_hub_id(model_id: str) -> bool:
    """``owner/name`` as the Hugging Face hub spells a model: any backend that loads models from
    the hub (the embedded one) may train it; the hosted service trains only its list."""
    parts = model_id.split("/")
    return (len(parts) == 2 and all(_HUB_PART.match(part) for part in parts)
            and "--" not in model_id and ".." not in model_id)


def file_in_the_way(place: Path) -> Path | None:
    """The file that `place` is, or that stands where one of its folders should be (`a.txt/model`),
    or None. Such a base is "a file, not a model folder" on both sides (docs/hardening.md#8)."""
    for candidate in (place, *place.parents):
        try:
            if candidate.is_file():
                return candidate
            if candidate.exists():
                return None
        except (OSError, ValueError):
            return None
    return None


FILE_NOT_FOLDER = "is a file, not a model folder (nor a .gguf file)"


def _why_not_a_model(path: str) -> str:
    try:
        place = Path(path).expanduser()
        if (blocking := file_in_the_way(place)) is not None:
            return FILE_NOT_FOLDER if blocking == place else f"is inside '{blocking}', which {FILE_NOT_FOLDER}"
        if not place.exists():
            return "does not exist"
    except (OSError, ValueError, RuntimeError) as exc:
        return f"cannot be read ({exc.__class__.__name__})"
    return "holds no model (no config.json and no .gguf file)"


def is_local_model(model_id: str) -> bool:
    """A path to a model on this machine: a folder in Hugging Face format (config.json), a
    folder holding a .gguf file, or a .gguf file."""
    if not model_id.startswith(LOCAL_PATH_PREFIXES):
        return False
    try:
        place = Path(model_id).expanduser()
        if place.is_file():
            return place.suffix.lower() == GGUF_SUFFIX
        return place.is_dir() and ((place / "config.json").is_file() or any(place.glob(f"*{GGUF_SUFFIX}")))
    except (OSError, ValueError, RuntimeError):
        return False


def _local_model_problem(path: str) -> ConfigError:
    """Why a path is not a model here: a path that does not exist is a step to take (make the
    model there); one that exists and holds no model is wrong."""
    why = _why_not_a_model(path)
    is_file = path.lower().endswith(GGUF_SUFFIX)
    noun = "Model file" if is_file else "Model" if why.startswith(("is a file", "is inside")) else "Model folder"
    if why != "does not exist":
        return ConfigError(f"{noun} '{path}' {why}.",
                           hint="point [model] base at a folder in Hugging Face format (config.json, the weights and "
                                "the tokenizer files), a .gguf file, or a folder holding one")
    if is_file:
        return ModelNotMadeYet(f"{noun} '{path}' does not exist yet.",
                               hint="put the .gguf file there first (README: Train a language model fetches "
                                    "SmolLM2-135M's); a relative path is read from where the backend runs")
    folder = path.removeprefix("./")
    return ModelNotMadeYet(f"{noun} '{path}' does not exist yet.",
                           hint=f"make it first: `synth-tui tiny-model {folder}` writes a tiny random model there "
                                "(to try the lm policy); a real model is its own folder, a .gguf file or a Hugging Face"
                                " id in base (README: Train a language model); a relative path is read from where "
                                "the backend runs")


def template_path_problem(spec: str) -> str | None:
    """What is wrong with a `chat_template` that is a path (of a .jinja file), or None; a name
    (`qwen2_5`) is the backend's to look up among TRL's templates."""
    if not (spec.startswith(LOCAL_PATH_PREFIXES) or spec.endswith(JINJA_SUFFIX) or "/" in spec):
        return None
    if not spec.endswith(JINJA_SUFFIX):  # the backend renders no other file of its machine
        return f"'{spec}' is not a {JINJA_SUFFIX} file"
    try:
        place = Path(spec).expanduser()
        if place.is_file():
            return None
        return f"'{spec}' {'is not a file' if place.exists() else 'does not exist'}"
    except (OSError, ValueError, RuntimeError) as exc:
        return f"'{spec}' cannot be read ({exc.__class__.__name__})"


def check_rl_model(
    model_id: str,
    *,
    allow_experimental: bool,
    env: Mapping[str, str] | None = None,
    allow_fine_tuned: bool = True,
    hosted: bool = False,
) -> str:
    """Return the canonical id of a model an RL job may use, or raise ConfigError.

    An id on the hosted service's list keeps its rules everywhere, in the SDK's order:
    supported at all, then the experimental gate, then RL capability. `allow_fine_tuned=False`
    is for `[model].base`, which (as in the SDK) must be a plain base id. Any other Hugging
    Face id (owner/name) and a model on this machine (a folder or a .gguf file) pass: the
    backend judges them at verification (its model check; the hosted service's list when it
    has none). `hosted=True` is that list alone: the check for a backend without a model check.
    """
    cleaned = (model_id or "").strip()
    if not cleaned:
        raise ConfigError(
            "Model identifier is empty",
            hint="set a base model such as Qwen/Qwen3-4B",
        )
    if not hosted and cleaned.startswith(LOCAL_PATH_PREFIXES):
        # Differs from the SDK on purpose: the embedded backend trains a model from a folder or
        # file of this machine (docs/embedded-policy.md#the-lm-policy); the hosted service refuses it.
        if is_local_model(cleaned):
            return cleaned
        raise _local_model_problem(cleaned)
    base = base_model_of(cleaned, allow_fine_tuned=allow_fine_tuned)
    if base is None:
        if not hosted and is_hub_id(cleaned):
            return cleaned  # judged by the backend's model check (docs/wire-contract.md#model-verification)
        raise ConfigError(
            f"Model '{cleaned}' is not supported{' by the hosted service' if hosted else ''}.",
            hint=_unsupported_hint(cleaned, allow_fine_tuned, hosted),
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


def _unsupported_hint(model_id: str, allow_fine_tuned: bool, hosted: bool) -> str:
    if not allow_fine_tuned and _has_fine_tuned_prefix(model_id):
        return "a base model id is expected here; put fine-tuned ids in `source` instead"
    hint = ("use a supported base such as Qwen/Qwen3-4B, or a fine-tuned id that names one, "
            "e.g. rl:Qwen/Qwen3-4B:<job id>")
    if hosted:
        return (f"{hint}; any other model (a Hugging Face id, a folder or a .gguf file) trains on the embedded "
                "backend: --backend local, or `synth-tui backend`")
    return f"{hint}; or, for the embedded backend, a Hugging Face id (owner/name), a folder or a .gguf file"


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
