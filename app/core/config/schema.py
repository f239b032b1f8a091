"""The RL config's schema (docs/wire-contract.md#config-schema): one pydantic model per TOML section, and RLConfig.

Types and required keys only; validation (app.core.config.validation) adds the SDK's other rules and
reports every problem with its line. No Textual import.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, StrictBool, model_validator

__all__ = [
    "AlgorithmSection",
    "ComputeSection",
    "EvaluationSection",
    "JudgeOptions",
    "JudgeSection",
    "LoraSection",
    "ModelSection",
    "PolicySection",
    "RLConfig",
    "RewardsSection",
    "RolloutSection",
    "ServicesSection",
    "TopologySection",
    "TrainingSection",
    "WeightSyncSection",
]


# ---------------------------------------------------------------------------------------
# Schema (docs/wire-contract.md#config-schema). Every model allows extra keys, like the SDK's ExtraModel.
# ---------------------------------------------------------------------------------------


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow", protected_namespaces=())


class AlgorithmSection(_Section):
    type: str
    method: str
    variety: str


class ServicesSection(_Section):
    # Differs from the SDK on purpose: the SDK requires task_url here (and injects
    # "placeholder" when [services] is missing), although --task-url or TASK_APP_URL usually
    # supply it. resolve_task_url() decides; the payload builder forces the final value in.
    task_url: str | None = None
    judge_url: str | None = None
    verifier_url: str | None = None  # judge_url's name from SDK 0.4.6 (docs/compatibility.md)


class TopologySection(_Section):
    type: str | None = None
    gpus_for_vllm: int | None = None
    gpus_for_training: int | None = None
    gpus_for_ref: int | None = None
    tensor_parallel: int | None = None
    reference_placement: str | None = None


class ComputeSection(_Section):
    gpu_type: str
    gpu_count: int
    nodes: int | None = None
    topology: TopologySection | None = None


class ModelSection(_Section):
    source: str | None = None
    base: str | None = None
    trainer_mode: str
    label: str
    # The embedded backend's: a template TRL ships, by name, or a .jinja file's path, in place
    # of the model's own (docs/embedded-policy.md#chat-templates).
    chat_template: str | None = None

    @model_validator(mode="after")
    def _exactly_one_of_source_or_base(self) -> ModelSection:
        if bool(self.source) == bool(self.base):
            raise ValueError("set exactly one of [model].source or [model].base")
        return self


class PolicySection(_Section):
    model_name: str | None = None
    source: str | None = None
    trainer_mode: str
    label: str
    max_tokens: int = 512
    max_prompt_tokens: int | None = None  # the embedded lm policy's bound on a chat prompt (docs/hardening.md)
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int | None = None
    repetition_penalty: float = 1.0
    stop_sequences: list[str] | None = None
    inference_url: str | None = None
    chat_template: str | None = None  # as [model] chat_template, for a [policy]-only config

    @model_validator(mode="after")
    def _exactly_one_of_model_name_or_source(self) -> PolicySection:
        if bool(self.model_name) == bool(self.source):
            raise ValueError("set exactly one of [policy].model_name or [policy].source")
        return self


class RolloutSection(_Section):
    env_name: str
    policy_name: str
    max_turns: int
    episodes_per_batch: int
    max_concurrent_rollouts: int
    batches_per_step: int | None = None
    ops: list[str] | None = None
    env_config: dict[str, Any] | None = None
    policy_config: dict[str, Any] | None = None
    # The embedded backend's (docs/wire-contract.md#answer-sizes, app/local/server/bodies.py).
    timeout_s: float | None = None
    max_answer_bytes: int | None = None
    inspect_per_step: int | None = None
    inspect_max_bytes: int | None = None


class WeightSyncSection(_Section):
    enable: bool | None = None
    targets: list[str] | None = None
    mode: str | None = None
    direct: bool | None = None
    verify_every_k: int | None = None


class LoraSection(_Section):
    r: int | None = None
    alpha: int | None = None
    dropout: float | None = None
    target_modules: list[str] | None = None


class RewardsSection(_Section):
    step_rewards_enabled: bool | None = None
    step_rewards_mode: str | None = None
    step_rewards_indicator_lambda: float | None = None
    step_rewards_beta: float | None = None
    step_rewards_strategy: str | None = None
    event_rewards_kind: str | None = None


class TrainingSection(_Section):
    num_epochs: int
    iterations_per_epoch: int
    max_turns: int
    batch_size: int
    group_size: int
    learning_rate: float
    gradient_accumulation_steps: int | None = None
    max_accumulated_minibatch: int | None = None
    log_interval: int | None = None
    weight_sync_interval: int | None = None
    # The embedded backend's: the rollouts' seed, and the lm policy's KL weight (docs/embedded-policy.md).
    seed: int | None = None
    kl_coef: float | None = None
    # The lm policy's objective, TRL's GRPOConfig fields (docs/embedded-policy.md#the-objective).
    loss_type: str | None = None
    num_iterations: int | None = None
    epsilon: float | None = None
    epsilon_high: float | None = None
    zero_std_filter: bool | None = None
    # The lm policy's memory of a step and its checkpoints (docs/embedded-policy.md#memory-of-a-step).
    micro_batch_size: int | None = None
    gradient_checkpointing: bool | None = None
    save_every: int | None = None
    # The job loop's overlap of generation and training, and its off-policy correction: TRL's
    # importance sampling (docs/embedded-policy.md#async-generation). Strict: "yes" or 1 is refused.
    async_generation: StrictBool | None = None
    importance_sampling_correction: StrictBool | None = None
    importance_sampling_cap: float | None = None
    # Flat reward fields (older configs; the nested [training.rewards] is newer).
    step_rewards_enabled: bool | None = None
    step_rewards_mode: str | None = None
    step_rewards_indicator_lambda: float | None = None
    step_rewards_beta: float | None = None
    step_rewards_strategy: str | None = None
    event_rewards_kind: str | None = None
    weight_sync: WeightSyncSection | None = None
    lora: LoraSection | None = None
    rewards: RewardsSection | None = None


class EvaluationSection(_Section):
    instances: int
    every_n_iters: int
    seeds: list[int]
    # The embedded backend: k sampled episodes per instance, scored pass@k; left out, one greedy
    # episode per instance (docs/embedded-policy.md#evaluation).
    samples: int | None = None


class JudgeOptions(_Section):
    event: bool | None = None
    outcome: bool | None = None
    provider: str | None = None
    model: str | None = None
    rubric_id: str | None = None
    rubric_overrides: dict[str, Any] | None = None
    tracks: list[str] | None = None
    weights: dict[str, float] | None = None
    max_concurrency: int | None = None


class JudgeSection(_Section):
    type: str | None = None
    timeout_s: int | None = None
    enabled: bool | None = None
    reward_blend: dict[str, float] | None = None
    rubric: dict[str, Any] | None = None
    options: JudgeOptions | None = None


class RLConfig(_Section):
    algorithm: AlgorithmSection
    services: ServicesSection | None = None
    compute: ComputeSection | None = None
    topology: TopologySection | None = None
    vllm: dict[str, Any] | None = None
    reference: dict[str, Any] | None = None
    model: ModelSection | None = None
    policy: PolicySection | None = None
    lora: dict[str, Any] | None = None
    rollout: RolloutSection | None = None
    evaluation: EvaluationSection | None = None
    training: TrainingSection | None = None
    rubric: dict[str, Any] | None = None
    judge: JudgeSection | None = None
    verifier: JudgeSection | None = None  # [judge]'s name from SDK 0.4.6, same fields
    tags: dict[str, Any] | None = None
    smoke: dict[str, Any] | None = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> RLConfig:
        return cls.model_validate(dict(data))

    def to_dict(self) -> dict[str, Any]:
        """The config as plain JSON-able data, without unset (None) values."""
        return self.model_dump(mode="json", exclude_none=True)
