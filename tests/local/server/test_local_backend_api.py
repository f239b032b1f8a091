"""The embedded backend's HTTP contract (docs/wire-contract.md#embedded-backend)."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from datetime import datetime
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Request

import app.local.server.routes_jobs as routes_jobs
from app.local.servers import ServerHandle, _bind
from support import loopback_http
from support.pilot_waits import poll_until

from ..conftest import (
    API_KEY,
    ENV_KEY,
    create_job,
    events_of,
    long_config,
    payload,
    read_sse,
    small_config,
    wait_event,
    wait_terminal,
)


def _json_detail(resp: httpx.Response) -> str:
    assert resp.headers["content-type"].startswith("application/json")
    detail = resp.json()["detail"]
    assert detail
    return detail


@pytest.mark.parametrize("method,path", [
    ("GET", "/rl/jobs"), ("POST", "/rl/jobs"), ("GET", "/rl/jobs/job_x"), ("GET", "/rl/jobs/job_x/events"),
    ("GET", "/rl/jobs/job_x/metrics"), ("POST", "/rl/jobs/job_x/cancel"), ("POST", "/rl/verify_task_app"),
    ("GET", "/learning/jobs/job_x"),
])
@pytest.mark.parametrize("auth", [None, "Bearer wrong", f"Basic {API_KEY}"], ids=["no-auth", "wrong-bearer", "basic"])
def test_api_needs_the_bearer_key(backend, method, path, auth):
    headers = {"Authorization": auth} if auth else {}
    resp = loopback_http.request(method, f"{backend.url}/api{path}", headers=headers, json={})
    assert resp.status_code == 401
    assert "Bearer" in _json_detail(resp)


def test_health_needs_no_key(backend):
    assert loopback_http.get(f"{backend.url}/api/health").json()["status"] == "ok"


@pytest.mark.parametrize("method,path,status", [
    ("GET", "/rl/jobs/job_missing", 404), ("GET", "/learning/jobs/job_missing", 404),
    ("GET", "/rl/jobs/job_missing/events", 404), ("GET", "/rl/jobs/job_missing/metrics", 404),
    ("POST", "/rl/jobs/job_missing/cancel", 404), ("POST", "/rl/jobs/job_missing/start", 404),
    ("GET", "/orchestration/jobs/job_missing", 404), ("GET", "/orchestration/jobs/job_missing/events", 404),
    ("GET", "/no/such/route", 404), ("GET", "/rl/verify_task_app", 405), ("DELETE", "/rl/jobs", 405),
])
def test_errors_are_json(api, method, path, status):
    resp = api.request(method, path)
    assert resp.status_code == status
    _json_detail(resp)


def test_create_answers_201_with_a_queued_job(api, taskapp):
    resp = api.post("/rl/jobs", json=payload(taskapp.url))
    assert resp.status_code == 201
    job = resp.json()
    assert re.fullmatch(r"job_[0-9a-f]+", job["job_id"])
    assert job["status"] == "queued"
    assert datetime.fromisoformat(job["created_at"]) == datetime.fromisoformat(job["updated_at"])
    assert api.post(f"/rl/jobs/{job['job_id']}/start", json={}).status_code == 200  # a no-op
    wait_terminal(api, job["job_id"])


def test_idempotency_key_replays_and_conflicts(api, taskapp):
    body = payload(taskapp.url)
    key = {"Idempotency-Key": f"idem-{time.time_ns()}"}
    first = api.post("/rl/jobs", json=body, headers=key)
    replay = api.post("/rl/jobs", json=body, headers=key)
    assert (first.status_code, replay.status_code) == (201, 200)
    assert replay.json()["job_id"] == first.json()["job_id"]
    changed = payload(taskapp.url, small_config(batch_size=3))
    conflict = api.post("/rl/jobs", json=changed, headers=key)
    assert conflict.status_code == 409
    detail = _json_detail(conflict)
    assert key["Idempotency-Key"] in detail and first.json()["job_id"] in detail
    other = create_job(api, body)  # without a key every POST is a new job
    assert other != first.json()["job_id"]
    for job_id in (first.json()["job_id"], other):
        wait_terminal(api, job_id)


def _broken(mutate):
    def make(task_url):
        body = payload(task_url)
        mutate(body)
        return body
    return make


@pytest.mark.parametrize("make,expected", [
    (_broken(lambda b: b.update(job_type="sft")), "job_type"),
    (_broken(lambda b: b.pop("data")), "data"),
    (_broken(lambda b: b["data"].update(endpoint_base_url="placeholder")), "endpoint_base_url"),
    (_broken(lambda b: b["data"].pop("base_model")), "base_model"),
    (_broken(lambda b: b["data"]["config"].pop("algorithm")), "algorithm"),
    (_broken(lambda b: b["data"]["config"]["algorithm"].update(variety="ppo")), "gspo"),
    (_broken(lambda b: b["data"]["config"].pop("rollout")), "rollout"),
    (_broken(lambda b: b["data"]["config"].pop("training")), "training"),
    (_broken(lambda b: b["data"]["config"]["training"].update(batch_size=0)), "training.batch_size"),
    (_broken(lambda b: b["data"]["config"]["training"].update(group_size="4")), "training.group_size"),
    (_broken(lambda b: b["data"]["config"]["training"].update(learning_rate=-1)), "learning_rate"),
    (_broken(lambda b: b["data"]["config"]["evaluation"].update(seeds=[])), "evaluation.seeds"),
    (lambda url: [1, 2, 3], "JSON object"),
])
def test_bad_payloads_get_422_with_a_clear_detail(api, taskapp, make, expected):
    resp = api.post("/rl/jobs", json=make(taskapp.url))
    assert resp.status_code == 422
    detail = _json_detail(resp)
    assert isinstance(detail, str) and expected in detail


def test_a_body_that_is_not_json_gets_422(api):
    resp = api.post("/rl/jobs", content=b"{not json", headers={"Content-Type": "application/json"})
    assert resp.status_code == 422
    assert "JSON" in _json_detail(resp)


def test_bad_query_parameters_get_422_text(api):
    resp = api.get("/rl/jobs/job_x/events", params={"since_seq": "abc"})
    assert resp.status_code == 422
    assert "since_seq" in _json_detail(resp)


def test_list_is_newest_first_with_limit_and_status(api, taskapp):
    ids = [create_job(api, payload(taskapp.url)) for _ in range(3)]
    listed = api.get("/rl/jobs", params={"limit": 3}).json()["jobs"]
    assert [j["job_id"] for j in listed] == ids[::-1]
    assert api.get("/learning/jobs", params={"limit": 3}).json()["jobs"][0]["job_id"] == ids[-1]
    for job_id in ids:
        wait_terminal(api, job_id)
    succeeded = api.get("/rl/jobs", params={"status": "succeeded", "limit": 500}).json()["jobs"]
    assert set(ids) <= {j["job_id"] for j in succeeded}
    assert all(j["status"] == "succeeded" for j in succeeded)
    assert api.get("/rl/jobs", params={"status": "running"}).json()["jobs"] == []


def test_status_events_and_metrics_of_a_finished_job(api, taskapp):
    ids = [create_job(api, payload(taskapp.url)) for _ in range(2)]  # two at once: separate seqs
    seen: dict[str, list[tuple[str, str]]] = {job_id: [] for job_id in ids}

    def poll() -> bool:
        for job_id in ids:
            job = api.get(f"/rl/jobs/{job_id}").json()
            if not seen[job_id] or seen[job_id][-1] != (job["status"], job["updated_at"]):
                seen[job_id].append((job["status"], job["updated_at"]))
        return all(s[-1][0] == "succeeded" for s in seen.values())

    poll_until(poll, timeout=30, what="both jobs to succeed")
    for job_id in ids:
        statuses = [s for s, _ in seen[job_id]]
        assert statuses == sorted(set(statuses), key=["queued", "running", "succeeded"].index)
        stamps = [datetime.fromisoformat(u) for _, u in seen[job_id]]
        assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
        job = api.get(f"/learning/jobs/{job_id}").json()
        assert job["status"] == "succeeded" and job["updated_at"] > job["created_at"]
        assert job["metadata"]["counters"]["chat_completions"] > 0

        events = events_of(api, job_id)
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert events == events_of(api, job_id, "/learning/jobs")
        types = [e["type"] for e in events]
        assert types[0] == "rl.job.created" and types[-1] == "rl.job.completed"
        started = next(e for e in events if e["type"] == "rl.train.started")
        assert {"model", "epochs", "iters_per_epoch", "batch_size", "group_size"} <= started["data"].keys()
        steps = [e for e in events if e["type"] == "rl.train.step"]
        assert [e["data"]["step"] for e in steps] == [1, 2]
        assert ({"step", "total_steps", "mean_score", "loss", "entropy", "rollouts", "seconds"}
                <= steps[0]["data"].keys())
        assert [e["data"]["step"] for e in events if e["type"] == "rl.eval.summary"] == [0, 1, 2]
        assert any("tabular" in e["message"] for e in events)
        assert not any("hatchet" in t or "modal" in t for t in types)  # only with --infra-events
        assert all(e["job_id"] == job_id and e["level"] in {"info", "warning", "error"} for e in events)
        page = api.get(f"/rl/jobs/{job_id}/events", params={"since_seq": 3, "limit": 2}).json()["events"]
        assert [e["seq"] for e in page] == [4, 5]

        points = api.get(f"/rl/jobs/{job_id}/metrics").json()
        assert points["job_id"] == job_id
        pts = points["points"]
        assert [(p["step"], p["name"]) for p in pts] == sorted((p["step"], p["name"]) for p in pts)
        by_name = {}
        for p in pts:
            by_name.setdefault(p["name"], []).append(p["step"])
        assert by_name == {"train.mean_score": [1, 2], "train.loss": [1, 2], "train.entropy": [1, 2],
                           "eval.mean_score": [0, 1, 2]}
        later = api.get(f"/learning/jobs/{job_id}/metrics", params={"after_step": 1}).json()["points"]
        assert {p["step"] for p in later} == {2}


def test_sse_stream_matches_the_json_events(api, taskapp):
    job_id = create_job(api, payload(taskapp.url))
    frames = [f for f in read_sse(api, f"/rl/jobs/{job_id}/events") if "data" in f]  # live, to the end
    streamed = [json.loads(f["data"]) for f in frames]
    assert streamed[-1]["type"] == "rl.job.completed"
    assert streamed == events_of(api, job_id)
    assert [int(f["id"]) for f in frames] == [e["seq"] for e in streamed]
    assert [f["event"] for f in frames] == [e["type"] for e in streamed]

    tail = [json.loads(f["data"]) for f in read_sse(api, f"/rl/jobs/{job_id}/events/stream",
                                                     params={"since_seq": 5}) if "data" in f]
    assert [e["seq"] for e in tail] == [e["seq"] for e in streamed[5:]]
    resumed = [json.loads(f["data"]) for f in read_sse(api, f"/learning/jobs/{job_id}/events",
                                                        headers={"Last-Event-ID": str(len(streamed) - 2)})
               if "data" in f]
    assert resumed == streamed[-2:]
    # Past the terminal event there is nothing more: the stream closes at once.
    past_the_end = read_sse(api, f"/rl/jobs/{job_id}/events", params={"since_seq": len(streamed)})
    assert [f for f in past_the_end if "data" in f] == []


def test_cancel_stops_a_running_job_within_a_second(api, taskapp):
    job_id = create_job(api, payload(taskapp.url, long_config()))
    wait_event(api, job_id, "rl.train.step")
    started = time.monotonic()
    resp = api.post(f"/rl/jobs/{job_id}/cancel", json={})
    job = api.get(f"/rl/jobs/{job_id}").json()
    assert time.monotonic() - started < 1.0
    assert resp.status_code == 200 and resp.json()["status"] == "cancelled"
    assert job["status"] == "cancelled"
    events = events_of(api, job_id)
    assert events[-1]["type"] == "rl.job.cancelled"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    again = api.post(f"/rl/jobs/{job_id}/cancel", json={})
    assert again.status_code == 409
    assert again.json()["status"] == "cancelled" and "cancelled" in _json_detail(again)


def test_a_cancelled_jobs_model_path_names_its_last_saved_step(api, taskapp):
    job_id = create_job(api, payload(taskapp.url, long_config()))
    wait_event(api, job_id, "rl.train.step")
    api.post(f"/rl/jobs/{job_id}/cancel", json={})
    job = api.get(f"/rl/jobs/{job_id}").json()
    assert job["status"] == "cancelled"
    steps = [e["data"]["step"] for e in events_of(api, job_id) if e["type"] == "rl.train.step"]
    saved = job["artifacts"]["model_path"]
    assert int(re.search(r"step-(\d+)$", saved).group(1)) == steps[-1]
    assert (Path(saved) / "policy.json").is_file()


def test_verify_task_app_with_the_right_key(api, taskapp):
    report = api.post("/rl/verify_task_app", json={"endpoint_base_url": taskapp.url + "/"}).json()
    assert report["any_ok"] is True
    # Only the 4-character mask of a held key, never the SDK's 15 characters.
    assert report["candidates_first15"] == [ENV_KEY[:4] + "…"]
    attempts = report["attempts"]
    assert {(a["endpoint"], a["header"]) for a in attempts} == {
        (e, h) for e in ("/health", "/task_info") for h in ("X-API-Key", "X-API-Keys", "Authorization: Bearer")}
    assert all(a["status"] == 200 and a["ok"] and a["error"] is None and a["latency_ms"] >= 0 for a in attempts)
    assert all(a["key_prefix"] == ENV_KEY[:4] + "…" and a["key_index"] == 0 for a in attempts)


def test_verify_task_app_rejects_a_url_that_is_not_http(api):
    resp = api.post("/rl/verify_task_app", json={"endpoint_base_url": "placeholder"})
    assert resp.status_code == 422 and "endpoint_base_url" in _json_detail(resp)


def test_verify_task_app_with_the_task_app_down(api):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    report = api.post("/rl/verify_task_app", json={"endpoint_base_url": url}).json()
    assert report["any_ok"] is False
    assert report["attempts"] and all(a["status"] is None and not a["ok"] for a in report["attempts"])
    assert all(a["error"].startswith("ConnectError") for a in report["attempts"])


def test_chat_endpoint_serves_the_policy(api, backend, taskapp):
    job_id = create_job(api, payload(taskapp.url))
    wait_terminal(api, job_id)
    body = {"model": "x", "messages": [{"role": "user", "content": "state: pos=0,0 goal=4,4 blocked=up,left"}],
            "tools": [{"type": "function", "function": {"name": "move", "parameters": {
                "type": "object",
                "properties": {"direction": {"type": "string", "enum": ["up", "down", "left", "right"]}}}}}]}
    for url in (f"{backend.url}/api/v1/chat/completions", f"{backend.url}/v1/chat/completions"):
        resp = api.post(url, params={"cid": f"{job_id}:manual"}, json=body)
        assert resp.status_code == 200, resp.text
        message = resp.json()["choices"][0]["message"]
        call = message["tool_calls"][0]
        assert call["type"] == "function" and call["function"]["name"] == "move"
        assert json.loads(call["function"]["arguments"])["direction"] in {"up", "down", "left", "right"}
    chat = f"{backend.url}/api/v1/chat/completions"
    assert api.post(chat, params={"cid": "job_unknown:r1"}, json=body).status_code == 404
    assert api.post(chat, json=body).status_code == 400  # no cid: which job?
    assert loopback_http.post(chat, params={"cid": f"{job_id}:not-in-flight"}, json=body).status_code == 401


def test_sse_heartbeats_while_idle_and_pushes_new_events_at_once(api, monkeypatch):
    """A slow task app leaves the stream idle: it must send heartbeats, and a cancel must
    reach it right away (pushed, not found by a polling loop)."""
    monkeypatch.setattr(routes_jobs, "SSE_HEARTBEAT_S", 0.05)
    slow = FastAPI()

    @slow.post("/rollout")
    async def rollout(request: Request):
        deadline = time.monotonic() + 30
        while not await request.is_disconnected() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    with ServerHandle("slow task app", slow, _bind("127.0.0.1", 0)).start("/docs") as taskapp:
        job_id = create_job(api, payload(taskapp.url))
        arrivals: list[tuple[float, dict]] = []

        def read() -> None:
            with api.stream("GET", f"/rl/jobs/{job_id}/events", headers={"Accept": "text/event-stream"}) as resp:
                for line in resp.iter_lines():
                    if line:
                        arrivals.append((time.monotonic(), line))

        reader = threading.Thread(target=read)
        reader.start()
        poll_until(lambda: sum(1 for _, line in arrivals if line == ": heartbeat") >= 3, what="heartbeats")
        asked = time.monotonic()
        assert api.post(f"/rl/jobs/{job_id}/cancel").json()["status"] == "cancelled"
        reader.join(5)
        assert not reader.is_alive()
        when, last = arrivals[-1]
        assert last.startswith("data: ") and json.loads(last[6:])["type"] == "rl.job.cancelled"
        assert when - asked < 1.0
