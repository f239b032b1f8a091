"""A chat call the job did not make gets its 4xx and leaves the job alone; only the job's own
rollouts, refused again and again, fail it (issue 41 item 1, docs/hardening.md)."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from app.local import policies
from app.local.policies.base import ActCancelled, ActOptions, PolicyCannotAct
from app.local.policies.tabular.policy import TabularPolicy
from support import loopback_http

from ..conftest import API_KEY, create_job, long_config, payload, small_config, wait_event, wait_terminal

MOVE = {"type": "function", "function": {"name": "move", "parameters": {
    "type": "object", "properties": {"direction": {"type": "string", "enum": ["up", "down"]}},
    "required": ["direction"]}}}


def _chat(backend: Any, cid: str, **body: Any) -> httpx.Response:
    request = {"model": "m", "messages": [{"role": "user", "content": "where now?"}], **body}
    return loopback_http.post(backend.url + "/v1/chat/completions", params={"cid": cid}, json=request,
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
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 quick_rollout_retries: Any) -> None:
    def refuse(self: TabularPolicy, *args: Any, **kwargs: Any) -> Any:
        raise PolicyCannotAct("tool 'move': its parameters: nothing this policy can fill")

    monkeypatch.setattr(TabularPolicy, "act", refuse)
    job_id = create_job(api, payload(taskapp.url, small_config(seed=7)))
    job = wait_terminal(api, job_id, timeout=60)
    assert job["status"] == "failed", job
    assert "nothing this policy can fill" in str(job), job


# -- what the answer says, and what a request may ask (issue 39 item 2, issue 41 item 2) ----------


def _running_job(api: httpx.Client, taskapp: Any) -> str:
    """A job whose policy is loaded (its rl.train.policy event): before it, a call is answered
    409 "still loading" at once, whatever it asks (a loaded machine showed it)."""
    job_id = create_job(api, payload(taskapp.url, long_config()))
    wait_event(api, job_id, "rl.train.policy", timeout=30)
    return job_id


def test_the_stand_ins_usage_counts_no_tokens_not_words(api: httpx.Client, backend: Any, taskapp: Any) -> None:
    job_id = _running_job(api, taskapp)
    try:
        resp = _chat(backend, f"trace_{job_id}", tools=[MOVE])
        assert resp.status_code == 200, resp.text
        answer = resp.json()
        assert answer["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
        assert answer["choices"][0]["finish_reason"] == "tool_calls" and answer["choices"][0]["logprobs"] is None
    finally:
        api.post(f"/rl/jobs/{job_id}/cancel")


@pytest.mark.parametrize(("ask", "words"), [
    ({"n": 2}, "n must be 1: the embedded policy answers one choice per call"),
    ({"temperature": 0.5}, "temperature 0.5 cannot be honoured: the tabular stand-in samples its table"),
    ({"top_p": 0.9}, "top_p 0.9 cannot be honoured"),
    ({"logprobs": True}, "logprobs cannot be returned: the tabular stand-in"),
    ({"temperature": 3}, "temperature must be a number from 0 to 2"),
    ({"top_logprobs": 21}, "top_logprobs must be a whole number from 0 to 20"),
])
def test_what_a_request_asks_is_honoured_or_refused_saying_why(api: httpx.Client, backend: Any, taskapp: Any,
                                                              ask: dict[str, Any], words: str) -> None:
    job_id = _running_job(api, taskapp)
    try:
        resp = _chat(backend, f"trace_{job_id}", tools=[MOVE], **ask)
        assert resp.status_code == 422, resp.text
        assert words in resp.json()["detail"]
        assert _chat(backend, f"trace_{job_id}", tools=[MOVE], temperature=1, max_tokens=5).status_code == 200
        assert api.get(f"/rl/jobs/{job_id}").json()["status"] == "running"
    finally:
        api.post(f"/rl/jobs/{job_id}/cancel")


def test_a_client_that_goes_away_sets_the_policys_cancel_flag(api: httpx.Client, backend: Any, taskapp: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The route's half of stopping a generation (the lm policy's half:
    tests/local/policies/test_lm_chat_options.py)."""
    generating, stopped = threading.Event(), threading.Event()
    original = TabularPolicy.act

    def generates_until_cancelled(self: TabularPolicy, messages: Any, tools: Any, tool_choice: Any, cid: str,
                                  rng: Any, options: ActOptions | None = None) -> Any:
        if "outside" not in cid:
            return original(self, messages, tools, tool_choice, cid, rng, options)
        generating.set()
        assert options is not None and options.cancel is not None
        if options.cancel.wait(30):  # a token at a time, until the caller is gone
            stopped.set()
            raise ActCancelled("the caller went away")
        return original(self, messages, tools, tool_choice, cid, rng, options)

    monkeypatch.setattr(TabularPolicy, "act", generates_until_cancelled)
    job_id = _running_job(api, taskapp)
    try:
        with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its connection
            loopback_http.post(backend.url + "/v1/chat/completions", params={"cid": f"trace_{job_id}:outside"},
                               json={"messages": [{"role": "user", "content": "go"}], "tools": [MOVE]},
                               headers={"Authorization": f"Bearer {API_KEY}"}, timeout=httpx.Timeout(15, read=1.0))
        assert generating.is_set()
        assert stopped.wait(20), "the policy was never told that its caller went away"
        assert api.get(f"/rl/jobs/{job_id}").json()["status"] == "running"
    finally:
        api.post(f"/rl/jobs/{job_id}/cancel")
