"""The step event's message writes a tiny loss as the dashboard's readouts do (issue 37: an lm
job's loss of -2.24e-08 read "loss -0.0000" in the log)."""

from __future__ import annotations

from app.local.policies.base import UpdateStats
from app.local.policies.tabular import TabularPolicy

from .conftest import create_job, events_of, payload, wait_terminal


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

