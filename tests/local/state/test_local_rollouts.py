"""The rollouts the embedded backend keeps for the inspector (docs/wire-contract.md#rollouts):
real jobs on loopback servers, the per-job cap on a real SQLite file, secrets scrubbed, and
what the routes answer to unknown ids and bad queries.

Seeded runs ([training] seed), so the episodes asserted on are the same every time."""

from __future__ import annotations

import base64
import json
import math
import random
import sqlite3
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import given, settings
from hypothesis import strategies as st

from app.local.policies.tabular.policy import TabularPolicy
from app.local.servers import ServerHandle, _bind, start_backend
from app.local.state.rollout_store import ROW_OVERHEAD
from app.local.state.store import Store
from app.local.taskapps.gridworld_app import MOVE_TOOL
from app.local.taskapps.kit import PolicyLink, add_rollout_route, ask_policy, base_taskapp, chat_url, rollout_response
from app.local.training.job_run import JobRun, OpenRollout
from app.local.training.plan import plan_from_payload
from app.local.training.rollout_record import (
    ROLLOUT_MEMORY_CHARS,
    KeptRollout,
    StepSample,
    chat_turn,
    match_turns,
    observation_of,
    read_step_reports,
)
from support import loopback_http
from support.tiers import examples

from ..conftest import (
    API_KEY,
    ENV_KEY,
    api_client,
    create_job,
    events_of,
    payload,
    small_config,
    wait_terminal,
)


def all_rollouts(api: httpx.Client, job_id: str, **params: Any) -> list[dict[str, Any]]:
    items, after = [], None
    while True:
        query = {**params, **({"after": after} if after else {})}
        page = api.get(f"/rl/jobs/{job_id}/rollouts", params=query)
        assert page.status_code == 200, page.text
        body = page.json()
        items += body["rollouts"]
        after = body["next_after"]
        if after is None:
            return items


# -- a real demo job ------------------------------------------------------------------------


@pytest.fixture
def demo_job(backend: ServerHandle, seeded_demo_job: tuple[str, Any]) -> Iterator[tuple[httpx.Client, str]]:
    """The seeded demo job (conftest.seeded_demo_config), and a client of its backend."""
    with api_client(backend) as api:
        yield api, seeded_demo_job[0]


def test_a_demo_job_keeps_a_sample_of_each_step_and_every_eval_episode(demo_job):
    api, job_id = demo_job
    rollouts = all_rollouts(api, job_id, limit=7)  # several pages
    assert [(r["step"], r["phase"] == "eval", r["index"]) for r in rollouts] == sorted(
        (r["step"], r["phase"] == "eval", r["index"]) for r in rollouts)
    evals = [r for r in rollouts if r["phase"] == "eval"]
    # every eval episode: at step 0 (before any update), after step 4 and after step 8
    assert sorted({r["step"] for r in evals}) == [0, 4, 8] and len(evals) == 3 * 16
    train_means = {p["step"]: p["value"] for p in api.get(f"/rl/jobs/{job_id}/metrics", params={"limit": 1000})
                   .json()["points"] if p["name"] == "train.mean_score"}
    for step in range(1, 9):
        kept = [r for r in rollouts if r["phase"] == "train" and r["step"] == step]
        assert len(kept) == 4, kept  # the best, the worst and evenly spaced others
        rewards = [r["reward"] for r in kept]
        assert min(rewards) <= train_means[step] <= max(rewards)
    assert all_rollouts(api, job_id, step=4, phase="eval") == [r for r in evals if r["step"] == 4]


def test_an_early_rollout_wanders_and_a_late_one_walks_to_the_goal(demo_job):
    api, job_id = demo_job
    early = min((r for r in all_rollouts(api, job_id, step=1, phase="train")), key=lambda r: r["reward"])
    assert early["reward"] == 0 and early["turns"] == 12
    wander = api.get(f"/rl/jobs/{job_id}/rollouts/{early['rollout_id']}").json()
    assert len(wander["trajectory"]) == 12 and not any(t["reward"] for t in wander["trajectory"])
    first = wander["trajectory"][0]
    assert "state: goal=" in first["observation"] and first["tools"] == ["move"]
    assert first["tool"] == "move" and first["arguments"]["direction"] in ("up", "down", "left", "right")
    assert first["arguments_schema"]["properties"]["direction"]["enum"]
    assert first["applied"].startswith("action=") and "moved=" in first["applied"]
    assert wander["trajectory"][-1]["done"] and not wander["trajectory"][0]["done"]

    late = max(all_rollouts(api, job_id, step=8, phase="eval"), key=lambda r: r["reward"])
    assert late["reward"] >= 0.9 and late["turns"] < 12
    walk = api.get(f"/rl/jobs/{job_id}/rollouts/{late['rollout_id']}").json()
    assert walk["seed"] == late["seed"] and walk["phase"] == "eval" and walk["step"] == 8
    assert [t["index"] for t in walk["trajectory"]] == list(range(1, late["turns"] + 1))
    assert walk["trajectory"][-1]["done"] and walk["trajectory"][-1]["reward"] == pytest.approx(late["reward"])
    assert all(t["reward"] == 0 for t in walk["trajectory"][:-1])
    # The same route under /learning, as every job route.
    assert api.get(f"/learning/jobs/{job_id}/rollouts/{late['rollout_id']}").json() == walk


def test_a_0_5_task_app_reports_rewards_and_done_in_its_trace(api, taskapp_05):
    config = small_config(seed=3)
    job_id = create_job(api, payload(taskapp_05.url, config))
    assert wait_terminal(api, job_id)["status"] == "succeeded"
    rollouts = all_rollouts(api, job_id)
    assert {r["phase"] for r in rollouts} == {"train", "eval"}
    for summary in rollouts:
        full = api.get(f"/rl/jobs/{job_id}/rollouts/{summary['rollout_id']}").json()
        assert len(full["trajectory"]) == summary["turns"]
        assert full["trajectory"][-1]["done"]
        assert sum(t["reward"] for t in full["trajectory"]) == pytest.approx(summary["reward"])
        assert all(t["applied"] for t in full["trajectory"])


# -- the cap --------------------------------------------------------------------------------


def _kept(n: int, step: int, text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    summary = {"rollout_id": f"rl-{step}-{n}", "phase": "train", "step": step, "index": n, "seed": n,
               "reward": n / 10, "turns": 3}
    record = {"turns_kept": 3, "turns_cut": 0, "trajectory": [
        {"index": i, "observation": f"{text} step {step} rollout {n} turn {i}", "images": [], "tools": ["move"],
         "tool": "move", "arguments": {"direction": "up"}, "applied": "action=\"up\"", "reward": 0.0,
         "done": i == 3} for i in range(1, 4)]}
    return summary, record


def test_the_cap_holds_on_a_long_series_and_drops_the_oldest_first(db_path):
    store = Store(db_path)
    cap = 40_000
    store.create_job("job_cap", {"data": {}}, "h", None)
    noise = base64.b64encode(bytes(range(256)) * 2).decode()  # compresses poorly, as images would
    for step in range(1, 301):
        for n in range(4):
            assert store.rollouts.add("job_cap", *_kept(n, step, noise), max_bytes=cap, created_at="t")
        assert store.rollouts.total_bytes("job_cap") <= cap
    kept, _ = store.rollouts.list("job_cap", step=None, phase=None, limit=100_000, after=None)
    written = [(step, n) for step in range(1, 301) for n in range(4)]
    # The newest are all there, and the oldest went first: what is kept is the end of what was written.
    assert 10 < len(kept) < len(written)
    assert [(r["step"], r["index"]) for r in kept] == written[-len(kept):]
    assert store.rollouts.get("job_cap", "rl-1-0") is None
    assert store.rollouts.get("job_cap", "rl-300-3")["trajectory"][2]["done"] is True
    store.close()
    reopened = Store(db_path)  # the total is read back from the file, and still holds
    assert reopened.rollouts.total_bytes("job_cap") <= cap
    assert reopened.rollouts.add("job_cap", *_kept(9, 301, noise), max_bytes=cap, created_at="t")
    assert reopened.rollouts.total_bytes("job_cap") <= cap
    # A rollout larger than the cap on its own is not stored at all.
    assert not reopened.rollouts.add("job_cap", *_kept(0, 302, noise * 50), max_bytes=ROW_OVERHEAD + 200,
                                     created_at="t")
    reopened.close()


def test_a_job_whose_cap_is_small_keeps_only_its_latest_rollouts(api, taskapp):
    config = small_config(seed=5, iterations_per_epoch=6)
    config["rollout"]["inspect_max_bytes"] = 6_000
    config["rollout"]["inspect_per_step"] = 2
    job_id = create_job(api, payload(taskapp.url, config))
    assert wait_terminal(api, job_id)["status"] == "succeeded"
    kept = all_rollouts(api, job_id)
    assert kept and kept[-1]["step"] == 6 and kept[0]["step"] > 1
    config["rollout"]["inspect_max_bytes"] = 0  # keeps nothing
    job_id = create_job(api, payload(taskapp.url, config))
    assert wait_terminal(api, job_id)["status"] == "succeeded"
    assert all_rollouts(api, job_id) == []


@pytest.mark.parametrize("key, value", [("inspect_per_step", -1), ("inspect_max_bytes", "big"),
                                        ("inspect_per_step", 10_000)])
def test_an_inspect_setting_out_of_range_is_refused(api, taskapp, key, value):
    # Set after the client's own checks (which refuse it too): the backend's rule is tested here.
    body = payload(taskapp.url, small_config())
    body["data"]["config"]["rollout"][key] = value
    resp = api.post("/rl/jobs", json=body)
    assert resp.status_code == 422 and f"rollout.{key}" in resp.json()["detail"]


def test_the_step_sample_keeps_the_best_the_worst_and_spaced_others():
    sample = StepSample(4, 8)
    rewards = [0.5, 0.1, 0.9, 0.1, 0.3, 0.9, 0.2, 0.4]
    for index in (7, 3, 5, 0, 1, 2, 6, 4):  # in the order they finish
        sample.offer(KeptRollout(f"r{index}", "train", 1, index, 1, rewards[index], 1, []))
    assert [r.index for r in sample.chosen()] == [0, 1, 2, 4]  # best 2 (first 0.9), worst 1, spaced 0 and 4
    assert [r.index for r in _chosen(StepSample(1, 8), rewards)] == [2]
    assert _chosen(StepSample(0, 8), rewards) == []
    assert len(_chosen(StepSample(20, 8), rewards)) == 8


def _chosen(sample: StepSample, rewards: list[float]) -> list[KeptRollout]:
    for index, reward in enumerate(rewards):
        sample.offer(KeptRollout(f"r{index}", "train", 1, index, 1, reward, 1, []))
    return sample.chosen()


# -- secrets --------------------------------------------------------------------------------

PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()


def echoing_taskapp() -> FastAPI:
    """A task app that puts both keys everywhere a rollout's record reads: the observation, an
    image URL, the tool's schema and the step info."""
    app, authed = base_taskapp(app_id="echo", title="echo", version="1", env_api_keys=[ENV_KEY])
    tool = json.loads(json.dumps(MOVE_TOOL))
    tool["function"]["parameters"]["properties"]["direction"]["description"] = f"key {ENV_KEY}"

    async def play(policy: PolicyLink, req: Any) -> dict[str, Any]:
        steps = []
        for turn in range(2):
            content = [{"type": "text", "text": f"turn {turn}: env key {ENV_KEY}, backend key {API_KEY}"},
                       {"type": "image_url", "image_url": {"url": PNG}},
                       {"type": "image_url", "image_url": {"url": f"https://example.invalid/i.png?k={ENV_KEY}"}}]
            body = {"messages": [{"role": "user", "content": content}], "tools": [tool], "tool_choice": "required"}
            calls = await ask_policy(policy, chat_url(req.policy.config.inference_url), body, f"turn {turn}")
            steps.append({"obs": {"text": "x"}, "tool_calls": calls, "reward": float(turn), "done": turn == 1,
                          "truncated": False, "info": {"echo": ENV_KEY[3:40], "also": API_KEY}})
        return rollout_response(req, env_id="echo", steps=steps, score=1.0, final={}, details={},
                                system_prompt="")

    add_rollout_route(app, authed, "0.2", play)
    return app


def test_no_key_is_ever_stored_even_when_the_task_app_echoes_them(api, db_path):
    with ServerHandle("task app", echoing_taskapp(), _bind("127.0.0.1", 0)).start("/") as echo:
        job_id = create_job(api, payload(echo.url, small_config(seed=2)))
        assert wait_terminal(api, job_id)["status"] == "succeeded"
    rollouts = all_rollouts(api, job_id)
    assert rollouts
    for summary in rollouts:
        text = api.get(f"/rl/jobs/{job_id}/rollouts/{summary['rollout_id']}").text
        for key in (ENV_KEY, API_KEY):
            assert not [key[i:i + 5] for i in range(len(key) - 4) if key[i:i + 5] in text], text[:400]
        full = json.loads(text)
        turn = full["trajectory"][0]
        assert "[redacted]" in turn["observation"] and turn["images"] == [PNG] and turn["images_omitted"] == 1
        assert turn["reward"] == 0.0 and full["trajectory"][1]["done"]


# -- the routes -----------------------------------------------------------------------------


def test_unknown_jobs_and_rollouts_are_404_json(api, demo_rollout_job):
    job_id = demo_rollout_job
    for path in ("/rl/jobs/job_nope/rollouts", "/rl/jobs/job_nope/rollouts/r1",
                 f"/rl/jobs/{job_id}/rollouts/rl-1-0-nothing", "/learning/jobs/job_nope/rollouts"):
        resp = api.get(path)
        assert resp.status_code == 404 and resp.json()["detail"], path


@pytest.mark.parametrize("query, word", [
    ({"step": "abc"}, "step"), ({"step": "-1"}, "step"), ({"phase": "test"}, "phase"), ({"limit": "0"}, "limit"),
    ({"limit": "501"}, "limit"), ({"after": "nonsense"}, "after"), ({"after": ""}, "after"),
    ({"step": "1" * 30}, "step")])
def test_a_bad_rollout_query_is_a_400_naming_it(api, demo_rollout_job, query, word):
    resp = api.get(f"/rl/jobs/{demo_rollout_job}/rollouts", params=query)
    assert resp.status_code == 400 and word in resp.json()["detail"], resp.text


def test_the_rollout_routes_need_the_key(backend, demo_rollout_job):
    with loopback_http.client(base_url=backend.url + "/api", timeout=10) as stranger:
        assert stranger.get(f"/rl/jobs/{demo_rollout_job}/rollouts").status_code == 401
        assert stranger.get(f"/rl/jobs/{demo_rollout_job}/rollouts/x").status_code == 401


def test_the_rollout_routes_are_in_the_openapi_document(backend):
    paths = loopback_http.get(backend.url + "/openapi.json").json()["paths"]
    assert "/api/rl/jobs/{job_id}/rollouts" in paths and "/api/rl/jobs/{job_id}/rollouts/{rollout_id}" in paths
    names = {p["name"] for p in paths["/api/rl/jobs/{job_id}/rollouts"]["get"]["parameters"]}
    assert {"job_id", "step", "phase", "limit", "after"} <= names


@pytest.fixture(scope="module")
def demo_rollout_job(backend: ServerHandle, taskapp: ServerHandle) -> str:
    with loopback_http.client(base_url=backend.url + "/api", headers={"Authorization": f"Bearer {API_KEY}"},
                              timeout=15.0) as api:
        job_id = create_job(api, payload(taskapp.url, small_config(seed=4)))
        assert wait_terminal(api, job_id)["status"] == "succeeded"
        return job_id


def test_a_rollout_in_flight_keeps_turns_within_its_memory_budget():
    run = JobRun("job_0123456789abcdef", plan_from_payload(payload("http://127.0.0.1:9", small_config())),
                 "http://127.0.0.1:9/api/v1", TabularPolicy())
    rollout = run.open_rollouts["r1"] = OpenRollout(random.Random(1), record=True)
    image = "data:image/png;base64," + "A" * (400 * 1024)
    for turn in range(20):
        body = {"messages": [{"role": "user", "content": [{"type": "text", "text": f"turn {turn}"},
                                                          *[{"type": "image_url", "image_url": {"url": image}}] * 4]}],
                "tools": [MOVE_TOOL]}
        run.act("r1", body, "job_0123456789abcdef:r1")
    kept_images = sum(len(t["images"]) for t in rollout.turns)
    assert kept_images * len(image) <= ROLLOUT_MEMORY_CHARS and kept_images >= 8
    assert len(rollout.turns) + rollout.turns_cut == 20
    assert [t["observation"] for t in rollout.turns] == [f"turn {n}" for n in range(len(rollout.turns))]
    assert rollout.turns[-1]["images_omitted"] == 4 or rollout.turns_cut


def test_what_a_chat_request_shows_is_bounded():
    text, images, omitted = observation_of([
        {"role": "user", "content": "old"}, {"role": "assistant", "content": None},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"},
                                     {"type": "image_url", "image_url": "https://x.invalid/1.png"},
                                     {"type": "input_image", "image_url": {"url": "ftp://x/1.png"}},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 6**8}},
                                     "junk"]}])
    assert (text, images, omitted) == ("a\nb", ["https://x.invalid/1.png"], 2)
    turn = chat_turn({"messages": [{"role": "user", "content": "x" * 10_000}], "tools": [MOVE_TOOL]},
                     "move", {"direction": "up"}, "call_1")
    assert len(turn["observation"]) < 4_100 and turn["observation"].endswith("[6,000 more characters]")
    # Python's parser lets a NaN into a request; JSON answers cannot carry one, so it is not kept.
    tool = json.loads(json.dumps(MOVE_TOOL))
    tool["function"]["parameters"]["x-weight"] = float("nan")
    turn = chat_turn({"messages": [{"role": "user", "content": "x"}], "tools": [tool]}, "move",
                     {"direction": "up", "w": float("inf")}, "call_1")
    assert turn["arguments_schema"] is None and isinstance(turn["arguments"], str) and "Infinity" in turn["arguments"]
    assert chat_turn({"messages": [{"role": "user", "content": "x"}], "tools": [MOVE_TOOL]}, "move",
                     {"direction": "up"}, "c")["arguments_schema"] == MOVE_TOOL["function"]["parameters"]


def test_a_rollout_that_cannot_be_stored_never_fails_the_job(tmp_path, taskapp):
    db = tmp_path / "state.sqlite3"
    with start_backend(api_key=API_KEY, db_path=db, env_api_keys=[ENV_KEY]) as server, api_client(server) as api:
        with sqlite3.connect(db) as other:  # a real failure: the table is gone under the backend
            other.execute("DROP TABLE rollouts")
        job_id = create_job(api, payload(taskapp.url, small_config(seed=6)))
        assert wait_terminal(api, job_id)["status"] == "succeeded"
        warnings = [e for e in events_of(api, job_id) if e["type"] == "rl.rollouts.warning"]
        assert len(warnings) == 1 and "could not be kept" in warnings[0]["message"]


answers = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["trajectories", "steps", "tool_calls", "id", "reward", "done", "info", "trace",
                         "event_history", "session_trace", "llm_response", "message", "call_records",
                         "output_tool_calls", "call_id", "metadata", "reward_info", "event_rewards", "meta"]),
        inner, max_size=4),
    max_leaves=30)


@given(answer=answers)
@settings(max_examples=examples(200), deadline=None, derandomize=True)
def test_any_task_app_answer_is_read_without_an_error(answer):
    reports = read_step_reports(answer)
    turns = [{"call_id": f"c{n}", "observation": "o", "images": [], "images_omitted": 0} for n in range(3)]
    matched = match_turns(turns, reports, frozenset())
    assert [t["index"] for t in matched] == [1, 2, 3]
    assert all(t["reward"] is None or math.isfinite(t["reward"]) for t in matched)
