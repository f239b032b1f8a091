"""The embedded backend against task apps that are not our gridworld: the SDK-shaped
crafter-lite app (an array-of-enum tool, tool_choice, the trace_ cid rule) is learned; a tool
the policy cannot act in fails the job at once; a run that cannot learn says so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI, HTTPException, Request

from app.core.config import rl as cfg
from app.local.servers import ServerHandle, _bind, start_taskapp
from support import loopback_http

from ..conftest import ENV_KEY, create_job, events_of, payload, small_config, wait_terminal

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def crafter() -> Iterator[ServerHandle]:
    with start_taskapp(env_api_keys=[ENV_KEY], game="crafter-lite") as server:
        yield server


def test_an_sdk_shaped_task_app_is_learned(api, crafter, whole_job):
    config = cfg.load_toml(REPO / "configs" / "rl" / "crafter_lite.toml")  # seeded: [training] seed
    # Its first 12 of 16 steps: with its seed (11) the greedy eval is 0.04 at step 0, 0.40 after
    # step 8 and 0.93 after step 12, every run the same; the evals stay after 8 and at the end.
    config["training"]["iterations_per_epoch"] = 12
    job_id, job = whole_job(api, payload(crafter.url, config), 180)
    assert job["status"] == "succeeded", job.get("error")
    events = events_of(api, job_id)
    steps = [e["data"] for e in events if e["type"] == "rl.train.step"]
    evals = [e["data"]["mean_score"] for e in events if e["type"] == "rl.eval.summary"]
    assert steps[0]["mean_score"] < 0.6  # random actions: gather a little, rarely a pickaxe
    assert evals[-1] >= steps[0]["mean_score"] + 0.25, (steps[0]["mean_score"], evals)
    assert evals[0] < 0.2 and evals[-1] >= evals[0] + 0.5, evals  # from the step-0 evaluation
    assert not any(e["type"] == "rl.train.warning" for e in events)
    # Composite actions: each turn learned from its length and at least one element.
    assert all(s["decisions"] >= 2 * s["turns"] > 0 for s in steps)


def test_the_sdk_cid_rule_is_kept_by_crafter_lite(crafter):
    body = {"run_id": "r1", "env": {"seed": 1}, "mode": "rl",
            "policy": {"config": {"inference_url": "http://127.0.0.1:9/v1/chat/completions?cid=job_x:r1"}}}
    resp = loopback_http.post(crafter.url + "/rollout", json=body, headers={"X-API-Key": ENV_KEY})
    assert resp.status_code == 400 and "trace_" in resp.json()["detail"]


def _one_tool_taskapp(tool: dict, score: float) -> ServerHandle:
    """A task app that plays one turn with `tool` and scores `score` whatever the answer."""
    app = FastAPI()

    @app.post("/rollout")
    async def rollout(request: Request) -> dict:
        body = await request.json()
        url = body["policy"]["config"]["inference_url"]
        base, _, query = url.partition("?")
        async with loopback_http.async_client() as client:
            resp = await client.post(f"{base}?{query}", json={
                "messages": [{"role": "user", "content": "Pick one."}], "tools": [tool], "tool_choice": "required"})
        if resp.status_code != 200:
            raise HTTPException(502, f"inference failed: {resp.text[:200]}")
        call = resp.json()["choices"][0]["message"]["tool_calls"][0]
        return {"run_id": body["run_id"], "metrics": {"mean_return": score, "num_steps": 1},
                "trajectories": [{"steps": [{"tool_calls": [call], "reward": score, "done": True}]}]}

    return ServerHandle("one-tool task app", app, _bind("127.0.0.1", 0)).start("/docs")


def test_a_tool_the_policy_cannot_act_in_fails_the_job_at_once(api, quick_rollout_retries):
    speak = {"type": "function", "function": {"name": "speak", "parameters": {
        "type": "object", "properties": {"say": {"type": "string"}}, "required": ["say"]}}}
    with _one_tool_taskapp(speak, 1.0) as taskapp:
        job_id = create_job(api, payload(taskapp.url, small_config()))
        job = wait_terminal(api, job_id, timeout=60)
    assert job["status"] == "failed"
    last = events_of(api, job_id)[-1]
    assert last["type"] == "rl.job.failed" and last["level"] == "error"
    assert "tool 'speak'" in last["message"] and "say: free text" in last["message"]
    assert not any(e["type"] == "rl.train.step" for e in events_of(api, job_id))


def test_a_run_where_every_rollout_scores_the_same_says_it_learned_nothing(api):
    pick = {"type": "function", "function": {"name": "pick", "parameters": {
        "type": "object", "properties": {"n": {"enum": [1, 2, 3]}}, "required": ["n"]}}}
    with _one_tool_taskapp(pick, 0.0) as taskapp:
        job_id = create_job(api, payload(taskapp.url, small_config()))
        job = wait_terminal(api, job_id, timeout=60)
    assert job["status"] == "succeeded"
    events = events_of(api, job_id)
    warnings = [e for e in events if e["type"] == "rl.train.warning"]
    assert len(warnings) == 1 and warnings[0]["level"] == "warning" and "scored exactly 0" in warnings[0]["message"]
    completed = next(e for e in events if e["type"] == "rl.job.completed")
    assert completed["level"] == "warning" and "LEARNED NOTHING" in completed["message"]
