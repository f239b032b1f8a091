"""The body of `POST /rl/jobs` and its task URL (docs/wire-contract.md#job-creation, #task-url).

Takes a validated RLConfig (app.core.config.rl) and produces exactly the SDK's payload shape,
with the SDK's defects fixed where noted.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Literal

from app.core import shell_env
from app.core.config.models import check_rl_model, experimental_allowed, unsupported_algorithm_message
from app.core.config.schema import RLConfig
from app.core.errors import ConfigError

TaskUrlSource = Literal["flag", "env", "config"]

# What the SDK's validator injects when [services] is missing; some example configs also
# carry it literally. It is never a real address.
PLACEHOLDER_TASK_URL = "placeholder"

TASK_URL_REQUIRED = "Task app URL required (provide --task-url or set services.task_url in TOML)"
TASK_URL_HINT = "pass --task-url URL, set TASK_APP_URL in your .env, or set [services].task_url in the config"


def usable_url(value: str | None) -> str | None:
    cleaned = (value or "").strip()
    if not cleaned or cleaned.lower() == PLACEHOLDER_TASK_URL:
        return None
    return cleaned


def resolve_task_url(
    *,
    cli_task_url: str | None,
    env_task_url: str | None,
    config_task_url: str | None,
) -> tuple[str, TaskUrlSource]:
    """The task app URL and where it came from: --task-url > TASK_APP_URL > [services].task_url.

    # Differs from the SDK on purpose: the SDK lets the validator's "placeholder" through
    # as the task URL and only fails later at verification. Placeholder and blank values do
    # not count here, so the user gets the clear "Task app URL required" error instead.
    """
    sources: tuple[tuple[str | None, TaskUrlSource], ...] = (
        (cli_task_url, "flag"),
        (env_task_url, "env"),
        (config_task_url, "config"),
    )
    for value, source in sources:
        url = usable_url(value)
        if url:
            return url, source
    raise ConfigError(TASK_URL_REQUIRED, hint=TASK_URL_HINT)


def _model_fields(config_dict: dict[str, Any]) -> tuple[str, str, str]:
    """(section, key, value) of the model the job trains: [model] first, then [policy]."""
    model = config_dict.get("model") or {}
    if model.get("base"):
        return "model", "base", model["base"]
    if model.get("source"):
        return "model", "source", model["source"]
    # Differs from the SDK on purpose: the SDK reads only [model], so [policy]-only configs
    # (the documented "new format") always failed without --model. We read [policy] too.
    policy = config_dict.get("policy") or {}
    if policy.get("model_name"):
        return "policy", "model_name", policy["model_name"]
    if policy.get("source"):
        return "policy", "source", policy["source"]
    raise ConfigError(
        "Invalid model config: exactly one of [model].source or [model].base is required.",
        hint="set [model].base (e.g. Qwen/Qwen3-4B) or [policy].model_name, or pass --model",
    )


def _apply_model_override(config_dict: dict[str, Any], override: str) -> None:
    """Make data.config agree with --model: the override is the source, the base is gone.

    # Differs from the SDK on purpose: the SDK sends data.model=<override> while
    # data.config still names the old base, so the backend got two different models.
    """
    section = "policy" if config_dict.get("policy") and not config_dict.get("model") else "model"
    block = config_dict.setdefault(section, {})
    block.pop("base" if section == "model" else "model_name", None)
    block["source"] = override


def _inject_defaults(config_dict: dict[str, Any], task_url: str) -> None:
    """The SDK's injections: forced services.task_url, reference placements default to none."""
    config_dict.pop("smoke", None)
    services = config_dict.get("services") or {}
    services["task_url"] = task_url
    config_dict["services"] = services
    compute = config_dict.setdefault("compute", {})
    topology = compute.get("topology") or {}
    topology.setdefault("reference_placement", "none")
    compute["topology"] = topology
    reference = config_dict.get("reference") or {}
    reference.setdefault("placement", "none")
    config_dict["reference"] = reference


def _check_algorithm(config_dict: dict[str, Any]) -> None:
    algorithm = config_dict.get("algorithm") or {}
    message = unsupported_algorithm_message(
        algorithm.get("type"), algorithm.get("method"), algorithm.get("variety")
    )
    if message:
        raise ConfigError(message, hint='use type = "online", method = "policy_gradient", variety = "gspo"')


def build_rl_payload(
    config: RLConfig,
    *,
    task_url: str,
    backend_base: str,
    model_override: str | None = None,
    allow_experimental: bool | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The JSON body for `POST /rl/jobs`. Raises ConfigError for a bad model or algorithm."""
    final_url = (task_url or "").strip()
    if not final_url:
        raise ConfigError(TASK_URL_REQUIRED, hint=TASK_URL_HINT)
    environ = shell_env.given_or_shell(env)
    allowed = experimental_allowed(allow_experimental, environ)
    config_dict = copy.deepcopy(config.to_dict())
    _check_algorithm(config_dict)

    data: dict[str, Any] = {"endpoint_base_url": final_url.rstrip("/")}
    override = (model_override or "").strip()
    if override:
        data["model"] = check_rl_model(override, allow_experimental=allowed, env=environ)
        _apply_model_override(config_dict, data["model"])
    else:
        section, key, model_id = _model_fields(config_dict)
        is_base = key in ("base", "model_name")
        checked = check_rl_model(
            model_id, allow_experimental=allowed, env=environ, allow_fine_tuned=not is_base
        )
        data["base_model" if is_base else "model"] = checked

    _inject_defaults(config_dict, final_url)
    data["config"] = config_dict
    return {
        "job_type": "rl",
        "compute": copy.deepcopy(config_dict["compute"]),
        "data": _ordered_data(data),
        "tags": {"source": "train-cli"},
        "metadata": {"backend_base_url": backend_base},
    }


# Names the backend generations give the same settings (docs/compatibility.md): 0.2 backends
# read [judge] and services.judge_url, SDK 0.4.6 and later [verifier] and services.verifier_url.
_NAMES_BY_GENERATION = {"0.2": ("judge", "judge_url"), "0.5": ("verifier", "verifier_url")}


def for_backend(payload: Mapping[str, Any], generations: frozenset[str]) -> dict[str, Any]:
    """The payload under the names a backend of ``generations`` reads. A backend that names
    one generation gets that one's names; one that names both, or says nothing, gets the
    config as written (it was written for that backend)."""
    renamed: dict[str, Any] = copy.deepcopy(dict(payload))
    if len(generations) != 1:
        return renamed
    (generation,) = generations
    section, url = _NAMES_BY_GENERATION[generation]
    other_section, other_url = next(v for k, v in _NAMES_BY_GENERATION.items() if k != generation)
    config = (renamed.get("data") or {}).get("config")
    if not isinstance(config, dict):
        return renamed
    if other_section in config and section not in config:
        config[section] = config.pop(other_section)
    services = config.get("services")
    if isinstance(services, dict) and other_url in services and url not in services:
        services[url] = services.pop(other_url)
    return renamed


def _ordered_data(data: dict[str, Any]) -> dict[str, Any]:
    """Key order as the SDK prints it: endpoint, config, then the model."""
    order = ("endpoint_base_url", "config", "base_model", "model")
    return {key: data[key] for key in order if key in data}
