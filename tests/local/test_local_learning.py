"""The embedded backend really learns: the demo config goes from chance to a high eval score."""

from __future__ import annotations

from app.demo import demo_payload as job_payload, load_demo_config

from .conftest import create_job, events_of, wait_terminal


def test_the_demo_config_learns(api, taskapp):
    job_id = create_job(api, job_payload(load_demo_config(), taskapp.url))
    job = wait_terminal(api, job_id, timeout=120)
    assert job["status"] == "succeeded", job
    points = api.get(f"/rl/jobs/{job_id}/metrics", params={"limit": 1000}).json()["points"]
    train = [p["value"] for p in points if p["name"] == "train.mean_score"]
    evals = [p["value"] for p in points if p["name"] == "eval.mean_score"]
    assert len(train) == 16 and len(evals) == 4
    assert train[0] <= 0.5, f"the first step should be near chance, got {train[0]:.3f}"
    assert evals[-1] >= 0.8, f"the final eval should be high, got {evals}"
    done = events_of(api, job_id)[-1]
    assert done["type"] == "rl.job.completed"
    assert done["data"]["final_eval_mean_score"] == evals[-1]
    assert done["data"]["chat_completions"] > done["data"]["rollouts"] > 0
