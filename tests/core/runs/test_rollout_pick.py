"""The inspector's choices: which rollouts a step lists, in which order, and the same-seed partner."""

from __future__ import annotations

from app.core.runs.rollout_pick import compare_partner, nearest_step, next_phase, shifted_step, step_rollouts, steps_of
from app.core.runs.rollouts import RolloutSummary


def summary(rollout_id: str, step: int, reward: float, *, phase: str = "train", seed: int | None = 1,
            index: int = 0) -> RolloutSummary:
    return RolloutSummary(rollout_id=rollout_id, step=step, phase=phase, index=index, seed=seed, reward=reward, turns=3)


ROLLOUTS = [
    summary("a", 1, 0.1, index=0), summary("b", 1, 0.9, index=1), summary("c", 1, 0.1, index=2),
    summary("e1", 4, 0.2, phase="eval", seed=7), summary("e2", 8, 0.8, phase="eval", seed=7),
    summary("e3", 12, 0.95, phase="eval", seed=7), summary("d", 12, 0.5, seed=3),
]


def test_a_step_lists_best_first_or_worst_first_with_ties_in_index_order():
    assert [s.rollout_id for s in step_rollouts(ROLLOUTS, 1)] == ["b", "a", "c"]
    assert [s.rollout_id for s in step_rollouts(ROLLOUTS, 1, worst_first=True)] == ["a", "c", "b"]
    assert [s.rollout_id for s in step_rollouts(ROLLOUTS, 12, "eval")] == ["e3"]
    assert [s.rollout_id for s in step_rollouts(ROLLOUTS, None, "eval")] == ["e3", "e2", "e1"]


def test_steps_move_within_those_that_have_rollouts():
    assert steps_of(ROLLOUTS) == [1, 4, 8, 12]
    assert steps_of(ROLLOUTS, "train") == [1, 12]
    assert nearest_step([1, 4, 8], None) == 8
    assert nearest_step([1, 4, 8], 6) == 4
    assert nearest_step([4, 8], 2) == 4
    assert nearest_step([], 3) is None
    assert shifted_step([1, 4, 8], 4, 1) == 8
    assert shifted_step([1, 4, 8], 8, 1) == 8
    assert shifted_step([1, 4, 8], 1, -1) == 1
    assert shifted_step([1, 4, 8], None, -1) == 4
    assert [next_phase(p) for p in ("all", "train", "eval", "odd")] == ["train", "eval", "all", "all"]


def test_the_partner_is_the_same_seed_at_the_first_step_or_from_the_first_the_last():
    late, early, middle = ROLLOUTS[5], ROLLOUTS[3], ROLLOUTS[4]
    assert compare_partner(late, ROLLOUTS) == early
    assert compare_partner(early, ROLLOUTS) == late
    assert compare_partner(middle, ROLLOUTS) == early
    assert compare_partner(ROLLOUTS[6], ROLLOUTS) is None  # seed 3 was played at one step only
    assert compare_partner(summary("x", 2, 0.0, seed=None), ROLLOUTS) is None
