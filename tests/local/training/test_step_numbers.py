"""The step event's message writes a tiny loss as the dashboard's readouts do (issue 37: an lm
job's loss of -2.24e-08 read "loss -0.0000" in the log), and a long step says how many of its
rollouts are done before it ends (issue 37: a real model on a CPU looked frozen for minutes)."""

from __future__ import annotations

import math

import pytest

from app.local.policies.base import Episode, UpdateStats, reward_spread
from app.local.policies.tabular.policy import TabularPolicy
from app.local.training import rollouts

from ..conftest import create_job, events_of, payload, small_config, wait_terminal


def test_a_tiny_loss_reads_in_scientific_notation_in_the_step_message(api, taskapp, monkeypatch):
    update = TabularPolicy.update

    def tiny_loss(self: TabularPolicy, groups: list) -> UpdateStats:
        stats = update(self, groups)
        return UpdateStats(-2.24e-08, stats.entropy, stats.extra)

    monkeypatch.setattr(TabularPolicy, "update", tiny_loss)
    job_id = create_job(api, payload(taskapp.url))
    assert wait_terminal(api, job_id)["status"] == "succeeded"
    steps = [e["message"] for e in events_of(api, job_id) if e["type"] == "rl.train.step"]
    assert steps and all("loss -2.24e-08," in message for message in steps), steps
    assert not any("-0.0000" in message for message in steps)



def test_a_long_step_says_how_many_of_its_rollouts_are_done(api, taskapp, monkeypatch):
    """Said at most every ROLLOUT_PROGRESS_EVERY_S (here: at every rollout), never for the last
    rollout of a phase (the step's own event says that)."""
    monkeypatch.setattr(rollouts, "ROLLOUT_PROGRESS_EVERY_S", 0.0)
    config = small_config(iterations_per_epoch=1, batch_size=2, group_size=2)
    job_id = create_job(api, payload(taskapp.url, config))
    assert wait_terminal(api, job_id)["status"] == "succeeded"
    events = events_of(api, job_id)
    progress = [e for e in events if e["type"] == rollouts.ROLLOUT_PROGRESS_EVENT]
    assert [e["message"] for e in progress] == [
        "Eval at step 0: 1/2 rollouts done",  # the evaluation before any update
        "Step 1: 1/4 rollouts done", "Step 1: 2/4 rollouts done", "Step 1: 3/4 rollouts done",
        "Eval after step 1: 1/2 rollouts done"]
    assert progress[0]["data"] == {"step": 0, "phase": "eval", "done": 1, "total": 2}
    assert progress[3]["data"] == {"step": 1, "phase": "train", "done": 3, "total": 4}
    assert progress[4]["data"] == {"step": 1, "phase": "eval", "done": 1, "total": 2}
    step_seq = next(e["seq"] for e in events if e["type"] == "rl.train.step")
    assert all(e["seq"] < step_seq for e in progress[:4])


def test_a_quick_step_says_nothing_of_its_rollouts(api, taskapp):
    job_id = create_job(api, payload(taskapp.url))
    assert wait_terminal(api, job_id)["status"] == "succeeded"
    assert not [e for e in events_of(api, job_id) if e["type"] == rollouts.ROLLOUT_PROGRESS_EVENT]


def test_reward_std_is_the_mean_of_the_groups_stds_on_known_rewards() -> None:
    """What the advantages see (issue 39): each group's own spread, not the batch's."""
    groups = [[Episode([], s) for s in scores] for scores in ((0.0, 1.0), (1.0, 1.0), (0.0, 0.0, 1.0, 1.0))]
    population = reward_spread(groups, bessel=False)
    assert population["reward_std"] == pytest.approx((0.5 + 0.0 + 0.5) / 3)
    assert population["frac_reward_zero_std"] == pytest.approx(2 / 8)  # the (1, 1) group's two episodes
    bessel = reward_spread(groups, bessel=True)  # TRL's advantages divide by this one
    assert bessel["reward_std"] == pytest.approx((math.sqrt(0.5) + 0.0 + math.sqrt(1 / 3)) / 3)
    assert reward_spread([[Episode([], 1.0)]], bessel=True) == {"reward_std": 0.0, "frac_reward_zero_std": 1.0}


def test_a_step_event_times_its_rollouts_apart_from_its_update(api, taskapp):
    job_id = create_job(api, payload(taskapp.url))
    assert wait_terminal(api, job_id)["status"] == "succeeded"
    steps = [e["data"] for e in events_of(api, job_id) if e["type"] == "rl.train.step"]
    assert steps
    for data in steps:
        assert data["rollout_seconds"] > 0 and data["step_seconds"] >= 0
        assert data["rollout_seconds"] + data["step_seconds"] <= data["seconds"] + 0.01
        # the stand-in's spread: the population std its advantages divide by (group_advantages)
        assert 0.0 <= data["reward_std"] and 0.0 <= data["frac_reward_zero_std"] <= 1.0
