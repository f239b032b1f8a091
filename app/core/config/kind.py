"""What kind of training config a parsed TOML is: RL, SFT, prompt learning or unknown.

The SDK's `_infer_config_type` (docs/wire-contract.md#config-kind), first match wins. Discovery uses it to keep RL
configs, validation to say plainly when a file is some other kind. No Textual import.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["ConfigKind", "infer_config_type", "lower_text"]

ConfigKind = Literal["rl", "sft", "prompt_learning", "unknown"]


# ---------------------------------------------------------------------------------------
# What kind of config is this (docs/wire-contract.md#config-kind, first match wins)
# ---------------------------------------------------------------------------------------

_PROMPT_LEARNING_ALGORITHMS = frozenset({"mipro", "gepa"})
_RL_METHODS = frozenset({"policy_gradient", "ppo", "reinforce"})
_RL_VARIETIES = frozenset({"gspo", "grpo", "ppo"})
_SFT_METHODS = frozenset({"supervised_finetune", "sft"})


def lower_text(value: object) -> str:
    """str(value), trimmed and lower-cased; None (or any other falsy value) becomes ""."""
    return str(value or "").strip().lower()


def _infer_from_algorithm(algorithm: Mapping[str, Any]) -> ConfigKind | None:
    method, algo_type, variety = (lower_text(algorithm.get(k)) for k in ("method", "type", "variety"))
    if method in _RL_METHODS or algo_type == "online" or variety in _RL_VARIETIES:
        return "rl"
    if method in _SFT_METHODS or algo_type == "offline" or variety == "fft":
        return "sft"
    return None


def infer_config_type(data: Mapping[str, Any]) -> ConfigKind:
    """The SDK's `_infer_config_type`. A top-level `type = "rl"` is deliberately not read."""
    if not isinstance(data, Mapping):
        return "unknown"
    prompt_learning = data.get("prompt_learning")
    if isinstance(prompt_learning, Mapping):
        if lower_text(prompt_learning.get("algorithm")) in _PROMPT_LEARNING_ALGORITHMS:
            return "prompt_learning"
    algorithm = data.get("algorithm")
    if isinstance(algorithm, str) and lower_text(algorithm) in _PROMPT_LEARNING_ALGORITHMS:
        return "prompt_learning"
    if isinstance(algorithm, Mapping):
        kind = _infer_from_algorithm(algorithm)
        if kind:
            return kind
    if data.get("job_type") == "rl":
        return "rl"
    services = data.get("services")
    if isinstance(services, Mapping) and ("task_url" in services or "environment" in services):
        return "rl"
    training = data.get("training")
    if isinstance(training, Mapping) and lower_text(training.get("mode")).startswith("sft"):
        return "sft"
    hyperparameters = data.get("hyperparameters")
    if isinstance(hyperparameters, Mapping) and lower_text(hyperparameters.get("train_kind")) in {"sft", "fft"}:
        return "sft"
    return "unknown"
