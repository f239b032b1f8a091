"""The embedded backend really learns: the demo config goes from chance to a high eval score,
on the gridworld in either rollout contract generation (docs/rollout-contracts.md).

Seeded runs ([training] seed): the trainer seeds every rollout from (seed, mode, step, index),
so each run below scores the same every time (seed 1: eval 0.83 after step 4, 0.93 after 8)."""

from __future__ import annotations

from app.commands.demo import demo_payload as job_payload
from app.commands.demo import load_demo_config

from ..conftest import events_of


def test_the_demo_config_learns(api, taskapp, whole_job):
    config = load_demo_config()
    config["training"]["seed"] = 1
    _assert_learns(api, whole_job, taskapp.url, config, steps=16, evals=4)


def test_the_demo_config_learns_on_a_0_5_task_app(api, taskapp_05, whole_job):
    # Its first 8 of 16 steps (2 evals) are enough to go from chance to >= 0.8 with this seed;
    # the whole config is trained above, in the other generation.
    config = load_demo_config()
    config["training"].update(seed=1, num_epochs=1, iterations_per_epoch=8)
    job_id = _assert_learns(api, whole_job, taskapp_05.url, config, steps=8, evals=2)
    contract = [e for e in events_of(api, job_id) if e["type"] == "rl.taskapp.contract"]
    assert len(contract) == 1 and "contract 0.5" in contract[0]["message"], contract
    assert contract[0]["message"].endswith("from /openapi.json")
    # Every turn learned from once: the tool-call ids were read from the 0.5 answer's trace.
    steps = [e["data"] for e in events_of(api, job_id) if e["type"] == "rl.train.step"]
    assert all(s["decisions"] == s["turns"] > 0 for s in steps)


def _assert_learns(api, whole_job, task_url: str, config: dict, *, steps: int, evals: int) -> str:
    job_id, job = whole_job(api, job_payload(config, task_url), 120)
    assert job["status"] == "succeeded", job
    points = api.get(f"/rl/jobs/{job_id}/metrics", params={"limit": 1000}).json()["points"]
    train = [p["value"] for p in points if p["name"] == "train.mean_score"]
    scores = [p["value"] for p in points if p["name"] == "eval.mean_score"]
    assert [p["step"] for p in points if p["name"] == "eval.mean_score"][0] == 0  # before any update
    assert len(train) == steps and len(scores) == evals + 1
    assert train[0] <= 0.5, f"the first step should be near chance, got {train[0]:.3f}"
    assert scores[0] <= 0.5, f"the step-0 evaluation should be near chance, got {scores[0]:.3f}"
    assert scores[-1] >= 0.8, f"the final eval should be high, got {scores}"
    done = events_of(api, job_id)[-1]
    assert done["type"] == "rl.job.completed"
    assert done["data"]["final_eval_mean_score"] == scores[-1]
    assert done["data"]["chat_completions"] > done["data"]["rollouts"] > 0
    return job_id
