"""Which rollouts the inspector lists and which one it compares with: pure choices over the
summaries the backend listed (docs/product.md#rollout-inspector). No Textual here."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from app.core.runs.rollouts import rollout_steps

if TYPE_CHECKING:
    from app.core.runs.rollouts import RolloutSummary

PHASES = ("all", "train", "eval")


def next_phase(phase: str) -> str:
    return PHASES[(PHASES.index(phase) + 1) % len(PHASES)] if phase in PHASES else PHASES[0]


def steps_of(summaries: Sequence[RolloutSummary], phase: str = "all") -> list[int]:
    """The steps that have rollouts of ``phase``, ascending."""
    return rollout_steps(s for s in summaries if phase == "all" or s.phase == phase)


def step_rollouts(summaries: Sequence[RolloutSummary], step: int | None, phase: str = "all", *,
                  worst_first: bool = False) -> list[RolloutSummary]:
    """The rollouts of ``step`` (None: every step) and ``phase``, best reward first (or worst),
    then by step and index so that equal rewards keep one order."""
    chosen = [s for s in summaries if (step is None or s.step == step) and (phase == "all" or s.phase == phase)]
    chosen.sort(key=lambda s: (s.step, s.index))
    chosen.sort(key=lambda s: s.reward, reverse=not worst_first)
    return chosen


def nearest_step(steps: Sequence[int], wanted: int | None) -> int | None:
    """``wanted`` when it has rollouts, else the latest step at or before it, else the first;
    None (or no wish): the latest."""
    if not steps:
        return None
    if wanted is None:
        return steps[-1]
    before = [s for s in steps if s <= wanted]
    return before[-1] if before else steps[0]


def shifted_step(steps: Sequence[int], current: int | None, by: int) -> int | None:
    """The step ``by`` places from ``current`` among ``steps``, kept within them."""
    if not steps:
        return None
    index = steps.index(current) if current in steps else len(steps) - 1
    return steps[max(0, min(len(steps) - 1, index + by))]


def compare_partner(chosen: RolloutSummary, summaries: Sequence[RolloutSummary]) -> RolloutSummary | None:
    """The rollout to put beside ``chosen``: the same seed and phase at another step, the earliest
    one when ``chosen`` is later than it (how the policy started), else the latest (where it got
    to). None when no other step played that seed."""
    if chosen.seed is None:
        return None
    same = [s for s in summaries if s.seed == chosen.seed and s.phase == chosen.phase and s.step != chosen.step]
    if not same:
        return None
    same.sort(key=lambda s: (s.step, s.index))
    earliest, latest = same[0], same[-1]
    return earliest if earliest.step < chosen.step else latest
