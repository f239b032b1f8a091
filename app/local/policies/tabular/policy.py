"""The `tabular` policy: a softmax table that stands in for the language model.

It does not train the model the config names (it says so in the job's events and metadata:
docs/embedded-policy.md); it is the demo's fast default and knows no particular task app.

Observation → state key. The observation is the latest thing the task app said (the last user
or tool message, base.latest_observation), so feedback in a tool result is part of the state.
A task app may put a compact state on a line of its own:

    state: <anything>

and then the key is that line, verbatim: the task app chooses what matters (the gridworld
says which way the goal is and which of those moves are blocked, so its table generalises
across layouts). Any other observation is keyed by a digest of its task-independent features
(observation_features), with a row shared by all such states added to the state's own.

The update is REINFORCE with group-relative advantages (GRPO/GSPO style) and a small entropy
bonus: without it the table collapses onto one of two equally good moves and a memoryless
policy can then loop forever around a wall.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from app.local.policies.base import (
    MANIFEST,
    Act,
    Episode,
    PolicyCannotAct,
    PolicyInfo,
    PolicySettings,
    UpdateStats,
    group_advantages,
    latest_observation,
    read_manifest,
    write_json_atomically,
)
from app.local.policies.tabular.action_space import (
    TEXT_ANSWER,
    ActionSpace,
    UnsupportedSchema,
    choose_tool,
    compile_tool,
)

_STATE_LINE = re.compile(r"^\s*state:[ \t]*(\S.*)$", re.MULTILINE)

# An LLM learning rate such as 5e-5 would not move a table of logits: it is scaled by this.
LR_SCALE = 200_000.0
ENTROPY_COEF = 0.1


def state_key(observation: str) -> str:
    """The table's key for an observation: its compact `state:` line verbatim when it has one
    (the task app chose what matters), else a digest of its task-independent features."""
    match = _STATE_LINE.search(observation)
    if match is not None:
        return "state:" + " ".join(match.group(1).split())
    digest = hashlib.sha1(observation_features(observation).encode("utf-8")).hexdigest()[:16]
    return f"text:{digest}"


def is_generic(key: str) -> bool:
    """A key made from free text (not the compact state line): learned with a prior row."""
    return key.startswith("text:")


# Lines that change at every turn without saying anything about the state: counters, clocks
# and the echo of earlier actions. Without dropping them no state would ever repeat.
_VOLATILE_LINE = re.compile(
    r"^\W*(step|turn|t|time|timestamp|elapsed|remaining|history|previous|recent|last|past)\b", re.IGNORECASE)
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?")
_LONG_NUMBER = re.compile(r"\d{2,}(\.\d+)?|\d\.\d+")


def observation_features(observation: str) -> str:
    """The task-independent part of an observation: volatile lines dropped, timestamps and
    numbers of two or more digits (counters, ids) blanked; single digits (small counts, such
    as an inventory's) are kept because they often are the state."""
    lines = [line for line in observation.splitlines() if not _VOLATILE_LINE.match(line)]
    text = _TIMESTAMP.sub("<time>", "\n".join(lines))
    return " ".join(_LONG_NUMBER.sub("#", text).split())


def softmax(logits: Sequence[float]) -> list[float]:
    top = max(logits)
    exps = [math.exp(v - top) for v in logits]
    total = sum(exps)
    return [e / total for e in exps]


@dataclass
class Decision:
    key: str
    actions: tuple[str, ...]
    action: str
    # A row shared by every state (per tool argument): what is learned there helps in states
    # never seen again, which is most of them for a task app we know nothing about.
    prior_key: str | None = None


UNSUPPORTED_HINT = ("It acts by choosing from finite sets (enums, booleans, bounded numbers, arrays of those); "
                    "see docs/embedded-policy.md")


@dataclass
class TabularPolicy:
    """The stand-in (base.Policy). Memos are lists of Decision."""

    kind: ClassVar[str] = "tabular"
    label: ClassVar[str] = "tabular stand-in"
    table: dict[str, dict[str, float]] = field(default_factory=dict)
    settings: PolicySettings | None = None

    def describe(self) -> PolicyInfo:
        model = self.settings.model if self.settings else "the model"
        lr = self.settings.learning_rate if self.settings else 0.0
        return PolicyInfo(
            kind=self.kind, label=self.label, stand_in=True,
            message=(f"The embedded backend trains the tabular stand-in, a small softmax table, IN PLACE OF "
                     f"{model} (that model is not loaded); learning_rate {lr:g} is scaled x{LR_SCALE:g} to "
                     f"{lr * LR_SCALE:g} for the table's logits"),
            data={"policy": self.kind, "label": self.label, "stand_in": True, "model": model,
                  "learning_rate": lr, "effective_learning_rate": lr * LR_SCALE})

    # -- the seam ---------------------------------------------------------------------------

    def act(self, messages: Sequence[dict[str, Any]], tools: Sequence[Any] | None, tool_choice: Any,
            correlation_id: str, rng: random.Random) -> Act:
        try:
            tool = choose_tool(list(tools or []), tool_choice)
            space = compile_tool(tool) if tool is not None else TEXT_ANSWER
        except UnsupportedSchema as exc:
            raise PolicyCannotAct(f"{exc}. {UNSUPPORTED_HINT}") from None
        arguments, decisions = choose(self, latest_observation(messages), space, rng)
        call_id = f"call_{secrets.token_hex(8)}"
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if space is not TEXT_ANSWER:
            message["tool_calls"] = [{"id": call_id, "type": "function",
                                      "function": {"name": space.tool, "arguments": json.dumps(arguments)}}]
        else:
            message["content"] = str(arguments.get("content", ""))
        return Act(message, call_id, decisions)

    def update(self, groups: list[list[Episode]]) -> UpdateStats:
        lr = (self.settings.learning_rate if self.settings else 1.0) * LR_SCALE
        for group in groups:
            group_advantages(group)
        episodes = [e for group in groups for e in group]
        stats = self.step(episodes, lr)
        stats.extra["policy_states"] = len(self.table)
        return stats

    def save(self, folder: Path) -> None:
        write_json_atomically(folder / MANIFEST, self.to_json())

    def load(self, folder: Path) -> None:
        self.table = dict(read_manifest(folder).get("table", {}))

    def close(self) -> None:
        pass

    # -- the table --------------------------------------------------------------------------

    def probs(self, key: str, actions: Sequence[str], prior_key: str | None = None) -> list[float]:
        row = self.table.get(key, {})
        prior = self.table.get(prior_key, {}) if prior_key else {}
        return softmax([row.get(a, 0.0) + prior.get(a, 0.0) for a in actions])

    def sample(self, key: str, actions: Sequence[str], rng: random.Random, prior_key: str | None = None) -> str:
        return rng.choices(list(actions), weights=self.probs(key, actions, prior_key))[0]

    def step(self, episodes: list[Episode], lr: float) -> UpdateStats:
        """One policy-gradient step on a batch sampled from this very policy (on-policy);
        each episode's memos are lists of Decision and its advantage is set."""
        grads: dict[str, dict[str, float]] = {}
        loss = entropy = 0.0
        steps = 0
        for ep in episodes:
            for d in (d for memo in ep.memos for d in memo):
                p = self.probs(d.key, d.actions, d.prior_key)
                h = -sum(q * math.log(q) for q in p if q > 0)
                loss -= ep.advantage * math.log(max(p[d.actions.index(d.action)], 1e-12))
                entropy += h
                steps += 1
                rows = [grads.setdefault(d.key, {})]
                if d.prior_key:
                    rows.append(grads.setdefault(d.prior_key, {}))
                for a, q in zip(d.actions, p, strict=True):
                    pg = ep.advantage * ((a == d.action) - q)
                    bonus = ENTROPY_COEF * (-q * (math.log(q) + h)) if q > 0 else 0.0
                    for g in rows:
                        g[a] = g.get(a, 0.0) + pg + bonus
        n = max(len(episodes), 1)
        for key, g in grads.items():
            row = self.table.setdefault(key, {})
            for a, v in g.items():
                row[a] = row.get(a, 0.0) + lr * v / n
        return UpdateStats(loss=loss / n, entropy=entropy / max(steps, 1))

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "table": self.table}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> TabularPolicy:
        return cls(table=dict((data or {}).get("table", {})))


def choose(policy: TabularPolicy, observation: str, space: ActionSpace,
           rng: random.Random) -> tuple[dict[str, Any], list[Decision]]:
    """One composite action: a pick per slot of the tool's action space, each sampled from
    the policy's row for (state, slot). Returns the tool call's arguments and the decisions
    that show in them (array elements past the chosen length are not learned from)."""
    state = state_key(observation)
    shared = is_generic(state)
    picks, decisions = [], []
    for slot in space.slots:
        where = f"{space.tool}.{slot.name}"
        prior = f"*|{where}" if shared else None
        label = policy.sample(f"{state}|{where}", slot.labels, rng, prior)
        picks.append(slot.labels.index(label))
        decisions.append(Decision(f"{state}|{where}", slot.labels, label, prior))
    return space.build(picks), [decisions[i] for i in space.used_slots(picks)]
