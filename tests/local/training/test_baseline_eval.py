"""Every job with an [evaluation] evaluates at step 0, before any update, on its eval seeds,
greedily (or pass@k with `samples = k`), each mean with its 95 % interval; a resumed job never
plays the step-0 evaluation twice (docs/embedded-policy.md#evaluation)."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

from app.local.policies.base import acts_greedily
from app.local.policies.tabular.policy import TabularPolicy
from app.local.servers import start_backend
from app.local.training.runner import JobRunner

from ..conftest import (
    API_KEY,
    ENV_KEY,
    api_client,
    create_job,
    events_of,
    payload,
    small_config,
    wait_event,
    wait_terminal,
)


def _evals(api, job_id: str) -> list[dict]:
    return [e for e in events_of(api, job_id) if e["type"] == "rl.eval.summary"]


def _eval_points(api, job_id: str) -> list[dict]:
    points = api.get(f"/rl/jobs/{job_id}/metrics", params={"limit": 1000}).json()["points"]
    return [p for p in points if p["name"] == "eval.mean_score"]


def test_a_job_without_an_evaluation_section_still_has_its_baseline_and_its_end(api, taskapp):
    """Issue 39's done-when: every job evaluates at step 0. Without [evaluation] (the lm walk's
    config had none) the job is evaluated on the default seeds at step 0 and after its last step."""
    config = small_config(iterations_per_epoch=3, seed=7)
    del config["evaluation"]
    job_id = create_job(api, payload(taskapp.url, config))
    assert wait_terminal(api, job_id)["status"] == "succeeded"
    evals = _evals(api, job_id)
    assert [e["data"]["step"] for e in evals] == [0, 3]
    assert all(e["data"]["seeds"] == [0, 1, 2, 3] and e["data"]["greedy"] for e in evals)
    assert "(no [evaluation] in the config: seeds 0, 1, 2, 3, at step 0 and after the last step" in evals[0]["message"]
    assert [p["step"] for p in _eval_points(api, job_id)] == [0, 3]
    completed = events_of(api, job_id)[-1]
    assert completed["type"] == "rl.job.completed" and " +/- " in completed["message"]


def test_a_job_evaluates_its_initial_policy_at_step_0_before_any_update(api, taskapp):
    config = small_config(seed=7)
    config["evaluation"].update(instances=6, seeds=[0, 1, 2])
    job_id = create_job(api, payload(taskapp.url, config))
    job = wait_terminal(api, job_id)
    assert job["status"] == "succeeded"
    events = events_of(api, job_id)
    first_eval = next(e for e in events if e["type"] == "rl.eval.summary")
    first_step = next(e for e in events if e["type"] == "rl.train.step")
    assert first_eval["data"]["step"] == 0 and first_eval["seq"] < first_step["seq"]
    assert first_eval["message"].startswith("Eval at step 0, before any update: mean score ")
    assert first_eval["data"]["greedy"] is True and first_eval["data"]["episodes"] == 6
    points = _eval_points(api, job_id)
    assert [p["step"] for p in points] == [0, 1, 2]
    low, high = points[0]["data"]["ci95"]
    assert low <= points[0]["value"] <= high and points[0]["value"] == first_eval["data"]["mean_score"]
    # The initial policy, greedy: another job, trained from another seed, starts from the same score.
    other = small_config(seed=8, learning_rate=1e-4)
    other["evaluation"].update(instances=6, seeds=[0, 1, 2])
    other_id = create_job(api, payload(taskapp.url, other))
    assert wait_terminal(api, other_id)["status"] == "succeeded"
    assert _eval_points(api, other_id)[0]["value"] == points[0]["value"]
    assert _eval_points(api, other_id)[0]["data"]["ci95"] == [low, high]
    # Greedy: a seed played twice in one evaluation scores the same both times.
    rollouts = api.get(f"/rl/jobs/{job_id}/rollouts", params={"phase": "eval", "step": 0}).json()["rollouts"]
    by_seed: dict[int, set[float]] = {}
    for rollout in rollouts:
        assert rollout["rollout_id"].startswith("eval-")
        by_seed.setdefault(rollout["seed"], set()).add(rollout["reward"])
    assert len(rollouts) == 6 and all(len(rewards) == 1 for rewards in by_seed.values())
    # The final line's words, in the completion event: where the eval started and where it ended.
    completed = events[-1]
    assert completed["type"] == "rl.job.completed"
    assert completed["data"]["baseline_eval_mean_score"] == points[0]["value"]
    assert f"eval {points[0]['value']:.2f} -> {points[-1]['value']:.2f}, " in completed["message"]
    assert " +/- " in completed["message"]


def test_samples_k_scores_pass_at_k_over_sampled_episodes(api, taskapp):
    config = small_config(seed=7, iterations_per_epoch=1)
    config["evaluation"].update(instances=3, seeds=[0, 1, 2], samples=4)
    job_id = create_job(api, payload(taskapp.url, config))
    assert wait_terminal(api, job_id)["status"] == "succeeded"
    baseline = _evals(api, job_id)[0]
    assert baseline["data"] | {"mean_score": 0, "success_rate": 0, "ci95": 0, "ci_method": 0} == {
        "step": 0, "mean_score": 0, "seeds": [0, 1, 2], "instances": 3, "episodes": 12, "samples": 4,
        "greedy": False, "success_rate": 0, "ci95": 0, "ci_method": 0}
    assert "pass@4" in baseline["message"] and "3 instances x 4 sampled episodes" in baseline["message"]
    rollouts = api.get(f"/rl/jobs/{job_id}/rollouts", params={"phase": "eval", "step": 0}).json()["rollouts"]
    assert len(rollouts) == 12 and all(r["rollout_id"].startswith("evalk-") for r in rollouts)
    # Each instance scores its best episode's reward.
    best = {}
    for rollout in rollouts:
        key = rollout["index"] // 4
        best[key] = max(best.get(key, 0.0), rollout["reward"])
    assert baseline["data"]["mean_score"] == sum(best.values()) / 3


def test_a_job_stopped_after_its_step_0_evaluation_does_not_play_it_again(db_path, taskapp, monkeypatch):
    train_step = JobRunner._train_step

    async def never(self, run, step):  # the first run of the backend stops before step 1 records
        await asyncio.Event().wait()

    monkeypatch.setattr(JobRunner, "_train_step", never)
    with start_backend(api_key=API_KEY, db_path=db_path, env_api_keys=[ENV_KEY]) as backend, \
            api_client(backend) as api:
        job_id = create_job(api, payload(taskapp.url, small_config(seed=7)))
        wait_event(api, job_id, "rl.eval.summary")
    monkeypatch.setattr(JobRunner, "_train_step", train_step)
    with start_backend(api_key=API_KEY, db_path=db_path, env_api_keys=[ENV_KEY]) as backend, \
            api_client(backend) as api:
        assert wait_terminal(api, job_id)["status"] == "succeeded"
        evals = [e["data"]["step"] for e in _evals(api, job_id)]
        points = _eval_points(api, job_id)
        resumed = next(e for e in events_of(api, job_id) if e["type"] == "rl.train.resumed")
        eval_rollouts = api.get(f"/rl/jobs/{job_id}/rollouts", params={"phase": "eval", "step": 0}).json()
    assert evals == [0, 1, 2]
    assert Counter(p["step"] for p in points) == {0: 1, 1: 1, 2: 1}
    assert "from the start" in resumed["message"]
    assert len(eval_rollouts["rollouts"]) == 2  # kept once


def test_an_evaluation_turn_is_greedy_and_a_training_turn_samples():
    assert acts_greedily("trace_job_1:eval-0-3-abc") and acts_greedily("eval_job_1:r")
    assert not acts_greedily("trace_job_1:rl-1-3-abc") and not acts_greedily("trace_job_1:evalk-0-3-abc")
    policy = TabularPolicy()
    policy.table["state: x|move.direction"] = {"up": 0.2, "down": 0.1, "left": 0.0, "right": 0.0}
    tools = [{"type": "function", "function": {"name": "move", "parameters": {
        "type": "object", "properties": {"direction": {"enum": ["up", "down", "left", "right"]}},
        "required": ["direction"]}}}]
    messages = [{"role": "user", "content": "state: x"}]

    def moves(cid: str) -> set[str]:
        return {policy.act(messages, tools, "required", cid, random.Random(seed)).message["tool_calls"][0]
                ["function"]["arguments"] for seed in range(40)}

    assert moves("trace_job_1:eval-0-0-abc") == {'{"direction": "up"}'}  # the best action, every time
    assert len(moves("trace_job_1:rl-1-0-abc")) > 1


def test_a_state_file_from_before_step_0_metrics_takes_them(db_path):
    import sqlite3

    from app.local.state.store import Store

    old = sqlite3.connect(db_path)
    Store(db_path).close()
    sql = old.execute("SELECT sql FROM sqlite_master WHERE name = 'metrics'").fetchone()[0]
    old.executescript("DROP TABLE metrics;" + sql.replace("step >= 0", "step >= 1") + ";")
    old.execute("INSERT INTO jobs (id, status, payload, body_hash, created_at, updated_at) "
                "VALUES ('job_1', 'succeeded', '{}', 'h', 'now', 'now')")
    old.execute("INSERT INTO metrics VALUES ('job_1', 'train.loss', 1, 0.5, 0, 'train', '{}', 'now')")
    old.commit()
    old.close()
    store = Store(db_path)
    store.add_metrics("job_1", 0, [{"name": "eval.mean_score", "value": 0.25, "phase": "eval"}])
    assert [(p["step"], p["name"]) for p in store.metrics("job_1", after_step=-1, limit=10)] == [
        (0, "eval.mean_score"), (1, "train.loss")]
    store.close()


def test_a_final_eval_below_the_step_0_one_is_said_to_have_got_worse():
    from types import SimpleNamespace

    finished: list[tuple] = []
    runner = SimpleNamespace(journal=SimpleNamespace(finish=lambda *args, **kwargs: finished.append((args, kwargs))))
    run = SimpleNamespace(job_id="job_1", step=12, eval_score=0.25, eval_ci=[0.1, 0.4], baseline_score=0.5,
                          baseline_ci=[0.3, 0.7], first_score=0.1, last_train_score=0.3, flat_steps=0,
                          counters=lambda: {})
    JobRunner._complete(runner, run)
    (args, kwargs), = finished
    assert kwargs["level"] == "warning" and kwargs["data"]["got_worse"] is True
    assert args[3] == ("Training finished after 12 steps, but the policy GOT WORSE: its final eval mean score "
                       "0.250 is below the step-0 evaluation's mean score 0.500")
    run.eval_score, run.eval_ci = 0.75, [0.6, 0.9]
    JobRunner._complete(runner, run)
    (args, kwargs) = finished[-1]
    assert "level" not in kwargs and kwargs["data"]["eval_change"] == 0.25
    assert args[3] == "Training finished after 12 steps; eval 0.50 -> 0.75, +0.25 +/- 0.25"


def test_samples_out_of_bounds_is_refused_naming_the_key(api, taskapp):
    import pytest

    from app.core.config.validation import ConfigValidationError

    config = small_config()
    body = payload(taskapp.url, config)
    config["evaluation"]["samples"] = 65
    with pytest.raises(ConfigValidationError, match=r"evaluation\.samples: 65 is out of range: allowed 1 to 64"):
        payload(taskapp.url, config)  # the client refuses it before sending
    body["data"]["config"]["evaluation"]["samples"] = 65
    answer = api.post("/rl/jobs", json=body)  # and so does the backend
    assert answer.status_code == 422 and "evaluation.samples" in answer.text, answer.text
