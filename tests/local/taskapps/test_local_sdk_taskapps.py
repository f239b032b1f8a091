"""Task apps written on synth-ai 0.5.0's own framework (tests/local/sdk_taskapps) against the
embedded backend: what they send to the policy's chat endpoint, that they start and stop as
real servers, and what the tabular stand-in makes of them (it learns the context-free one; on
the guess-number one it learns or says that it got worse)."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request

from app.commands.demo import demo_payload, load_demo_config
from app.local.servers import ServerHandle, _bind
from app.local.training.rollout_contract import GEN_05, RolloutAsk, generation_from_openapi, read_answer, rollout_body
from support import loopback_http

from ..conftest import ENV_KEY, create_job, events_of, wait_terminal
from ..sdk_taskapps.harness import SdkTaskApp


class FakePolicy:
    """A chat endpoint at the path the 0.5 inference URL names, that records each request
    and answers with one call of the request's first tool, its argument from `choose`."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.choose = lambda messages: 1
        app = FastAPI()

        @app.post("/api/v1/{trial}/{cid}/chat/completions")
        async def chat(trial: str, cid: str, request: Request) -> dict[str, Any]:
            body = await request.json()
            self.requests.append({"path": (trial, cid), "headers": dict(request.headers), "body": body})
            function = body["tools"][0]["function"]
            argument = next(iter(function["parameters"]["properties"]))
            arguments = json.dumps({argument: self.choose(body["messages"])})
            call = {"id": f"call_{len(self.requests)}", "type": "function",
                    "function": {"name": function["name"], "arguments": arguments}}
            return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body.get("model"),
                    "choices": [{"index": 0, "finish_reason": "tool_calls",
                                 "message": {"role": "assistant", "content": None, "tool_calls": [call]}}]}

        self.server = ServerHandle("fake policy", app, _bind("127.0.0.1", 0)).start("/docs")


@pytest.fixture(scope="module")
def fake_policy() -> Iterator[FakePolicy]:
    policy = FakePolicy()
    yield policy
    policy.server.stop()


def rollout(app: SdkTaskApp, policy: FakePolicy, seed: int, rollout_id: str) -> dict[str, Any]:
    """One rollout in the body our trainer sends (contract 0.5), the policy at `policy`."""
    ask = RolloutAsk(job_id="job_sdk", rollout_id=rollout_id, mode="rl", seed=seed, env_name=app.name,
                     policy_name="p", model="tiny", max_turns=4, ops=(), timeout_s=60.0,
                     api_base=policy.server.url + "/api/v1")
    policy.requests.clear()
    resp = loopback_http.post(app.url + "/rollout", json=rollout_body(GEN_05, ask), headers={"X-API-Key": ENV_KEY},
                              timeout=30.0)
    assert resp.status_code == 200, resp.text
    return resp.json()


def named_button(messages: list[dict[str, Any]]) -> int:
    return int(re.fullmatch(r"Press button (\d)\.", messages[-1]["content"]).group(1))


def test_a_context_free_episode_and_the_chat_requests_it_sends(sdk_taskapps, fake_policy):
    app = sdk_taskapps("context_free")
    fake_policy.choose = named_button
    answer = rollout(app, fake_policy, seed=5, rollout_id="r1")
    assert answer["trace_correlation_id"] == "trace_job_sdk:r1"
    assert answer["reward_info"]["outcome_reward"] == 1.0
    assert answer["reward_info"]["event_rewards"] == [1.0] * 4
    outcome = read_answer(answer)  # as our trainer reads it
    assert (outcome.score, outcome.score_field, outcome.turns) == (1.0, "reward_info.outcome_reward", 4)
    assert outcome.tool_call_ids == {"call_1", "call_2", "call_3", "call_4"}

    # What the SDK's call_chat_completion_api sends: the language model policy renders these.
    first, last = fake_policy.requests[0], fake_policy.requests[-1]
    assert first["path"] == ("job_sdk", "trace_job_sdk:r1")  # the 0.5 inference URL + /chat/completions
    assert first["headers"]["x-api-key"] == ENV_KEY  # the task-app key, forwarded
    assert "authorization" not in first["headers"]
    assert set(first["body"]) == {"model", "messages", "max_completion_tokens", "tools", "tool_choice", "temperature"}
    assert (first["body"]["model"], first["body"]["max_completion_tokens"], first["body"]["temperature"]) == (
        "tiny", 512, 1.0)
    assert first["body"]["tool_choice"] == "required"
    assert [t["function"]["name"] for t in first["body"]["tools"]] == ["press"]
    assert [m["role"] for m in first["body"]["messages"]] == ["system", "user"]
    roles = [m["role"] for m in last["body"]["messages"]]
    assert roles == ["system", "user"] + ["assistant", "tool", "user"] * 3
    assistant, tool = last["body"]["messages"][2:4]
    assert assistant["content"] is None and assistant["tool_calls"][0]["id"] == "call_1"
    pressed = json.loads(assistant["tool_calls"][0]["function"]["arguments"])
    assert pressed == {"button": named_button(first["body"]["messages"])}
    assert tool == {"role": "tool", "tool_call_id": "call_1", "content": tool["content"]}
    assert re.fullmatch(r"Pressed \d: right\.", tool["content"])

    # Random play's floor: always pressing 1 scores the share of turns that named 1.
    fake_policy.choose = lambda messages: 1
    scores = []
    for seed in range(24):
        answer = rollout(app, fake_policy, seed=seed, rollout_id=f"c{seed}")
        targets = answer["reward_info"]["details"]["targets"]
        assert answer["reward_info"]["outcome_reward"] == targets.count(1) / 4
        scores.append(answer["reward_info"]["outcome_reward"])
    assert 0.1 < sum(scores) / len(scores) < 0.4


def test_a_guess_number_episode_is_scored_as_our_kits_app(sdk_taskapps, fake_policy):
    app = sdk_taskapps("guess_number")
    fake_policy.choose = lambda messages: 8
    founds, body = [], {}
    for seed in range(12):
        answer = rollout(app, fake_policy, seed=seed, rollout_id=f"g{seed}")
        found = answer["reward_info"]["details"]["found_on_turn"]
        # Always 8: found on turn 1 when the secret is 8 (score 1), else never (4 turns, 0).
        assert (found, answer["reward_info"]["outcome_reward"]) in ((1, 1.0), (None, 0.0))
        assert read_answer(answer).turns == (1 if found else 4)
        founds.append(found)
        body = body if found else fake_policy.requests[-1]["body"]
    assert 0 < founds.count(1) < 12
    assert body["tool_choice"] == {"type": "function", "function": {"name": "guess"}}
    assert [m["role"] for m in body["messages"]] == ["system", "user"] + ["assistant", "tool"] * 3
    assert re.fullmatch(r"8 is too high: the number is lower\.", body["messages"][-1]["content"])


def test_the_sdk_apps_speak_contract_05_with_the_sdks_key_rules(sdk_taskapps):
    app = sdk_taskapps("context_free")
    doc = loopback_http.get(app.url + "/openapi.json", timeout=10.0).json()
    assert generation_from_openapi(doc) == GEN_05
    assert loopback_http.get(app.url + "/health", headers={"X-API-Key": ENV_KEY}).json()["healthy"] is True
    assert loopback_http.get(app.url + "/health", headers={"Authorization": f"Bearer {ENV_KEY}"}).status_code == 200
    refused = loopback_http.get(app.url + "/health", headers={"X-API-Key": "not-the-key"})
    assert refused.status_code == 400 and refused.json()["detail"]["error"]["code"] == "unauthorised"
    taskset = loopback_http.get(app.url + "/task_info", headers={"X-API-Key": ENV_KEY}).json()["taskset"]
    assert taskset["buttons"] == [1, 2, 3, 4] and taskset["random_play_score"] == 0.25


def test_an_sdk_app_starts_on_a_free_port_and_stops_cleanly(tmp_path, sdk_python):
    with SdkTaskApp("guess_number", python=sdk_python, env_api_key=ENV_KEY, workdir=tmp_path).start() as app:
        assert app.running
        assert loopback_http.get(app.url + "/", timeout=5.0).json()["service"] == "guess-number"
        assert app.stop() == 0  # SIGTERM: uvicorn's graceful shutdown, exit status 0
    assert not app.running  # and leaving the block stops nothing twice
    assert app.stop() is None
    with pytest.raises(httpx.ConnectError):
        loopback_http.get(app.url + "/", timeout=5.0)
    assert not any((tmp_path / "home").iterdir())  # the SDK wrote nothing in its HOME


# -- the tabular stand-in against them, through the embedded backend -------------------------------


def job_config(env_name: str, seed: int, steps: int) -> dict[str, Any]:
    config = copy.deepcopy(load_demo_config())
    config["rollout"].update(env_name=env_name, max_turns=4)
    config["training"].update(num_epochs=1, iterations_per_epoch=steps, batch_size=4, group_size=8, max_turns=4,
                              seed=seed)
    config["evaluation"].update(instances=16, every_n_iters=steps, seeds=list(range(8)))
    return config


def run_job(api: httpx.Client, url: str, config: dict[str, Any]) -> tuple[list[float], float, list[dict[str, Any]]]:
    job_id = create_job(api, demo_payload(config, url))
    job = wait_terminal(api, job_id, timeout=240)
    assert job["status"] == "succeeded", job.get("error")
    points = api.get(f"/rl/jobs/{job_id}/metrics", params={"limit": 1000}).json()["points"]
    train = [p["value"] for p in points if p["name"] == "train.mean_score"]
    final = [p["value"] for p in points if p["name"] == "eval.mean_score"][-1]
    events = events_of(api, job_id)
    contract = next(e for e in events if e["type"] == "rl.taskapp.contract")
    assert (contract["data"]["contract"], contract["data"]["source"]) == (GEN_05, "openapi")
    return train, final, events


def test_the_stand_in_learns_the_context_free_app(api, sdk_taskapps):
    app = sdk_taskapps("context_free")
    # Seed 1 (measured, reproducible): train 0.25 at the first step, 1.0 from the sixth; the
    # final eval 0.98. The stand-in keys on the latest message, "Press button N.", 4 of them.
    train, final, events = run_job(api, app.url, job_config("press-the-button", seed=1, steps=8))
    assert train[0] < 0.45, train  # random presses
    assert final >= train[0] + 0.5, (train, final)
    done = events[-1]
    assert done["type"] == "rl.job.completed" and done["level"] == "info" and done["data"]["got_worse"] is False


def test_the_stand_in_on_the_guess_number_app_learns_or_says_it_got_worse(api, sdk_taskapps):
    app = sdk_taskapps("guess_number")
    # Seed 1: 12 steps of a memoryless table collapse onto a few guesses (measured before the
    # step-0 evaluation: the final sampled eval 0.109 below the first step's 0.273); whether the
    # final greedy eval ends below the step-0 one, the job says which.
    train, final, events = run_job(api, app.url, job_config("guess-number", seed=1, steps=12))
    done = events[-1]
    assert done["type"] == "rl.job.completed"
    # Judged from the step-0 evaluation (docs/embedded-policy.md#evaluation), as on our kit's
    # guess-number app (test_local_honest_standin.py, where seed 1 now ends just above it).
    baseline = done["data"]["baseline_eval_mean_score"]
    worse = final < baseline
    assert done["data"]["got_worse"] is worse and done["data"]["first_step_mean_score"] == train[0]
    assert (done["level"] == "warning" and "GOT WORSE" in done["message"]) is worse
    # the words of the change from step 0 (the final line's), not the first step's train score
    assert f"eval {baseline:.2f} -> {final:.2f}, " in done["message"] and " +/- " in done["message"]
