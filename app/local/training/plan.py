"""The training plan: what a job trains, read from its POST /api/rl/jobs payload.

`plan_from_payload` checks a stored or posted payload (the job body's schema, bodies.py) and
`training_plan` reads what the job runner needs from it; `policy_options` is what the `lm` policy
reads from the config as written. Kept apart from the loop so the backend's routes can check a
payload without the job runner.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from app.local.server.bodies import JOB_REFUSAL, JobCreate
from app.local.training.answers import DEFAULT_MAX_ANSWER_BYTES
from app.local.training.rollout_record import DEFAULT_MAX_BYTES, DEFAULT_PER_STEP

ROLLOUT_TIMEOUT_S = 120.0
# [training] keys of the lm policy's objective (app/local/policies/lm/objective.py).
OBJECTIVE_KEYS = ("loss_type", "num_iterations", "epsilon", "epsilon_high", "zero_std_filter")
# [training] keys of generation overlapping training (app/local/policies/lm/off_policy.py).
ASYNC_KEYS = ("async_generation", "importance_sampling_correction", "importance_sampling_cap")
DEFAULT_MAX_CONCURRENT = 8


class InvalidJobPayload(ValueError):
    """The POST /rl/jobs body cannot be trained; the message says what to fix."""


# The seeds a job without [evaluation] is evaluated on, greedily, at step 0 and after its last
# step: few, as a real model's episode can take a minute on a CPU (docs/embedded-policy.md#evaluation).
DEFAULT_EVAL_SEEDS = (0, 1, 2, 3)


@dataclass(frozen=True)
class TrainingPlan:
    task_url: str
    model: str
    epochs: int
    iterations_per_epoch: int
    batch_size: int
    group_size: int
    learning_rate: float
    max_turns: int
    max_concurrent: int
    env_name: str
    policy_name: str
    ops: tuple[str, ...]
    rollout_timeout_s: float = ROLLOUT_TIMEOUT_S
    eval_seeds: tuple[int, ...] = ()
    eval_instances: int = 0
    eval_every: int = 0
    save_every: int = 1  # [training] save_every: steps between two checkpoints; the last step is saved
    # [training] async_generation: the next step's rollouts play while this step's update runs, one
    # step off-policy (steps.py `_train_ahead`; docs/embedded-policy.md#async-generation).
    async_generation: bool = False
    eval_samples: int = 0  # [evaluation] samples: k sampled episodes per instance (pass@k); 0: one greedy each
    eval_by_default: bool = False  # no [evaluation]: DEFAULT_EVAL_SEEDS at step 0 and after the last step
    seed: int | None = None
    # What the inspector keeps (rollout_record.py): train rollouts per step, bytes per job.
    inspect_per_step: int = DEFAULT_PER_STEP
    inspect_max_bytes: int = DEFAULT_MAX_BYTES
    # The most of one /rollout answer read (app/local/training/answers.py): a larger one fails the job.
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
    # What the `lm` policy reads from the config as written (policy_options): trainer_mode,
    # kl_coef, the objective, lora, temperature, top_p, max_tokens. The stand-in ignores them.
    policy_options: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def total_steps(self) -> int:
        return self.epochs * self.iterations_per_epoch

    def save_due(self, step: int) -> bool:
        """A checkpoint after `step`: every `save_every` steps, the last one, and one with an
        evaluation after it (docs/embedded-policy.md#checkpoints)."""
        return step % self.save_every == 0 or step == self.total_steps or self.eval_due(step)

    def eval_due(self, step: int) -> bool:
        if not self.eval_instances:
            return False
        return step == self.total_steps or bool(self.eval_every and step % self.eval_every == 0)


def plan_from_payload(body: Any) -> TrainingPlan:
    """Check a job payload (docs/wire-contract.md#job-creation; app.local.server.bodies.JobCreate, as
    POST /api/rl/jobs does) and read what training needs from it: a stored job's, on resume."""
    try:
        job = JobCreate.model_validate(body)
    except ValidationError as exc:
        raise InvalidJobPayload(JOB_REFUSAL.detail(exc.errors(), from_fastapi=False)) from None
    return training_plan(job, body["data"]["config"])


def training_plan(job: JobCreate, config: dict[str, Any]) -> TrainingPlan:
    """What training needs from a checked job payload; `config` is its data.config as sent."""
    data = job.data
    rollout, training, evaluation = data.config.rollout, data.config.training, data.config.evaluation
    return TrainingPlan(
        task_url=data.endpoint_base_url.rstrip("/"),
        model=data.model_name,
        epochs=training.num_epochs,
        iterations_per_epoch=training.iterations_per_epoch,
        batch_size=training.batch_size,
        group_size=training.group_size,
        learning_rate=float(training.learning_rate),
        max_turns=training.max_turns,
        max_concurrent=rollout.max_concurrent_rollouts or DEFAULT_MAX_CONCURRENT,
        env_name=str(rollout.env_name or "default"),
        policy_name=str(rollout.policy_name or "policy"),
        ops=tuple(rollout.ops or ("agent", "env")),
        rollout_timeout_s=float(rollout.timeout_s or ROLLOUT_TIMEOUT_S),
        max_answer_bytes=int(rollout.max_answer_bytes or DEFAULT_MAX_ANSWER_BYTES),
        # Without [evaluation] a job still has its baseline and its end, on a few fixed seeds
        # (docs/embedded-policy.md#evaluation): a score with nothing to compare it with says little.
        eval_seeds=tuple(evaluation.seeds) if evaluation else DEFAULT_EVAL_SEEDS,
        eval_instances=evaluation.instances if evaluation else len(DEFAULT_EVAL_SEEDS),
        eval_every=evaluation.every_n_iters if evaluation else 0,
        save_every=int(training.save_every or 1),
        async_generation=training.async_generation is True,
        eval_samples=(evaluation.samples or 0) if evaluation else 0,
        eval_by_default=evaluation is None,
        seed=training.seed,
        inspect_per_step=rollout.inspect_per_step,
        inspect_max_bytes=rollout.inspect_max_bytes,
        policy_options=policy_options(config),
    )


def policy_options(config: dict[str, Any]) -> dict[str, Any]:
    """The options of the `lm` policy, from the config as written (docs/embedded-policy.md#the-lm-policy):
    [model] (or [policy]) trainer_mode and chat_template; [training] kl_coef, micro_batch_size,
    gradient_checkpointing, async_generation with its importance sampling (ASYNC_KEYS), and the
    objective (loss_type, num_iterations, epsilon, epsilon_high,
    zero_std_filter; [algorithm] variety: docs/embedded-policy.md#the-objective); [training.lora]
    (or the older top-level [lora]) r, alpha, dropout, target_modules; [policy] temperature, top_p,
    max_tokens, max_prompt_tokens."""
    def table(value: Any) -> dict[str, Any]:
        return value if isinstance(value, dict) else {}

    model, policy, training = table(config.get("model")), table(config.get("policy")), table(config.get("training"))
    algorithm = table(config.get("algorithm"))
    lora = table(training.get("lora")) or table(config.get("lora"))
    options: dict[str, Any] = {
        "trainer_mode": model.get("trainer_mode") or policy.get("trainer_mode"),
        "chat_template": model.get("chat_template") or policy.get("chat_template"),
        "kl_coef": training.get("kl_coef"),
        **{key: training.get(key) for key in OBJECTIVE_KEYS}, "variety": algorithm.get("variety"),
        "micro_batch_size": training.get("micro_batch_size"),
        "gradient_checkpointing": training.get("gradient_checkpointing"),
        **{key: training.get(key) for key in ASYNC_KEYS},
        "lora": {k: lora.get(k) for k in ("r", "alpha", "dropout", "target_modules") if lora.get(k) is not None},
        "temperature": policy.get("temperature"), "top_p": policy.get("top_p"), "max_tokens": policy.get("max_tokens"),
        "max_prompt_tokens": policy.get("max_prompt_tokens"),
    }
    return {k: v for k, v in options.items() if v is not None}

