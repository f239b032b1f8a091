"""Both task-app rollout contract generations (docs/rollout-contracts.md): the request bodies,
the answer readers, detection from /openapi.json and from refusals, the chat endpoint's two
correlation id forms, the 0.5-shaped reference task apps, and the --contract option."""

from __future__ import annotations

import asyncio
import json
import math
import re
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from app.cli.dispatch import main
from app.cli.parser import build_parser
from app.local.servers import ServerHandle, _bind
from app.local.taskapps import gridworld
from app.local.taskapps.crafter import create_crafter_taskapp
from app.local.taskapps.gridworld_app import create_taskapp
from app.local.taskapps.kit import RolloutReplays, RolloutRequestV05
from app.local.training.rollout_contract import (
    CID_PREFIXES,
    GEN_02,
    GEN_05,
    SCORE_FIELDS,
    RolloutAsk,
    TaskAppError,
    chat_completions_url,
    cid_in_url,
    generation_from_openapi,
    parse_correlation_id,
    read_answer,
    read_score,
    read_tool_call_ids,
    read_turns,
    refusal_asks_for,
    rollout_body,
)
from support import loopback_http

from ..conftest import (
    ENV_KEY,
    api_client,
    create_job,
    events_of,
    payload,
    small_config,
    wait_terminal,
)
from ..taskapps.test_local_taskapp import _fake_policy, _oracle

AUTH = {"X-API-Key": ENV_KEY}


# -- request bodies -------------------------------------------------------------------------

ASK = RolloutAsk(job_id="job_ab", rollout_id="rl-1-0-ff", mode="rl", seed=5, env_name="gridworld",
                 policy_name="p", model="m", max_turns=2, ops=("agent", "env"), timeout_s=30.0,
                 api_base="http://127.0.0.1:8000/api/v1")


def test_the_0_2_body_is_the_one_we_always_sent():
    assert rollout_body(GEN_02, ASK) == {
        "run_id": "job_ab:rl-1-0-ff",
        "env": {"env_name": "gridworld", "config": {"max_turns": 2}, "seed": 5},
        "policy": {"policy_name": "p", "config": {
            "model": "m", "max_turns": 2, "temperature": 1.0,
            "inference_url": "http://127.0.0.1:8000/api/v1/chat/completions?cid=trace_job_ab:rl-1-0-ff"}},
        "ops": ["agent", "env", "agent", "env"],
        "record": {"trajectories": True, "logprobs": False, "value": False, "return_trace": False,
                   "trace_format": "compact"},
        "on_done": "reset",
        "safety": {"max_ops": 100_000, "max_time_s": 30.0},
        "training_session_id": None,
        "synth_base_url": None,
        "mode": "rl",
    }


def test_the_0_5_body_names_the_rollout_by_trace_correlation_id_and_the_path():
    body = rollout_body(GEN_05, ASK)
    assert body == {
        "trace_correlation_id": "trace_job_ab:rl-1-0-ff",
        "env": {"env_name": "gridworld", "config": {"max_turns": 2}, "seed": 5},
        "policy": {"policy_name": "p", "config": {
            "model": "m", "max_turns": 2, "temperature": 1.0,
            "inference_url": "http://127.0.0.1:8000/api/v1/job_ab/trace_job_ab:rl-1-0-ff"}},
        "on_done": "reset",
        "safety": {"max_time_s": 30.0},
        "training_session_id": None,
        "synth_base_url": None,
    }
    # What an SDK task app does with that URL: normalise it, then find the same id in it.
    url = chat_completions_url(body["policy"]["config"]["inference_url"])
    assert url == "http://127.0.0.1:8000/api/v1/job_ab/trace_job_ab:rl-1-0-ff/chat/completions"
    assert cid_in_url(url) == body["trace_correlation_id"]


@pytest.mark.parametrize("url,normalised", [
    # The SDK's task apps normalise these so (docs/rollout-contracts.md).
    ("https://api.groq.com", "https://api.groq.com/v1/chat/completions"),
    ("https://modal.host?cid=trace_123", "https://modal.host/v1/chat/completions?cid=trace_123"),
    ("https://api.openai.com/v1", "https://api.openai.com/v1/chat/completions"),
    ("https://api.groq.com/openai/v1/chat/completions", "https://api.groq.com/openai/v1/chat/completions"),
    ("http://h:1/api/v1/t/cid_x", "http://h:1/api/v1/t/cid_x/chat/completions"),
    ("http://h:1/x/chat/", "http://h:1/x/chat/completions"),
])
def test_inference_urls_are_normalised_as_the_sdk_does(url, normalised):
    assert chat_completions_url(url) == normalised


@pytest.mark.parametrize("url,cid", [
    ("http://h/api/v1/job_1/trace_job_1:r/chat/completions", "trace_job_1:r"),
    ("http://h/v1/t/cid_abc", "cid_abc"),
    ("http://h/v1/t/eval_abc/chat/completions?cid=trace_other", "eval_abc"),  # the path wins
    ("http://h/v1/chat/completions?cid=trace_j:r", "trace_j:r"),
    ("http://h/v1/chat/completions?cid=j:r", "j:r"),
    ("http://h/v1/chat/completions", None),
    ("http://h/v1/job_1/plain/chat/completions", None),  # no prefix: not taken for an id
    ("x://[::1/v1/trace_a", None),  # not a URL
])
def test_the_cid_of_an_inference_url(url, cid):
    assert cid_in_url(url) == cid


@pytest.mark.parametrize("prefix", [*CID_PREFIXES, ""])
def test_every_cid_prefix_names_the_same_job_and_rollout(prefix):
    assert parse_correlation_id(f"{prefix}job_1:rl-2-3-ab") == ("job_1", "rl-2-3-ab")


# -- answers --------------------------------------------------------------------------------


@pytest.mark.parametrize("answer,score,field", [
    ({"trace_correlation_id": "t", "reward_info": {"outcome_reward": 0.75, "details": {}}},
     0.75, "reward_info.outcome_reward"),  # 0.5.0
    ({"trace_correlation_id": "t", "metrics": {"outcome_reward": 1}}, 1.0, "metrics.outcome_reward"),  # 0.4.12
    ({"metrics": {"mean_return": 0.5, "episode_returns": [0.0]}}, 0.5, "metrics.mean_return"),  # 0.2
    ({"metrics": {"episode_returns": [0.25, 0.75, 1.0]}}, 2 / 3, "metrics.episode_returns"),
    # The first field present decides, in SCORE_FIELDS order.
    ({"reward_info": {"outcome_reward": 0.1}, "metrics": {"outcome_reward": 0.9, "mean_return": 0.9}},
     0.1, "reward_info.outcome_reward"),
    ({"metrics": {"outcome_reward": 0.2, "mean_return": 0.9}}, 0.2, "metrics.outcome_reward"),
    ({"metrics": {"episode_returns": [], "mean_return": -1.5}}, -1.5, "metrics.mean_return"),
])
def test_the_score_of_every_generation(answer, score, field):
    got, where = read_score(answer)
    assert math.isclose(got, score) and where == field


@pytest.mark.parametrize("answer,needle", [
    ({"reward_info": {"outcome_reward": float("nan")}}, "reward_info.outcome_reward is nan"),
    ({"metrics": {"outcome_reward": float("inf")}}, "metrics.outcome_reward is inf"),
    ({"metrics": {"mean_return": 10**400}}, "metrics.mean_return is 1000"),
    ({"metrics": {"mean_return": "0.5"}}, "metrics.mean_return is not a number: '0.5'"),
    ({"metrics": {"mean_return": True}}, "metrics.mean_return is not a number: True"),
    ({"metrics": {"episode_returns": [1, "x"]}}, "metrics.episode_returns must be a list of finite numbers"),
    ({"metrics": {"episode_returns": [1e308, 1e308]}}, "metrics.episode_returns has no finite mean"),
])
def test_a_score_that_is_not_a_finite_number_is_refused(answer, needle):
    with pytest.raises(TaskAppError) as error:
        read_score(answer)
    assert str(error.value).startswith(needle), error.value


@pytest.mark.parametrize("answer", [{}, {"metrics": {}}, {"metrics": None, "reward_info": []}, [], None,
                                    {"reward_info": {"details": {"outcome_reward": 1.0}}}])
def test_an_answer_without_a_score_names_every_field_looked_for(answer):
    with pytest.raises(TaskAppError) as error:
        read_score(answer)
    assert all(field in str(error.value) for field in SCORE_FIELDS), error.value


def test_turns_and_tool_call_ids_of_every_generation():
    old = {"metrics": {"mean_return": 1.0, "num_steps": 2},
           "trajectories": [{"steps": [{"tool_calls": [{"id": "a"}]}, {"tool_calls": [{"id": "b"}, "junk"]}]},
                            "junk", {"steps": None}]}
    new = {"reward_info": {"outcome_reward": 1.0, "details": {"num_steps": 3}}, "trace": {
        "event_history": [
            {"llm_response": {"message": {"tool_calls": [{"id": "c"}]}}},
            {"call_records": [{"output_tool_calls": [{"call_id": "d"}, {"call_id": 5}]}]},
            "junk"],
        "session_trace": {"event_history": [{"llm_response": {"message": {"tool_calls": [{"id": "e"}]}}}]}}}
    assert (read_turns(old), read_tool_call_ids(old)) == (2, {"a", "b"})
    assert (read_turns(new), read_tool_call_ids(new)) == (3, {"c", "d", "e"})
    assert read_turns({"metrics": {"num_steps": True}}) is None and read_turns({"metrics": {"num_steps": -1}}) is None
    outcome = read_answer(new)
    assert (outcome.score, outcome.score_field, outcome.turns, outcome.tool_call_ids) == (
        1.0, "reward_info.outcome_reward", 3, frozenset({"c", "d", "e"}))


# -- detection ------------------------------------------------------------------------------


@pytest.mark.parametrize("factory", [create_taskapp, create_crafter_taskapp])
def test_the_reference_task_apps_describe_their_generation_in_openapi(factory):
    for contract in (GEN_02, GEN_05):
        doc = factory(env_api_keys=[ENV_KEY], contract=contract).openapi()
        assert generation_from_openapi(doc) == contract
        required = doc["components"]["schemas"]["RolloutRequest"]["required"]
        assert ("trace_correlation_id" in required) == (contract == GEN_05)
        assert ("run_id" in required) == (contract == GEN_02)
    with pytest.raises(ValueError, match="contract must be one of 0.2, 0.5"):
        factory(env_api_keys=[ENV_KEY], contract="0.3")


@pytest.mark.parametrize("doc", [
    None, [], {}, {"paths": {"/rollout": {"post": {}}}}, FastAPI().openapi(),
    {"components": {"schemas": {"RolloutRequest": {"required": ["env", "policy"]}}}},
    {"components": {"schemas": {"RolloutRequest": {"required": "run_id"}}}},
])
def test_a_document_that_does_not_say_gives_no_generation(doc):
    assert generation_from_openapi(doc) is None


def test_the_schema_is_found_by_name_when_the_route_has_no_ref():
    doc = {"components": {"schemas": {"RolloutRequest": {"required": ["trace_correlation_id", "env"]}}}}
    assert generation_from_openapi(doc) == GEN_05


def _missing(field: str, echoed: dict) -> dict:
    """FastAPI's own 422 (the SDK's task apps): it echoes the body it refused as `input`."""
    return {"detail": [{"type": "missing", "loc": ["body", field], "msg": "Field required", "input": echoed}]}


@pytest.mark.parametrize("sent,status,answer,asked", [
    (GEN_02, 422, _missing("trace_correlation_id", {"run_id": "r", "mode": "rl"}), (GEN_05, "trace_correlation_id")),
    (GEN_05, 422, _missing("run_id", {"trace_correlation_id": "t"}), (GEN_02, "run_id")),
    (GEN_05, 422, _missing("mode", {"trace_correlation_id": "t"}), (GEN_02, "mode")),
    (GEN_02, 400, {"detail": "Invalid request: body.trace_correlation_id: Field required"},
     (GEN_05, "trace_correlation_id")),
    (GEN_05, 422, {"detail": "Invalid request: body.run_id: Field required; body.mode: Field required"},
     (GEN_02, "run_id")),
    (GEN_05, 400, {"detail": {"error": "'mode' is required"}}, (GEN_02, "mode")),
    # Refusals that name neither field of the other generation stay failures.
    (GEN_02, 422, _missing("env", {"trace_correlation_id": "echoed, not asked for"}), None),
    (GEN_05, 422, {"detail": [{"loc": ["body", "env", "seed"], "msg": "bad", "input": {"run_id": "x"}}]}, None),
    (GEN_05, 400, {"detail": "a cid is needed in rl mode"}, None),  # "mode" as a word, not a field
    (GEN_02, 400, {"detail": "run_id must not be empty"}, None),  # a field we did send
    (GEN_05, 400, {"detail": "trace_correlation_id differs from the URL's"}, None),
    (GEN_02, 500, _missing("trace_correlation_id", {}), None),
    (GEN_02, 404, {"detail": "trace_correlation_id"}, None),
    (GEN_02, 422, "trace_correlation_id", None),
])
def test_which_refusals_ask_for_the_other_generation(sent, status, answer, asked):
    assert refusal_asks_for(sent, status, answer) == asked


# -- the 0.5 reference task app -------------------------------------------------------------


def _body_05(cid: str, inference_url: str, seed: int = 3, max_turns: int = 12) -> dict[str, Any]:
    return {"trace_correlation_id": cid,
            "env": {"env_name": "gridworld", "seed": seed, "config": {"max_turns": max_turns}},
            "policy": {"policy_name": "p", "config": {"model": str(seed), "inference_url": inference_url}},
            "safety": {"max_time_s": 60}}


def test_a_0_5_rollout_answers_in_the_0_5_0_shape(taskapp_05):
    app, calls = _fake_policy(_oracle)
    with ServerHandle("fake policy", app, _bind("127.0.0.1", 0)).start("/docs") as policy:
        url = f"{policy.url}/api/v1/job_x/trace_job_x:r1"
        resp = loopback_http.post(taskapp_05.url + "/rollout", headers=AUTH, timeout=30,
                                  json={**_body_05("trace_job_x:r1", url), "run_id": "ignored", "mode": "rl"})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert set(out) == {"trace_correlation_id", "reward_info", "trace", "inference_url", "artifact",
                        "success_status", "status_detail"}
    assert (out["trace_correlation_id"], out["inference_url"]) == ("trace_job_x:r1", url)
    assert (out["artifact"], out["success_status"], out["status_detail"]) == (None, "success", None)
    shortest = gridworld.layout(3).shortest
    reward = out["reward_info"]
    assert reward["outcome_reward"] == pytest.approx(1 - gridworld.STEP_COST * shortest)
    assert len(reward["event_rewards"]) == reward["details"]["num_steps"] == shortest == len(calls)
    # The SDK's normalisation of a path-form URL: /chat/completions appended.
    assert {c["path"] for c in calls} == {"/api/v1/job_x/trace_job_x:r1/chat/completions"}
    trace = out["trace"]
    assert trace["metadata"]["trace_correlation_id"] == "trace_job_x:r1"
    assert [e["event_type"] for e in trace["event_history"]] == ["lm_call"] * shortest
    outcome = read_answer(out)
    assert outcome.turns == shortest and outcome.tool_call_ids == {"c1"}  # the fake policy's call id


def test_the_0_5_app_refuses_a_0_2_body_naming_trace_correlation_id(taskapp, taskapp_05):
    old = {"run_id": "r", "mode": "rl", "env": {"seed": 1},
           "policy": {"config": {"inference_url": "http://127.0.0.1:9/v1/chat/completions?cid=trace_j:r"}}}
    resp = loopback_http.post(taskapp_05.url + "/rollout", headers=AUTH, json=old)
    assert resp.status_code == 422 and "trace_correlation_id" in resp.json()["detail"]
    assert refusal_asks_for(GEN_02, resp.status_code, resp.json()) == (GEN_05, "trace_correlation_id")
    # And the other way round: what the trainer reads from the 0.2 app.
    resp = loopback_http.post(taskapp.url + "/rollout", headers=AUTH, json=_body_05("trace_j:r", "http://127.0.0.1:9/v1"))
    assert resp.status_code == 422
    assert refusal_asks_for(GEN_05, resp.status_code, resp.json()) == (GEN_02, "run_id")


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:9/api/v1/job_x/trace_job_x:other",
    "http://127.0.0.1:9/api/v1/job_x/cid_job_x:r1/chat/completions",
    "http://127.0.0.1:9/v1/chat/completions?cid=trace_job_x:other",
])
def test_the_0_5_app_refuses_an_inference_url_naming_another_rollout(taskapp_05, url):
    resp = loopback_http.post(taskapp_05.url + "/rollout", headers=AUTH, json=_body_05("trace_job_x:r1", url))
    assert resp.status_code == 400
    detail = resp.json()["detail"]
    assert "differs from trace_correlation_id" in detail
    assert "job_x" not in detail  # the ids are credentials: not echoed


async def test_a_retried_0_5_rollout_is_played_once():
    """The replay guarantee of docs/hardening.md, keyed by trace_correlation_id in 0.5."""
    replays, plays, gate = RolloutReplays(), [], asyncio.Event()

    async def play() -> dict:
        plays.append(1)
        await gate.wait()
        return {"play": len(plays)}

    def req(cid: str, seed: int = 1) -> Any:
        return RolloutRequestV05.model_validate(_body_05(cid, "http://127.0.0.1:9/v1", seed=seed))

    first = asyncio.ensure_future(replays.run(req("trace_j:r1"), play))
    repeat = asyncio.ensure_future(replays.run(req("trace_j:r1"), play))  # arrives while the first runs
    while not plays:
        await asyncio.sleep(0)
    gate.set()
    assert await first == await repeat == {"play": 1}
    assert await replays.run(req("trace_j:r1"), play) == {"play": 1}  # after it succeeded
    assert len(plays) == 1
    assert await replays.run(req("trace_j:r2"), play) == {"play": 2}  # another rollout
    assert await replays.run(req("trace_j:r1", seed=2), play) == {"play": 3}  # another body

    async def fail() -> dict:
        plays.append(1)
        raise RuntimeError("the episode failed")

    with pytest.raises(RuntimeError):
        await replays.run(req("trace_j:r4"), fail)
    assert await replays.run(req("trace_j:r4"), play) == {"play": 5}  # a failure is played again


# -- the chat endpoint ----------------------------------------------------------------------

CHAT = {"messages": [{"role": "user", "content": "state: pos=0,0 goal=2,2 blocked=-"}],
        "tools": [{"type": "function", "function": {"name": "move", "parameters": {
            "type": "object", "properties": {"direction": {"enum": ["up", "down"]}}, "required": ["direction"]}}}]}


@pytest.fixture(scope="module")
def finished_job(backend, taskapp) -> str:
    with api_client(backend) as api:
        job_id = create_job(api, payload(taskapp.url, small_config(seed=1)))
        assert wait_terminal(api, job_id)["status"] == "succeeded"
    return job_id


@pytest.mark.parametrize("prefix", [*CID_PREFIXES, ""])
@pytest.mark.parametrize("root", ["/api/v1", "/v1"])
def test_the_chat_endpoint_takes_the_cid_in_the_path_or_the_query(backend, finished_job, api, prefix, root):
    cid = f"{prefix}{finished_job}:r1"
    for url in (f"{backend.url}{root}/{finished_job}/{cid}/chat/completions",
                f"{backend.url}{root}/chat/completions?cid={cid}"):
        resp = loopback_http.post(url, json=CHAT, headers={"Authorization": api.headers["Authorization"]})
        assert resp.status_code == 200, resp.text
        assert resp.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "move"
        # Without a key, only a rollout in flight may ask: this one is not.
        assert loopback_http.post(url, json=CHAT).status_code == 401


@pytest.mark.parametrize("path,query,status,needle", [
    ("/api/v1/job_other/trace_{job}:r1/chat/completions", "", 400, "names trial 'job_other'"),
    ("/v1/{job}/trace_/chat/completions", "", 400, "must name the job"),
    ("/api/v1/{job}/trace_{job}:r1/chat/completions", "?cid=trace_{job}:r2", 400, "two different correlation ids"),
    ("/api/v1/job_none/eval_job_none:r1/chat/completions", "", 404, "Job job_none not found"),
])
def test_a_path_form_cid_that_cannot_be_used_is_a_clear_4xx(backend, finished_job, api, path, query, status,
                                                             needle):
    url = backend.url + (path + query).format(job=finished_job)
    resp = loopback_http.post(url, json=CHAT, headers={"Authorization": api.headers["Authorization"]})
    assert resp.status_code == status and needle in resp.json()["detail"], resp.text


def test_a_path_form_chat_body_may_be_as_large_as_a_query_form_one(backend):
    """The chat endpoint's 4 MiB body limit holds for its path form too (docs/hardening.md)."""
    url = f"{backend.url}/api/v1/job_x/trace_job_x:r1/chat/completions"
    big = {"messages": [{"role": "user", "content": "x" * (2 << 20)}]}
    assert loopback_http.post(url, json=big).status_code == 401  # read and refused for its credentials, not its size
    huge = {"messages": [{"role": "user", "content": "x" * (5 << 20)}]}
    assert loopback_http.post(url, json=huge).status_code == 413


# -- jobs: detection end to end -------------------------------------------------------------


def _serve(app: FastAPI) -> ServerHandle:
    return ServerHandle("task app", app, _bind("127.0.0.1", 0)).start("/")


def _without_openapi(app: FastAPI) -> FastAPI:
    """The app as if built with FastAPI(openapi_url=None)."""
    app.openapi_url = None
    app.router.routes[:] = [r for r in app.router.routes if getattr(r, "path", None) != "/openapi.json"]
    return app


def _contract_events(api, job_id) -> list[dict]:
    return [e for e in events_of(api, job_id) if e["type"] == "rl.taskapp.contract"]


def _run(api, url: str, config: dict | None = None, decisions_per_turn: int = 1) -> tuple[dict, list[dict]]:
    """A seeded job that must succeed, learning from every turn once (the gridworld's move is
    one decision a turn; crafter-lite's array of actions at least two)."""
    job_id = create_job(api, payload(url, config or small_config(seed=3)))
    job = wait_terminal(api, job_id, timeout=60)
    assert job["status"] == "succeeded", job.get("error")
    steps = [e["data"] for e in events_of(api, job_id) if e["type"] == "rl.train.step"]
    if decisions_per_turn == 1:
        assert steps and all(s["decisions"] == s["turns"] > 0 for s in steps), steps
    else:
        assert steps and all(s["decisions"] >= decisions_per_turn * s["turns"] > 0 for s in steps), steps
    return job, _contract_events(api, job_id)


def test_a_0_5_task_app_is_detected_from_its_openapi(api, taskapp_05):
    _, events = _run(api, taskapp_05.url)
    assert len(events) == 1 and events[0]["level"] == "info"
    assert "rollout contract 0.5" in events[0]["message"] and events[0]["message"].endswith("from /openapi.json")
    assert events[0]["data"]["contract"] == "0.5" and events[0]["data"]["source"] == "openapi"


def test_a_0_5_task_app_without_openapi_is_detected_by_its_422(api):
    with _serve(_without_openapi(create_taskapp(env_api_keys=[ENV_KEY], contract=GEN_05))) as taskapp:
        assert loopback_http.get(taskapp.url + "/openapi.json").status_code == 404
        _, events = _run(api, taskapp.url)
    assert len(events) == 1
    assert "rollout contract 0.5" in events[0]["message"]
    assert events[0]["message"].endswith("after a 422 that asked for trace_correlation_id")


def test_a_0_2_task_app_with_a_stale_0_5_openapi_is_corrected_by_its_422(api):
    stale = create_taskapp(env_api_keys=[ENV_KEY], contract=GEN_05).openapi()
    app = _without_openapi(create_taskapp(env_api_keys=[ENV_KEY], contract=GEN_02))

    @app.get("/openapi.json", include_in_schema=False)
    async def stale_openapi() -> dict:
        return stale

    with _serve(app) as taskapp:
        _, events = _run(api, taskapp.url)
    assert [e["data"]["contract"] for e in events] == ["0.5", "0.2"]
    assert events[1]["message"].endswith("after a 422 that asked for run_id")


def test_a_0_2_task_app_without_openapi_is_spoken_to_in_0_2(api):
    with _serve(_without_openapi(create_taskapp(env_api_keys=[ENV_KEY]))) as taskapp:
        _, events = _run(api, taskapp.url)
    assert len(events) == 1 and (events[0]["data"]["contract"], events[0]["data"]["source"]) == ("0.2", "default")
    assert "by default" in events[0]["message"]


def test_a_refusal_that_names_neither_generation_still_fails_the_job(api):
    app = FastAPI(openapi_url=None)

    @app.post("/rollout")
    async def refuse() -> JSONResponse:
        return JSONResponse({"detail": "seed 5 is not in the dataset"}, status_code=422)

    with _serve(app) as taskapp:
        job_id = create_job(api, payload(taskapp.url, small_config(seed=3)))
        job = wait_terminal(api, job_id)
    assert job["status"] == "failed"
    assert "HTTP 422: seed 5 is not in the dataset" in job["error"]
    assert not _contract_events(api, job_id)


def test_crafter_lite_in_0_5_trains(api):
    with _serve(create_crafter_taskapp(env_api_keys=[ENV_KEY], contract=GEN_05)) as crafter:
        _, events = _run(api, crafter.url, small_config(seed=4, max_turns=6), decisions_per_turn=2)
    assert [e["data"]["source"] for e in events] == ["openapi"] and events[0]["data"]["contract"] == "0.5"


# -- the command line -----------------------------------------------------------------------


def test_the_taskapp_command_takes_a_contract():
    parse = build_parser().parse_args
    assert parse(["taskapp"]).contract == "0.2"
    assert parse(["taskapp", "--contract", "0.5", "--game", "crafter-lite"]).contract == "0.5"
    with pytest.raises(SystemExit):
        parse(["taskapp", "--contract", "0.3"])


def test_synth_tui_taskapp_contract_0_5_serves_the_0_5_app(monkeypatch):
    seen: dict[str, Any] = {}
    monkeypatch.setattr("app.local.servers.serve_taskapp", lambda *args, **kwargs: seen.update(a=args, k=kwargs))
    monkeypatch.setenv("ENVIRONMENT_API_KEY", ENV_KEY)
    assert main(["taskapp", "--contract", "0.5"]) == 0
    assert seen, "serve_taskapp was not called"
    assert "0.5" in seen["a"] or seen["k"].get("contract") == "0.5", json.dumps(seen, default=str)


def test_train_backend_local_trains_a_0_5_task_app_with_a_verifier_config(taskapp_05, tmp_path, capsys):
    """`--backend local` end to end (docs/compatibility.md): the embedded backend started in
    this process with its own key (no SYNTH_API_KEY in the .env), handed the .env's
    ENVIRONMENT_API_KEY, training a 0.5-shape task app from a config written for 0.5 SDKs."""
    from app.commands.demo import demo_config_path

    # The demo config cut to a seeded job of a few rollouts: this test asserts the wiring and
    # the job's success, not learning (test_local_learning.py trains the whole config).
    text = demo_config_path().read_text()
    for key, value in {"seed": 1, "num_epochs": 1, "iterations_per_epoch": 2, "batch_size": 2, "group_size": 2,
                       "instances": 2, "every_n_iters": 1, "seeds": [0, 1]}.items():
        text, found = re.subn(rf"^{key} = .*$", f"{key} = {json.dumps(value)}", text, flags=re.MULTILINE)
        assert found == 1, key
    assert "seed = 1\n" in text
    config = tmp_path / "demo_verifier.toml"
    config.write_text(text + '\n[verifier]\nenabled = false\n[verifier.options]\nprovider = "synth"\nmodel = "m"\n')
    env = tmp_path / ".env"
    env.write_text(f"ENVIRONMENT_API_KEY={ENV_KEY}\nTASK_APP_URL={taskapp_05.url}\n")
    code = main(["train", "--type", "rl", "--no-tui", "--backend", "local", "--config", str(config),
                 "--env-file", str(env), "--poll-interval", "0.2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Embedded backend: http://127.0.0.1:" in err and "Final status: succeeded" in out
    assert "rl.taskapp.contract" in out and ENV_KEY not in out + err


async def test_the_embedded_backend_names_both_backend_generations_to_the_probe(backend):
    """docs/compatibility.md: the probe learns both generations, so configs go as written."""
    from app.core.api.client import SynthClient

    from ..conftest import API_KEY

    async with SynthClient(backend.url, API_KEY, retries=0) as client:
        support = await client.probe_rl()
    assert support.generations == {"0.2", "0.5"} and "X-Synth-RL-Contract" in support.how
