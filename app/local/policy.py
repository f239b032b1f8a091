"""The policy the embedded backend trains in place of an LLM: a tabular softmax.

Observation → state key. A task app may put a compact state in its user message:

    state: pos=<x>,<y> goal=<x>,<y> blocked=<dir>,<dir>

(x = column, y = row, row 0 at the top, `blocked` = directions a wall or the edge stops).
The key keeps only what generalises across layouts: the sign of the goal's offset on each
axis and which goal-ward moves are blocked, e.g. `goal=+x-y blocked=right`. So one small
table (a few dozen rows) learns "walk towards the goal, go round what is in the way" on
every seed, including eval seeds it never trained on. Any other observation is keyed by a
hash of its whole text, which still works for small discrete tasks.

The update is REINFORCE with group-relative advantages (GRPO/GSPO style) and a small
entropy bonus: without it the table collapses onto one of two equally good moves and a
memoryless policy can then loop forever around a wall.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.local.action_space import ActionSpace

DEFAULT_ACTIONS = ("up", "down", "left", "right")
_STATE = re.compile(r"pos=(\d+),(\d+)\s+goal=(\d+),(\d+)(?:\s+blocked=([a-z,]*))?")
_AXES = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}

# An LLM learning rate such as 5e-5 would not move a table of logits: it is scaled by this.
LR_SCALE = 200_000.0
ENTROPY_COEF = 0.1


def state_key(observation: str) -> str:
    match = _STATE.search(observation)
    if match is None:
        digest = hashlib.sha1(observation_features(observation).encode("utf-8")).hexdigest()[:16]
        return f"text:{digest}"
    x, y, gx, gy = (int(v) for v in match.groups()[:4])
    blocked = set(filter(None, (match.group(5) or "").split(",")))
    sx, sy = (gx > x) - (gx < x), (gy > y) - (gy < y)
    towards = [d for d, (dx, dy) in _AXES.items() if (dx and dx == sx) or (dy and dy == sy)]
    stuck = ",".join(d for d in towards if d in blocked) or "-"
    return f"goal={_sign(sx)}x{_sign(sy)}y blocked={stuck}"


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


def _sign(v: int) -> str:
    return "+" if v > 0 else "-" if v < 0 else "0"


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


@dataclass
class Episode:
    decisions: list[Decision]
    score: float
    advantage: float = 0.0
    turns: int | None = None  # as the task app counted them (metrics.num_steps), if it did


@dataclass
class UpdateStats:
    loss: float
    entropy: float
    states: int


@dataclass
class TabularPolicy:
    table: dict[str, dict[str, float]] = field(default_factory=dict)

    def probs(self, key: str, actions: Sequence[str], prior_key: str | None = None) -> list[float]:
        row = self.table.get(key, {})
        prior = self.table.get(prior_key, {}) if prior_key else {}
        return softmax([row.get(a, 0.0) + prior.get(a, 0.0) for a in actions])

    def sample(self, key: str, actions: Sequence[str], rng: random.Random, prior_key: str | None = None) -> str:
        return rng.choices(list(actions), weights=self.probs(key, actions, prior_key))[0]

    def update(self, episodes: list[Episode], lr: float) -> UpdateStats:
        """One policy-gradient step on a batch sampled from this very policy (on-policy)."""
        grads: dict[str, dict[str, float]] = {}
        loss = entropy = 0.0
        steps = 0
        for ep in episodes:
            for d in ep.decisions:
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
        return UpdateStats(loss=loss / n, entropy=entropy / max(steps, 1), states=len(self.table))

    def to_json(self) -> dict[str, Any]:
        return {"kind": "tabular-softmax", "table": self.table}

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> TabularPolicy:
        return cls(table=dict((data or {}).get("table", {})))


def group_advantages(episodes: list[Episode], eps: float = 1e-6) -> None:
    """Score minus the group mean, over the group's std: a group that all failed (or all
    succeeded equally) teaches nothing, as in GRPO."""
    scores = [e.score for e in episodes]
    mean = sum(scores) / len(scores)
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    for e in episodes:
        e.advantage = (e.score - mean) / (std + eps)


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
