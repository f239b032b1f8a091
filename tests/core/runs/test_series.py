"""Metric series: default metric choice, incremental smoothing, downsampling, history."""

from __future__ import annotations

import math

import pytest

from app.core.api.wire import MetricPoint
from app.core.runs.history import RunHistory
from app.core.runs.series import MetricSeries, MetricStore, default_metric, downsample, shown_number, window


def test_default_metric_prefers_gepa_then_mean_scores():
    assert default_metric(["train.loss", "eval.mean_score", "train.mean_score"]) == "train.mean_score"
    assert default_metric(["train.loss", "gepa.transformation.mean_score", "train.mean_score"]) == \
        "gepa.transformation.mean_score"
    assert default_metric(["train.loss", "eval.reward_mean"]) == "eval.reward_mean"
    assert default_metric(["train.loss", "custom.reward"]) == "custom.reward"
    assert default_metric(["train.loss"]) == "train.loss"
    assert default_metric([]) is None


def test_smoothing_is_incremental_and_matches_a_full_recompute():
    series = MetricSeries("train.mean_score")
    values = [math.sin(i / 3) for i in range(50)]
    for step, value in enumerate(values):
        series.add(step, value)
    ema = values[0]
    for value in values:
        ema = ema + 0.2 * (value - ema)
    assert math.isclose(series.ema[-1], ema)
    assert math.isclose(series.moving[-1], sum(values[-10:]) / 10)


def test_late_point_is_inserted_in_order_and_smoothing_recomputed():
    series = MetricSeries("x")
    for step in (0, 1, 3):
        series.add(step, float(step))
    series.add(2, 2.0)
    assert list(series.steps) == [0, 1, 2, 3]
    assert math.isclose(series.moving[-1], 1.5)


def test_readouts_best_depends_on_direction():
    score, loss = MetricSeries("train.mean_score"), MetricSeries("train.loss")
    for step, value in enumerate([0.5, 0.9, 0.7]):
        score.add(step, value, now=float(step))
        loss.add(step, value, now=float(step))
    assert score.readouts().best == 0.9 and loss.readouts().best == 0.5
    assert score.readouts().last == 0.7 and score.readouts().step == 2
    assert math.isclose(score.readouts().steps_per_minute, 60.0)


def test_points_arriving_together_without_times_have_no_rate():
    """A saved run read back: its points carry no time and arrive at once. Their arrival times
    would make millions of steps a minute; no rate is shown instead."""
    store = MetricStore()
    store.add([MetricPoint(name="train.mean_score", step=step, value=0.1) for step in range(30)])
    assert store.get("train.mean_score").readouts().steps_per_minute is None


def test_the_backends_times_and_arrival_times_are_never_mixed():
    series = MetricSeries("train.mean_score")
    series.add(0, 0.1, now=1_767_225_600.0)  # the backend's clock (epoch seconds)
    series.add(1, 0.2)  # no time: this process's monotonic clock
    series.add(2, 0.3)
    assert series.readouts().steps_per_minute is None


def test_downsample_keeps_extremes_and_bounds_points():
    series = MetricSeries("x")
    for step in range(100_000):
        series.add(step, 1.0 if step == 54_321 else 0.0)
    xs, ys = downsample(series.steps, series.values, 100)
    assert len(xs) == len(ys) <= 200
    assert max(ys) == 1.0, "a single spike must survive downsampling"
    series.add(100_000, 0.0)  # the array can still grow after a downsample
    start = window(series.steps, 100)
    xs, _ = downsample(series.steps, series.values, 100, start)
    assert xs[0] >= 99_901


def test_store_tracks_changed_names():
    store = MetricStore()
    changed = store.add([MetricPoint(name="a", step=0, value=1.0), MetricPoint(name="b", step=0, value=None)])
    assert changed == {"a"} and store.names() == ["a"]


def test_run_history_roundtrip(tmp_path):
    history = RunHistory(tmp_path / "h.sqlite")
    history.record_submission(job_id="job_1", backend="http://b/api", config_path="/c.toml",
                              payload={"job_type": "rl"}, idempotency_key="k1")
    history.record_submission(job_id="job_1", backend="other", config_path=None, payload=None,
                              idempotency_key="k2")  # a replay keeps the first record
    history.record_progress("job_1", status="running", last_metrics={"train.mean_score": 0.5})
    history.record_progress("job_1", status="succeeded", final=True)
    history.record_submission(job_id="job_2", backend="http://b/api", config_path=None, payload=None,
                              idempotency_key=None)
    record = history.get("job_1")
    assert record.backend == "http://b/api" and record.idempotency_key == "k1"
    assert record.payload == {"job_type": "rl"} and record.final_status == "succeeded"
    assert record.last_metrics == {"train.mean_score": 0.5}
    assert [r.job_id for r in history.list()] == ["job_2", "job_1"]


def test_train_and_eval_of_a_measure_share_a_panel_led_by_the_default_metric():
    from app.core.runs.series import chart_panels

    panels = chart_panels(["train.loss", "eval.mean_score", "train.entropy", "train.mean_score"])
    assert [(p.key, p.series) for p in panels] == [
        ("mean_score", ("train.mean_score", "eval.mean_score")),
        ("loss", ("train.loss",)),
        ("entropy", ("train.entropy",)),
    ]
    assert chart_panels(["train.loss", "train.mean_score"], preferred="train.loss")[0].key == "loss"
    assert [p.key for p in chart_panels(["gepa.transformation.mean_score", "x"])] == [
        "gepa.transformation.mean_score", "x"]


def test_a_sparkline_places_points_by_step_and_shares_a_scale():
    from app.core.runs.series import SPARK_LEVELS, sparkline

    assert sparkline([0, 1, 2, 3], [0.0, 1.0, 2.0, 3.0], 4) == "▁▃▆█"
    # A sparse series over a longer span: blank before its first point, held between points.
    assert sparkline([2, 4], [1.0, 1.0], 5, span=(0, 4), scale=(0.0, 2.0)) == "  ▅▅▅"
    assert sparkline([0, 1], [5.0, 5.0], 3) == SPARK_LEVELS[3] * 3  # flat: a middle line
    assert sparkline([], [], 10) == ""
    assert len(sparkline(list(range(1000)), [float(v) for v in range(1000)], 40)) == 40


def test_a_sparkline_leaves_the_steps_a_series_has_not_reached_blank():
    """A run cancelled at step 8 of 16, or a live one at step 4, covers only its columns:
    nothing after its last point repeats it to the edge."""
    from app.core.runs.series import sparkline

    cancelled = sparkline(list(range(1, 9)), [float(v) for v in range(1, 9)], 16, span=(1, 16))
    assert len(cancelled) == 16
    assert cancelled[:8].strip() == cancelled[:8] and cancelled[8:] == " " * 8
    live = sparkline([1, 2, 3, 4], [0.1, 0.2, 0.3, 0.4], 16, span=(1, 16))
    assert live[:4] == live[:4].strip() and live[5:] == " " * 11
    # Between two points of a sparse series (an eval every few steps) the row still holds.
    assert sparkline([1, 5], [1.0, 1.0], 9, span=(1, 9), scale=(0.0, 2.0)) == "▅" * 5 + " " * 4


def test_a_score_reads_best_and_any_other_measure_min():
    for name, label, best in (("train.mean_score", "best", 0.9), ("eval.reward_mean", "best", 0.9),
                              ("train.loss", "min", 0.5), ("train.entropy", "min", 0.5), ("train.kl", "min", 0.5)):
        series = MetricSeries(name)
        for step, value in enumerate([0.5, 0.9, 0.7]):
            series.add(step, value, now=float(step))
        readouts = series.readouts()
        assert (readouts.best_label, readouts.best) == (label, best), name


@pytest.mark.parametrize(("value", "shown"), [(-2.24e-08, "-2.24e-08"), (0.000999, "9.99e-04"), (0.001, "0.0010"),
                                              (0.5, "0.5000"), (0.0, "0.0000"), (-0.0, "0.0000"),
                                              (123456.0, "1.23e+05")])
def test_small_numbers_are_shown_in_scientific_notation(value, shown):
    assert shown_number(value) == shown
