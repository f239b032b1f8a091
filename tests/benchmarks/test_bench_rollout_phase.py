"""The rollout-phase benchmark's reading of a job's events into its figures
(benchmarks/bench_rollout_phase.py, issue 40's done-when). Nothing here is timed."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.bench_rollout_phase import phase_figures


def _event(kind: str, message: str = "", **data: Any) -> dict[str, Any]:
    return {"seq": 0, "type": kind, "message": message, "data": data}


def _step(step: int, rollout_seconds: float, sampled: float) -> dict[str, Any]:
    return _event("rl.train.step", f"Step {step}/2", step=step, rollout_seconds=rollout_seconds,
                  step_seconds=4.5, sampled_tokens=sampled, turns=16, mean_score=0.25)


def test_the_warm_steps_rollout_phase_and_its_sampled_tokens_per_second() -> None:
    events = [_event("rl.job.started"), _step(1, 40.0, 99.0), _step(2, 20.0, 50.0),
              _event("rl.job.completed", "done", steps=2, retries=0)]

    figures = phase_figures(events)

    assert figures["rollout_seconds"] == 20.0  # step 2's, not step 1's (the grammar's compile)
    assert figures["sampled_tokens"] == 50.0
    assert figures["sampled_per_s"] == pytest.approx(2.5)
    assert (figures["turns"], figures["step_seconds"], figures["mean_score"]) == (16, 4.5, 0.25)
    assert (figures["retries"], figures["answers_502"], figures["cut"], figures["slow"]) == (0, 0, 0, 0)
    assert figures["past_timeout"] == 0
    assert figures["ended"] == "rl.job.completed"


def test_turns_past_the_timeout_count_retries_beyond_the_shown_events_not_slow_rollouts() -> None:
    retry = "POST http://127.0.0.1:1/rollout (step 1), attempt {} of 4: HTTP {}: inference call failed"
    events = [_event("rl.rollout.retry", retry.format(1, 502), retries=1),
              _event("rl.rollout.retry", retry.format(2, 503), retries=2),
              _event("rl.rollout.slow", "Rollout 3 of step 1: no answer after 60 s of 120 s", step=1),
              _step(1, 40.0, 99.0), _step(2, 20.0, 50.0),
              # Only the first five retries are events; the job's last event has the count.
              _event("rl.job.completed", "done", retries=13)]

    figures = phase_figures(events)

    assert figures["retries"] == 13
    assert figures["answers_502"] == 1
    assert figures["slow"] == 1  # at half the rollout's time: said beside, not counted as past it
    assert figures["past_timeout"] == 13


def test_a_rollout_cut_at_its_deadline_is_a_turn_past_the_timeout() -> None:
    events = [_step(1, 40.0, 99.0), _step(2, 20.0, 50.0),
              _event("rl.job.failed", "POST http://127.0.0.1:1/rollout failed after 1 request: no whole answer "
                                      "within 120 s (the task app is slow or overloaded) (step 3).", retries=0)]

    figures = phase_figures(events)

    assert (figures["cut"], figures["past_timeout"], figures["ended"]) == (1, 1, "rl.job.failed")


def test_a_job_that_never_reached_the_warm_step_says_why() -> None:
    events = [_step(1, 40.0, 99.0), _event("rl.job.failed", "task app gone")]

    with pytest.raises(ValueError, match="no rl.train.step event for step 2: rl.job.failed: task app gone"):
        phase_figures(events)


def test_a_rollout_phase_of_no_time_has_no_rate_rather_than_a_division_error() -> None:
    assert phase_figures([_step(2, 0.0, 10.0)])["sampled_per_s"] == 0.0
