"""The reference task app: docs/wire-contract.md#task-app (auth, endpoints, rollouts)."""

from __future__ import annotations

import asyncio
import json
import random
import re
import statistics
import threading
import time

import pytest
from fastapi import FastAPI, Request

from app.local.servers import ServerHandle, _bind, start_taskapp
from app.local.taskapps import gridworld
from app.local.taskapps.kit import DEFAULT_ROLLOUT_TIME_S, PolicyLink
from support import loopback_http

from ..conftest import ENV_KEY


@pytest.mark.parametrize("headers", [
    {"X-API-Key": ENV_KEY},
    {"X-API-Keys": f"other-key, {ENV_KEY}"},
    {"Authorization": f"Bearer {ENV_KEY}"},
    {"X-API-Key": "wrong", "Authorization": f"Bearer {ENV_KEY}"},
])
def test_each_header_style_is_accepted(taskapp, headers):
    for path in ("/health", "/info", "/task_info"):
        assert loopback_http.get(taskapp.url + path, headers=headers).status_code == 200
    assert loopback_http.post(taskapp.url + "/done", headers=headers).json()["ok"] is True


@pytest.mark.parametrize("headers,got,lens", [
    ({"X-API-Key": "wrong-key-1234567890"}, ["wron…"], [20]),
    ({"X-API-Keys": "a,bb"}, ["****", "****"], [1, 2]),
    ({"Authorization": "Bearer nope"}, ["****"], [4]),
    ({}, [], []),
])
def test_a_wrong_or_missing_key_gets_400_with_details(taskapp, headers, got, lens):
    resp = loopback_http.get(taskapp.url + "/health", headers=headers)
    assert resp.status_code == 400
    error = resp.json()["detail"]["error"]
    assert error["code"] == "unauthorised"
    assert error["message"].startswith("API key missing" if not got else "API key invalid")
    # Unlike the SDK's allowed_first15: at most the 4-character mask of any key.
    assert error["allowed_prefixes"] == [ENV_KEY[:4] + "…"] and error["allowed_count"] == 1
    assert "allowed_first15" not in error and ENV_KEY[:5] not in resp.text
    assert error["got_prefixes"] == got and error["got_lens"] == lens


def test_no_key_configured_gets_503():
    with start_taskapp(env_api_keys=[]) as app:
        resp = loopback_http.get(app.url + "/health", headers={"X-API-Key": ENV_KEY})
        assert resp.status_code == 503
        assert resp.json()["detail"]["error"]["code"] == "missing_environment_api_key"
        assert loopback_http.get(app.url + "/").status_code == 200


def test_root_needs_no_key(taskapp):
    assert loopback_http.get(taskapp.url + "/").json() == {"status": "ok", "service": "gridworld"}
    assert loopback_http.head(taskapp.url + "/").status_code == 200


def test_health_and_info_shapes(taskapp):
    auth = {"X-API-Key": ENV_KEY}
    health = loopback_http.get(taskapp.url + "/health", headers=auth).json()
    assert health == {"healthy": True, "auth": {"required": True, "expected_prefix": ENV_KEY[:4] + "…"}}
    info = loopback_http.get(taskapp.url + "/info", headers=auth).json()
    assert {"service", "dataset", "rubrics", "inference", "limits"} <= info.keys()
    assert info["service"]["task"]["id"] == "gridworld"


def test_task_info_with_and_without_seeds(taskapp):
    def get(query: str):
        return loopback_http.get(taskapp.url + "/task_info" + query, headers={"X-API-Key": ENV_KEY}).json()

    assert "taskset" in get("")
    one = get("?seed=1")
    assert one["task_metadata"]["seed"] == 1 and one["environment"] == "gridworld"
    assert {"task", "dataset", "rubric", "inference", "limits"} <= one.keys()
    assert [t["task_metadata"]["seed"] for t in get("?seed=1&seed=2")] == [1, 2]
    assert [t["task_metadata"]["seed"] for t in get("?seeds=3,4")] == [3, 4]


def _fake_policy(answer):
    """A chat endpoint at any path that records each request (its body, path and ?cid=) and
    answers answer(request body)."""
    calls: list[dict] = []
    app = FastAPI()

    @app.post("/{path:path}")
    async def chat(request: Request):
        body = await request.json()
        calls.append({"body": body, "cid": request.query_params.get("cid"), "path": request.url.path})
        return answer(body)

    return app, calls


def _move(direction):
    return {"choices": [{"message": {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "move", "arguments": json.dumps({"direction": direction})}}]}}]}


def _oracle(body):
    """Walks towards the goal along a shortest path, using the position the observation states."""
    text = body["messages"][-1]["content"]
    x, y = map(int, re.search(r"at column (\d+), row (\d+)", text).groups())
    seed = int(body["model"])  # the test passes the seed as the model name
    lay = gridworld.layout(seed)
    dist = gridworld._distances(lay, lay.goal)
    best = min((d for d, (dx, dy) in gridworld.MOVES.items() if (x + dx, y + dy) in dist),
               key=lambda d: dist[(x + gridworld.MOVES[d][0], y + gridworld.MOVES[d][1])])
    return _move(best)


def _rollout(taskapp, inference_url, seed=3, max_turns=12, **extra):
    return loopback_http.post(taskapp.url + "/rollout", headers={"X-API-Key": ENV_KEY}, timeout=30, json={
        "run_id": "run-1", "env": {"env_name": "gridworld", "seed": seed, "config": {"max_turns": max_turns}},
        "policy": {"policy_name": "p", "config": {"model": str(seed), "inference_url": inference_url}},
        "ops": ["agent", "env"] * max_turns, "mode": "eval", **extra})


def test_rollout_calls_the_policy_every_turn(taskapp):
    app, calls = _fake_policy(_oracle)
    with ServerHandle("fake policy", app, _bind("127.0.0.1", 0)).start("/docs") as policy:
        url = f"{policy.url}/v1?cid=job_1:r1"
        resp = _rollout(taskapp, url)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    traj = out["trajectories"][0]
    lay = gridworld.layout(3)
    assert traj["length"] == len(traj["steps"]) == len(calls) == lay.shortest
    assert all(c["cid"] == "job_1:r1" and c["path"] == "/v1/chat/completions" for c in calls)
    assert calls[0]["body"]["tools"][0]["function"]["name"] == "move"
    assert "state: goal=" in calls[0]["body"]["messages"][-1]["content"]
    assert traj["steps"][-1]["done"] is True and traj["steps"][-1]["reward"] == out["metrics"]["mean_return"]
    assert out["metrics"]["mean_return"] == pytest.approx(1 - gridworld.STEP_COST * lay.shortest)
    assert out["metrics"]["episode_returns"] == [out["metrics"]["mean_return"]]
    assert out["pipeline_metadata"]["inference_url"] == url and traj["inference_url"] == url
    assert out["run_id"] == "run-1" and out["trace_correlation_id"] == "job_1:r1"


def test_a_useless_answer_wastes_the_turn(taskapp):
    app, calls = _fake_policy(lambda body: {"choices": [{"message": {"role": "assistant", "content": "hi"}}]})
    with ServerHandle("fake policy", app, _bind("127.0.0.1", 0)).start("/docs") as policy:
        out = _rollout(taskapp, f"{policy.url}/v1/chat/completions?cid=j:r", max_turns=3).json()
    assert len(calls) == 3 and out["metrics"]["mean_return"] == 0.0
    assert out["trajectories"][0]["steps"][-1]["truncated"] is True


def test_an_inference_failure_is_a_502_that_says_why(taskapp):
    app, _ = _fake_policy(lambda body: (_ for _ in ()).throw(RuntimeError("boom")))
    with ServerHandle("fake policy", app, _bind("127.0.0.1", 0)).start("/docs") as policy:
        resp = _rollout(taskapp, f"{policy.url}/v1?cid=j:r")
    assert resp.status_code == 502
    detail = resp.json()["detail"]
    assert detail.startswith("inference call failed") and "HTTP 500" in detail and "turn 1" in detail
    with _bind("127.0.0.1", 0) as sock:
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}/v1?cid=j:r"
    resp = _rollout(taskapp, dead)
    assert resp.status_code == 502 and "connection refused" in resp.json()["detail"]
    assert "cid" not in resp.json()["detail"]  # the cid is a credential: kept out of messages


def test_the_chat_hop_waits_as_long_as_the_rollouts_own_time():
    """Issue 37: a model on a CPU answering 8 rollouts at once takes longer than the 30 s the
    chat call used to wait. Its read timeout is what is left of the rollout's time
    (safety.max_time_s): long for a long rollout, and a call that outlasts it is a 502 saying so."""
    link = PolicyLink(loopback_http.async_client())
    assert link.for_rollout(600).read_timeout_s() == pytest.approx(600, abs=1)
    assert link.read_timeout_s() == DEFAULT_ROLLOUT_TIME_S > 30
    app = FastAPI()
    released = threading.Event()

    @app.post("/{path:path}")
    async def slow_chat():
        # Slower than the rollout's 1 s: it answers once the test has its 502 (a fixed 3 s sleep
        # held the server's stop, which waits for the request, 2 s after the test was done).
        await asyncio.to_thread(released.wait, 30)
        return _move("up")

    with ServerHandle("slow policy", app, _bind("127.0.0.1", 0)).start("/docs") as policy, \
            start_taskapp(env_api_keys=[ENV_KEY], game="press") as press:
        started = time.monotonic()
        try:
            resp = _rollout(press, f"{policy.url}/v1?cid=j:r", max_turns=1, safety={"max_time_s": 1})
            took = time.monotonic() - started
        finally:
            released.set()
    assert resp.status_code == 502, resp.text
    assert "no answer within 1 s, what was left of the rollout's time (safety.max_time_s" in resp.json()["detail"]
    assert took < 2.5


def test_a_random_policy_scores_near_chance():
    rng = random.Random(0)
    scores = []
    for seed in range(2000):
        episode = gridworld.Episode(seed, 12)
        while not episode.done:
            episode.step(rng.choice(list(gridworld.MOVES)))
        scores.append(episode.score)
    assert 0.1 <= statistics.mean(scores) <= 0.3
