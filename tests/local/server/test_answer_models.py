"""The embedded backend's answers are the models the client reads (docs/wire-contract.md#answer-models):
/openapi.json names one for every JSON route, and each answer goes through its model unchanged
(the same keys, in the same order, null or left out as before), so the client's reading of it
(app/core/api/wire.py, wire_answers.py) is the server's own."""

from __future__ import annotations

import json
from typing import Any

import httpx
from pydantic import BaseModel

from app.core.api.wire import JobStatus
from app.core.api.wire_answers import (
    BackendHealth,
    ChatCompletion,
    EventPage,
    JobAction,
    JobPage,
    MetricsPage,
    ModelCheckAnswer,
    RolloutPage,
    RolloutRecord,
    VerifyAnswer,
)
from app.local.servers import ServerHandle
from support import loopback_http

from ..conftest import create_job, payload, wait_terminal


def _json_answers(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each operation's JSON schema of its 2xx answer, by "METHOD path status"."""
    answers = {}
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            for status, response in operation["responses"].items():
                schema = response.get("content", {}).get("application/json", {}).get("schema")
                if status.startswith("2") and schema is not None:
                    answers[f"{method.upper()} {path} {status}"] = schema
    return answers


def test_every_json_route_names_its_answer_model(backend: ServerHandle) -> None:
    spec = loopback_http.get(backend.url + "/openapi.json").json()
    answers = _json_answers(spec)
    assert len(answers) >= 20  # both job prefixes, the chat paths, verify, health
    unnamed = {where: schema for where, schema in answers.items() if "$ref" not in schema}
    assert unnamed == {}
    components = spec["components"]["schemas"]
    for where, schema in answers.items():
        named = components[schema["$ref"].rsplit("/", 1)[-1]]
        assert named.get("properties"), where
    assert answers["GET /api/health 200"]["$ref"].endswith("/BackendHealth")
    assert answers["GET /api/rl/jobs/{job_id}/events 200"]["$ref"].endswith("/EventPage")
    job = answers["GET /api/rl/jobs/{job_id} 200"]
    assert answers["POST /api/rl/jobs 201"] == answers["POST /api/rl/jobs 200"] == job


def _through(model: type[BaseModel], answer: httpx.Response) -> dict[str, Any]:
    """The answer as sent, after checking that its model reads and writes it unchanged."""
    assert answer.status_code in (200, 201), answer.text
    sent = answer.json()
    again = model.model_validate(sent).model_dump(mode="json")
    assert json.dumps(again) == json.dumps(sent)  # the same keys in the same order, the same nulls
    return dict(sent)


def test_each_answer_is_its_model_unchanged(backend: ServerHandle, taskapp: ServerHandle, api: httpx.Client) -> None:
    assert _through(BackendHealth, loopback_http.get(backend.url + "/api/health")) == {
        "status": "ok", "service": "synth-tui-embedded-backend"}
    job_id = create_job(api, payload(taskapp.url))
    wait_terminal(api, job_id)
    job = _through(JobStatus, api.get(f"/rl/jobs/{job_id}"))
    assert list(job)[:7] == ["job_id", "status", "training_type", "model", "created_at", "updated_at", "metadata"]
    assert "queue_position" not in job and ("error" in job) == (job["status"] == "failed")
    for prefix in ("/rl/jobs", "/learning/jobs"):
        _through(JobPage, api.get(prefix, params={"limit": 5}))
        _through(EventPage, api.get(f"{prefix}/{job_id}/events"))
        _through(MetricsPage, api.get(f"{prefix}/{job_id}/metrics"))
        page = _through(RolloutPage, api.get(f"{prefix}/{job_id}/rollouts", params={"limit": 1}))
        assert page["rollouts"] and "next_after" in page
        last = _through(RolloutPage, api.get(f"{prefix}/{job_id}/rollouts", params={"limit": 500}))
        assert last["next_after"] is None  # the last page says so with a null, as before
        rollout_id = page["rollouts"][0]["rollout_id"]
        record = _through(RolloutRecord, api.get(f"{prefix}/{job_id}/rollouts/{rollout_id}"))
        assert list(record)[:2] == ["job_id", "rollout_id"] and "trajectory" in record
        assert _through(JobAction, api.post(f"{prefix}/{job_id}/start"))["job_id"] == job_id
    verified = _through(VerifyAnswer, api.post("/rl/verify_task_app", json={"endpoint_base_url": taskapp.url}))
    assert verified["any_ok"] and "detail" not in verified
    assert all(a["error"] is None and "detail" not in a for a in verified["attempts"])  # null, and left out
    checked = _through(ModelCheckAnswer, api.post("/rl/verify_model", json={"model": "x/not-a-model-here"}))
    assert checked["path"] is None or isinstance(checked["path"], str)
    chat = api.post("/v1/chat/completions", params={"cid": f"trace_{job_id}"},
                    json={"messages": [{"role": "user", "content": "hi"}]})
    assert _through(ChatCompletion, chat)["choices"][0]["logprobs"] is None
