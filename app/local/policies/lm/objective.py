"""The `lm` policy's objective, read from the config: the GRPOConfig fields a practitioner sets.

`[training] loss_type`, `num_iterations`, `epsilon`, `epsilon_high`, `zero_std_filter` and
`[algorithm] variety` map onto TRL's GRPOConfig (docs/embedded-policy.md#the-objective, the
table there); what the config leaves out is TRL's own default, read from GRPOConfig itself so the
policy event names the value that trains. A value the embedded backend cannot train is refused
with the list of those it can (bodies.py refuses it first on a job's payload; this is the check
for a policy made another way: a resumed job's, a data-parallel rank's).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from app.core.config.trainable import LOSS_TYPES
from app.local.policies.lm.model import ModelUnavailable

# [algorithm] variety -> GRPOConfig.importance_sampling_level. "gspo" is the SDK's one variety
# (docs/wire-contract.md#config-schema): sequence-level ratios (GSPO).
VARIETIES = {"gspo": "sequence"}


def trl_default(name: str) -> Any:
    """GRPOConfig's own default for one field (TRL's, whichever version is installed)."""
    from trl import GRPOConfig

    field = next(f for f in dataclasses.fields(GRPOConfig) if f.name == name)
    return field.default


@dataclass(frozen=True)
class Objective:
    loss_type: str
    variety: str
    importance_sampling_level: str
    num_iterations: int
    epsilon: float
    epsilon_high: float | None  # None: epsilon on both sides (TRL's)
    zero_std_filter: bool  # DAPO's dynamic sampling: groups that all scored alike carry no loss

    def grpo_arguments(self) -> dict[str, Any]:
        return {"loss_type": self.loss_type, "importance_sampling_level": self.importance_sampling_level,
                "num_iterations": self.num_iterations, "epsilon": self.epsilon, "epsilon_high": self.epsilon_high}

    def describe(self) -> dict[str, Any]:
        return {"loss_type": self.loss_type, "variety": self.variety,
                "importance_sampling_level": self.importance_sampling_level, "num_iterations": self.num_iterations,
                "epsilon": self.epsilon, "epsilon_high": self.epsilon_high, "zero_std_filter": self.zero_std_filter}


def objective_from(options: dict[str, Any]) -> Objective:
    """The objective the policy options (app/local/training/plan.py policy_options) name."""
    loss_type = str(options.get("loss_type") or trl_default("loss_type")).lower()
    if loss_type not in LOSS_TYPES:
        raise ModelUnavailable(f"[training] loss_type {loss_type!r} is not one the embedded backend trains: "
                               f"one of {', '.join(LOSS_TYPES)}")
    variety = str(options.get("variety") or "gspo").lower()
    if variety not in VARIETIES:
        raise ModelUnavailable(f"[algorithm] variety {variety!r} is not one the embedded backend trains: "
                               f"one of {', '.join(VARIETIES)}")
    iterations = int(options.get("num_iterations") or trl_default("num_iterations"))
    epsilon = options.get("epsilon")
    high = options.get("epsilon_high")
    return Objective(loss_type=loss_type, variety=variety, importance_sampling_level=VARIETIES[variety],
                     num_iterations=max(iterations, 1),
                     epsilon=float(trl_default("epsilon") if epsilon is None else epsilon),
                     epsilon_high=None if high is None else float(high),
                     zero_std_filter=bool(options.get("zero_std_filter", False)))
