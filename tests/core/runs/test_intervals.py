"""An evaluation's 95 % interval and its change from step 0 (app/core/runs/intervals.py): Wilson
for 0/1 rewards, a seeded percentile bootstrap otherwise, MOVER for the change; the readouts,
compare rows, the export and the final line that show them."""

from __future__ import annotations

import pytest

from app.core.api.wire import MetricPoint
from app.core.runs.compare import ComparedRun, compare_rows
from app.core.runs.intervals import Interval, bootstrap, change, change_words, mean_interval, point_interval, wilson
from app.core.runs.series import MetricStore, baseline_change
from widgets.metric_chart import format_readouts


def test_wilson_matches_the_published_values():
    # Newcombe (1998), Table I: 81/263 -> 0.2553-0.3662; 15/148 -> 0.0624-0.1605; 0/20 -> 0-0.1611.
    assert wilson(81, 263) == pytest.approx((0.2553, 0.3662), abs=5e-5)
    assert wilson(15, 148) == pytest.approx((0.0624, 0.1605), abs=5e-5)
    assert wilson(0, 20) == pytest.approx((0.0, 0.1611), abs=5e-5)
    assert wilson(20, 20) == pytest.approx((0.8389, 1.0), abs=5e-5)


def test_the_change_of_two_proportions_is_newcombes_interval():
    # Newcombe (1998), Table II, example (a): 56/70 - 48/80 = 0.2, method 10: 0.0524 to 0.3339.
    first, last = 48 / 80, 56 / 70
    lo1, hi1 = wilson(48, 80)
    lo2, hi2 = wilson(56, 70)
    moved = change(first, Interval(lo1, hi1, "wilson"), last, Interval(lo2, hi2, "wilson"))
    assert moved.delta == pytest.approx(0.2)
    assert (moved.low, moved.high) == pytest.approx((0.0524, 0.3339), abs=5e-5)


def test_0_1_rewards_take_wilson_and_others_a_seeded_bootstrap():
    binary = mean_interval([1, 0, 1, 1, 0, 1, 1, 1, 0, 1])
    assert binary is not None and binary.method == "wilson"
    assert (binary.low, binary.high) == pytest.approx(wilson(7, 10))
    rewards = [0.1, 0.5, 0.9, 0.95, 0.3, 0.7, 0.0, 1.0]
    spread = mean_interval(rewards)
    assert spread is not None and spread.method == "bootstrap"
    assert spread == mean_interval(rewards)  # the same rewards, the same interval: the seed is fixed
    assert spread.low < sum(rewards) / len(rewards) < spread.high
    # The percentile bootstrap of a constant is the constant; of two values, within them.
    assert bootstrap([0.5, 0.5, 0.5]) == (0.5, 0.5)
    low, high = bootstrap([0.25, 0.75] * 50)
    assert 0.4 < low < 0.5 < high < 0.6
    assert mean_interval([]) is None


def test_a_point_carries_its_interval_or_none():
    assert point_interval({"ci95": [0.2, 0.6], "ci_method": "wilson"}) == Interval(0.2, 0.6, "wilson")
    for data in ({}, {"ci95": "0.2-0.6"}, {"ci95": [0.6, 0.2]}, {"ci95": [0.1]}, {"ci95": [True, 1]},
                 {"ci95": [float("nan"), 1.0]}):
        assert point_interval(data) is None  # a hosted point without one, or a malformed one


def _evals(*points: tuple[int, float, list[float] | None]) -> MetricStore:
    store = MetricStore()
    store.add(MetricPoint(name="eval.mean_score", step=step, value=value, phase="eval",
                          data={"ci95": ci} if ci else {}) for step, value, ci in points)
    return store


def test_the_final_line_says_the_change_from_step_0_with_its_interval():
    store = _evals((0, 0.31, [0.25, 0.37]), (8, 0.5, None), (16, 0.92, [0.86, 0.98]))
    # MOVER: low 0.61 - hypot(0.06, 0.06), high 0.61 + hypot(0.06, 0.06): +/- 0.0849
    assert baseline_change(store) == "eval 0.31 -> 0.92, +0.61 +/- 0.08"
    assert change_words("eval", change(0.5, None, 0.25, None)) == "eval 0.50 -> 0.25, -0.25"
    # Without an interval (the hosted service), the change alone; without a step-0 evaluation, nothing.
    assert baseline_change(_evals((0, 0.31, None), (16, 0.92, None))) == "eval 0.31 -> 0.92, +0.61"
    assert baseline_change(_evals((4, 0.31, [0.2, 0.4]), (16, 0.92, [0.8, 1.0]))) is None
    assert baseline_change(_evals((0, 0.31, [0.2, 0.4]))) is None


def test_readouts_compare_rows_and_the_export_rows_carry_the_last_interval():
    store = _evals((0, 0.25, [0.1, 0.4]), (4, 0.75, [0.6, 0.8]))
    readouts = store.get("eval.mean_score").readouts()
    assert format_readouts(readouts, full=False) == "last 0.7500 ±0.1000  best 0.7500  step 4"
    assert readouts.interval == Interval(0.6, 0.8, "")
    row = next(r for r in compare_rows([ComparedRun("job_a", store)]))
    assert row.interval == Interval(0.6, 0.8, "")
    assert store.rows() == [("eval.mean_score", 0, 0.25, Interval(0.1, 0.4, "")),
                            ("eval.mean_score", 4, 0.75, Interval(0.6, 0.8, ""))]
    plain = MetricStore()
    plain.add([MetricPoint(name="train.loss", step=1, value=0.5)])
    assert format_readouts(plain.get("train.loss").readouts(), full=False) == "last 0.5000  min 0.5000  step 1"


def test_a_saved_runs_eval_summaries_keep_their_interval():
    from app.core.api.wire import JobEvent
    from app.core.runs.saved_run import metrics_from_events

    events = [JobEvent.model_validate({"seq": 1, "type": "rl.eval.summary", "message": "Eval at step 0",
                                       "data": {"step": 0, "mean_score": 0.25, "ci95": [0.1, 0.4]}}),
              JobEvent.model_validate({"seq": 2, "type": "rl.train.step", "message": "Step 1",
                                       "data": {"step": 1, "mean_score": 0.5}})]
    store = MetricStore()
    store.add(metrics_from_events(events))
    assert store.rows() == [("eval.mean_score", 0, 0.25, Interval(0.1, 0.4, "")),
                            ("train.mean_score", 1, 0.5, None)]
