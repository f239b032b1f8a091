"""`[training] async_generation` (issue 40): the next step's rollouts play while a step's update
runs, one step off-policy; the job loop's part (app/local/training/steps.py `_train_ahead`),
shown with the tabular stand-in, whose update lets acting in between
(docs/embedded-policy.md#async-generation)."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from app.commands.demo import demo_payload
from app.local.policies.base import acts_greedily
from app.local.policies.tabular.policy import TabularPolicy
from support.pilot_waits import poll_until

from ..conftest import api_client, create_job, events_of, long_config, payload, small_config, wait_terminal
from ..state.test_local_resume import backend_process, job_killed_at_step


class Overlap:
    """What the stand-in's acting saw while its updates ran: each update (a step, in order) waits
    until a turn was answered meanwhile when that step is one the loop plays ahead of."""

    def __init__(self, ahead_of: set[int]) -> None:
        self.ahead_of = ahead_of
        self.lock = threading.Lock()
        self.updates = 0
        self.updating = False
        self.turns_during: dict[int, int] = {}
        self.eval_turns_during = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        act, update, overlap = TabularPolicy.act, TabularPolicy.update, self

        def counted_act(policy: TabularPolicy, messages: Any, tools: Any, tool_choice: Any, correlation_id: str,
                        rng: Any, options: Any = None) -> Any:
            answer = act(policy, messages, tools, tool_choice, correlation_id, rng, options)
            with overlap.lock:
                if overlap.updating:
                    overlap.turns_during[overlap.updates] += 1
                    overlap.eval_turns_during += acts_greedily(correlation_id)
            return answer

        def watched_update(policy: TabularPolicy, groups: list[Any]) -> Any:
            with overlap.lock:
                overlap.updates += 1
                overlap.updating = True
                step = overlap.updates
                overlap.turns_during[step] = 0
            try:
                if step in overlap.ahead_of:  # the next step's rollouts answer while this update runs
                    poll_until(lambda: overlap.turns_during[step] > 0, timeout=60,
                               what=f"a turn of step {step + 1} during step {step}'s update")
                return update(policy, groups)
            finally:
                with overlap.lock:
                    overlap.updating = False

        monkeypatch.setattr(TabularPolicy, "act", counted_act)
        monkeypatch.setattr(TabularPolicy, "update", watched_update)


def _steps(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["type"] == "rl.train.step"]


def test_the_next_steps_rollouts_play_during_the_update_and_never_past_an_evaluation(api, taskapp, monkeypatch):
    """Four steps, evaluated after steps 2 and 4: step 2's rollouts play during step 1's update and
    step 4's during step 3's; nothing plays past step 2 (its evaluation waits for its update, and
    step 3's rollouts for the evaluation) nor past the last step."""
    overlap = Overlap(ahead_of={1, 3})
    overlap.install(monkeypatch)
    config = small_config(iterations_per_epoch=4, seed=11, async_generation=True)
    config["evaluation"]["every_n_iters"] = 2
    job_id = create_job(api, payload(taskapp.url, config))
    job = wait_terminal(api, job_id, timeout=120)
    events = events_of(api, job_id)
    assert job["status"] == "succeeded", [e["message"] for e in events][-3:]
    steps = _steps(events)
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    assert [s["off_policy"] for s in steps] == [False, True, False, True]
    assert [("off-policy" in e["message"]) for e in events if e["type"] == "rl.train.step"] == [
        False, True, False, True]
    # Step k+1's rollouts began before step k's update ended: played ahead, one step at most.
    for before, after in ((steps[0], steps[1]), (steps[2], steps[3])):
        assert after["rollouts_started_at"] < before["update_ended_at"], (before, after)
    assert steps[2]["rollouts_started_at"] > steps[1]["update_ended_at"]  # after step 2's evaluation
    assert overlap.turns_during[1] > 0 and overlap.turns_during[3] > 0
    assert overlap.turns_during[2] == overlap.turns_during[4] == 0  # nothing plays during these
    assert overlap.eval_turns_during == 0  # no evaluation met a model mid-update
    evals = [e for e in events if e["type"] == "rl.eval.summary"]
    assert [e["data"]["step"] for e in evals] == [0, 2, 4]
    order = [(e["type"], e["data"].get("step")) for e in events if e["type"] in ("rl.train.step", "rl.eval.summary")]
    assert order == [("rl.eval.summary", 0), ("rl.train.step", 1), ("rl.train.step", 2), ("rl.eval.summary", 2),
                     ("rl.train.step", 3), ("rl.train.step", 4), ("rl.eval.summary", 4)]
    policy = next(e for e in events if e["type"] == "rl.train.policy")
    assert policy["data"]["async_generation"] is True
    points = api.get(f"/rl/jobs/{job_id}/metrics", params={"limit": 1000}).json()["points"]
    assert set(Counter((p["step"], p["name"]) for p in points).values()) == {1}


def test_without_async_generation_the_step_events_are_as_before(api, taskapp):
    job_id = create_job(api, payload(taskapp.url, small_config(seed=11)))
    assert wait_terminal(api, job_id)["status"] == "succeeded"
    events = events_of(api, job_id)
    for step in _steps(events):
        assert not {"off_policy", "rollouts_started_at", "update_ended_at"} & set(step), step
    assert "async_generation" not in next(e for e in events if e["type"] == "rl.train.policy")["data"]


def test_an_update_that_fails_fails_the_job_while_the_next_rollouts_play(api, taskapp, monkeypatch):
    update = TabularPolicy.update
    calls: list[int] = []

    def breaks_at_step_2(policy: TabularPolicy, groups: list[Any]) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the update broke")
        return update(policy, groups)

    monkeypatch.setattr(TabularPolicy, "update", breaks_at_step_2)
    config = small_config(iterations_per_epoch=6, seed=3, async_generation=True)
    config["evaluation"]["every_n_iters"] = 0
    job_id = create_job(api, payload(taskapp.url, config))
    job = wait_terminal(api, job_id, timeout=60)
    events = events_of(api, job_id)
    assert job["status"] == "failed", [e["message"] for e in events][-3:]
    assert "RuntimeError: the update broke" in events[-1]["message"]
    assert [s["step"] for s in _steps(events)] == [1]
    assert len(calls) == 2  # nothing updated after the failure


def test_an_async_job_is_cancelled_by_request(api, taskapp):
    config = long_config()
    config["training"].update(async_generation=True, seed=4)
    job_id = create_job(api, payload(taskapp.url, config))
    poll_until(lambda: (api.get(f"/rl/jobs/{job_id}").json()["metadata"].get("step") or 0) >= 3,
               timeout=60, what="step 3")
    assert api.post(f"/rl/jobs/{job_id}/cancel").status_code == 200
    job = wait_terminal(api, job_id, timeout=30)
    assert job["status"] == "cancelled"
    events = events_of(api, job_id)
    assert events[-1]["type"] == "rl.job.cancelled" and "during step" in events[-1]["message"]
    steps = [s["step"] for s in _steps(events)]
    assert steps == list(range(1, len(steps) + 1))


def test_a_non_boolean_async_generation_is_refused_with_the_fix(api, taskapp):
    """The client refuses it first (tests/core/config); a body sent another way, here."""
    for value in ("yes", 1):
        body = payload(taskapp.url, small_config())
        body["data"]["config"]["training"]["async_generation"] = value
        answer = api.post("/rl/jobs", json=body)
        assert answer.status_code == 422, answer.text
        assert "async_generation" in answer.text and "boolean" in answer.text


def _seeds_by_step(api, job_id: str, total: int) -> dict[int, set[int]]:
    kept: dict[int, set[int]] = {}
    for step in range(1, total + 1):
        rollouts = api.get(f"/rl/jobs/{job_id}/rollouts", params={"phase": "train", "step": step}).json()["rollouts"]
        kept[step] = {r["seed"] for r in rollouts}
    return kept


@pytest.mark.usefixtures("cli_process")  # the backend as a process, killed
def test_an_async_job_killed_mid_run_draws_the_same_seeds_after_its_resume(tmp_path, taskapp, api):
    """The step played ahead is not recorded: a resumed job plays it again, on the seeds it had
    drawn (the RNG saved with a step is the one before the step played ahead drew: job_run.py)."""
    config = small_config(iterations_per_epoch=8, seed=21, async_generation=True)
    config["evaluation"]["every_n_iters"] = 0
    config["rollout"]["inspect_per_step"] = 4  # every rollout of a step (2 groups of 2): all its seeds
    total = 8
    reference = create_job(api, demo_payload(config, taskapp.url))
    assert wait_terminal(api, reference, timeout=120)["status"] == "succeeded"
    db = tmp_path / "state.sqlite3"
    job_id = job_killed_at_step(db, tmp_path, demo_payload(config, taskapp.url), 3)
    with backend_process(db, tmp_path) as (proc, server), api_client(server) as second:
        job = wait_terminal(second, job_id, timeout=180)
        events = events_of(second, job_id)
        assert job["status"] == "succeeded", [e["message"] for e in events][-3:]
        seeds = _seeds_by_step(second, job_id, total)
    assert [e["type"] for e in events].count("rl.train.resumed") == 1
    assert [s["step"] for s in _steps(events)] == list(range(1, total + 1))
    assert seeds == _seeds_by_step(api, reference, total)


def test_async_generation_is_off_unless_the_config_says_true(taskapp):
    from app.local.training.plan import plan_from_payload

    assert plan_from_payload(payload(taskapp.url, small_config())).async_generation is False
    on = plan_from_payload(payload(taskapp.url, small_config(async_generation=True, importance_sampling_cap=2.0)))
    assert on.async_generation is True
    assert on.policy_options["async_generation"] is True and on.policy_options["importance_sampling_cap"] == 2.0
    assert "async_generation" not in plan_from_payload(payload(taskapp.url, small_config())).policy_options
