"""The key facts of a valid RL config (model, algorithm, task URL, compute, sizes), in the
order the config picker's preview pane shows them. No Textual import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.core.config.models import normalize_model_id
from app.core.config.schema import ModelSection, PolicySection, RLConfig, TrainingSection
from app.core.redact import redact_url

__all__ = ["config_facts"]


# ---------------------------------------------------------------------------------------
# Key facts for the picker's preview pane
# ---------------------------------------------------------------------------------------


def _model_fact(config: RLConfig) -> str | None:
    choices: list[tuple[Any, str, str]] = [
        (config.model, "base", "[model].base"),
        (config.model, "source", "[model].source"),
        (config.policy, "model_name", "[policy].model_name"),
        (config.policy, "source", "[policy].source"),
    ]
    for section, attribute, label in choices:
        value = getattr(section, attribute, None) if section is not None else None
        if value:
            return f"{normalize_model_id(value)} ({label})"
    return None


def _fine_tune_fact(config: RLConfig) -> str | None:
    section: ModelSection | PolicySection | None = config.model or config.policy
    if section is None:
        return None
    return f"{section.trainer_mode}, label {section.label}"


def _topology_fact(config: RLConfig) -> str | None:
    topology = config.topology or (config.compute.topology if config.compute else None)
    if topology is None:
        return None
    parts = [
        f"{label} {value}"
        for label, value in (
            ("vllm", topology.gpus_for_vllm),
            ("training", topology.gpus_for_training),
            ("ref", topology.gpus_for_ref),
            ("tp", topology.tensor_parallel),
        )
        if value is not None
    ]
    name = topology.type or "topology"
    return f"{name}: {', '.join(parts)}" if parts else name


def _training_fact(training: TrainingSection) -> str:
    return (
        f"epochs {training.num_epochs} x {training.iterations_per_epoch} iters, "
        f"batch {training.batch_size}, group {training.group_size}, lr {training.learning_rate:g}"
    )


def _task_url_fact(config: RLConfig) -> str:
    url = config.services.task_url if config.services else None
    if not url or not url.strip() or url.strip().lower() == "placeholder":
        return "(not set: pass --task-url or set TASK_APP_URL)"
    return redact_url(url.strip())  # a user:pass@ in it is refused at submit, and never shown


def config_facts(config: RLConfig) -> dict[str, str]:
    """Ordered, short key facts (model, algorithm, task URL, compute, sizes) for a preview."""
    algorithm = config.algorithm
    candidates: list[tuple[str, Callable[[], str | None]]] = [
        ("model", lambda: _model_fact(config)),
        ("fine-tune", lambda: _fine_tune_fact(config)),
        ("algorithm", lambda: f"{algorithm.type}/{algorithm.method}/{algorithm.variety}"),
        ("task URL", lambda: _task_url_fact(config)),
        ("compute", lambda: f"{config.compute.gpu_type} x {config.compute.gpu_count}" if config.compute else None),
        ("topology", lambda: _topology_fact(config)),
        ("training", lambda: _training_fact(config.training) if config.training else None),
        (
            "rollout",
            lambda: (
                f"{config.rollout.env_name} / {config.rollout.policy_name}, max_turns {config.rollout.max_turns}"
                if config.rollout
                else None
            ),
        ),
        (
            "evaluation",
            lambda: (
                f"{len(config.evaluation.seeds)} seeds every {config.evaluation.every_n_iters} iters"
                if config.evaluation
                else None
            ),
        ),
    ]
    facts: dict[str, str] = {}
    for name, compute_fact in candidates:
        value = compute_fact()
        if value:
            facts[name] = value
    return facts
