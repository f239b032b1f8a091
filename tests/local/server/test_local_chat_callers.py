"""A chat call the job did not make gets its 4xx and leaves the job alone; only the job's own
rollouts, refused again and again, fail it (issue 41 item 1, docs/hardening.md)."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from app.local import policies
from app.local.policies.base import PolicyCannotAct
from app.local.policies.tabular.policy import TabularPolicy

from ..conftest import API_KEY, create_job, payload, small_config, wait_terminal

MOVE = {"type": "function", "function": {"name": "move", "parameters": {
    "type": "object", "properties": {"direction": {"type": "string", "enum": ["up", "down"]}},
    "required": ["direction"]}}}


def _chat(backend: Any, cid: str, **body: Any) -> httpx.Response:
    request = {"model": "m", "messages": [{"role": "user", "content": "where now?"}], **body}
    return httpx.post(backend.url + "/v1/chat/completions", params={"cid": cid}, json=request,
                      headers={"Authorization": f"Bearer {API_KEY}"}, timeout=15)


def test_a_call_to_a_queued_job_is_409_and_the_job_then_succeeds(api: httpx.Client, backend: Any, taskapp: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    loading, release = threading.Event(), threading.Event()
    original = policies.make_policy

    def slow_make_policy(*args: Any, **kwargs: Any) -> Any:
        loading.set()
        release.wait(20)  # a model still loading
        return original(*args, **kwargs)

    monkeypatch.setattr(policies, "make_policy", slow_make_policy)
    job_id = create_job(api, payload(taskapp.url, small_config(seed=7)))
    try:
        assert loading.wait(20), "the job never started loading its policy"
        resp = _chat(backend, f"trace_{job_id}", tools=[MOVE])
        assert resp.status_code == 409, resp.text
        assert "still loading" in resp.json()["detail"]
    finally:
        release.set()
    job = wait_terminal(api, job_id, timeout=60)
    assert job["status"] == "succeeded", job


def test_a_bad_call_outside_the_rollouts_is_422_and_the_job_goes_on(api: httpx.Client, backend: Any, taskapp: Any,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    acting, release = threading.Event(), threading.Event()
    original = TabularPolicy.act

    def first_call_waits(self: TabularPolicy, *args: Any, **kwargs: Any) -> Any:
        if not acting.is_set():
            acting.set()
            release.wait(20)  # the job is running, one of its rollouts waiting on the policy
        return original(self, *args, **kwargs)

    monkeypatch.setattr(TabularPolicy, "act", first_call_waits)
    job_id = create_job(api, payload(taskapp.url, small_config(seed=7)))
    try:
        assert acting.wait(20), "the task app never asked the policy"
        unknown = {"type": "function", "function": {"name": "teleport"}}
        for _ in range(4):  # more than the refusals that fail a job from its own rollouts
            resp = _chat(backend, f"trace_{job_id}", tools=[MOVE], tool_choice=unknown)
            assert resp.status_code == 422, resp.text
            assert "teleport" in resp.json()["detail"]
    finally:
        release.set()
    job = wait_terminal(api, job_id, timeout=60)
    assert job["status"] == "succeeded", job


def test_rollouts_refused_again_and_again_fail_the_job_naming_why(api: httpx.Client, taskapp: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: TabularPolicy, *args: Any, **kwargs: Any) -> Any:
        raise PolicyCannotAct("tool 'move': its parameters: nothing this policy can fill")

    monkeypatch.setattr(TabularPolicy, "act", refuse)
    job_id = create_job(api, payload(taskapp.url, small_config(seed=7)))
    job = wait_terminal(api, job_id, timeout=60)
    assert job["status"] == "failed", job
    assert "nothing this policy can fill" in str(job), job
