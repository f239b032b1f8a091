"""A task app that breaks fails the job cleanly, with an event that says which call failed."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse

from app.local.servers import ServerHandle, _bind, start_backend, start_taskapp
from app.local.training.rollout_contract import TaskAppError
from app.local.training.runner import JobRunner

from ..conftest import (
    API_KEY,
    ENV_KEY,
    api_client,
    create_job,
    events_of,
    long_config,
    payload,
    small_config,
    wait_event,
    wait_terminal,
)


def _assert_failed_with(api, job_id, *needles):
    job = wait_terminal(api, job_id)
    assert job["status"] == "failed"
    last = events_of(api, job_id)[-1]
    assert last["type"] == "rl.job.failed" and last["level"] == "error"
    for needle in needles:
        assert re.search(needle, last["message"]), last["message"]
    assert job["error"] == last["message"]
    return last


def test_a_task_app_that_dies_mid_run_fails_the_job(api, quick_rollout_retries):
    taskapp = start_taskapp(env_api_keys=[ENV_KEY])
    job_id = create_job(api, payload(taskapp.url, long_config()))
    wait_event(api, job_id, "rl.train.step")
    taskapp.stop()
    # Retried first: a task app that is really gone fails the job, with the cause and the fix.
    _assert_failed_with(api, job_id, rf"^POST {re.escape(taskapp.url)}/rollout failed after 6 attempts: "
                                     r"connection refused",
                        r"\(seed \d+, iteration \d+\)\. Check that the task app is running")


def test_a_failed_evaluation_keeps_the_metrics_of_the_step_it_followed(api, taskapp, monkeypatch):
    """The step trained and its event says so; the evaluation after it fails: the step's
    training metrics are still recorded before the job fails (the backend runs in this process,
    so the evaluation is made to fail where it starts)."""
    original = JobRunner._evaluate

    async def failing_evaluation(self, run, step):
        if step == 0:  # the step-0 evaluation, before any update, passes
            return await original(self, run, step)
        raise TaskAppError(f"evaluation after step {step} failed (injected)")

    monkeypatch.setattr(JobRunner, "_evaluate", failing_evaluation)
    job_id = create_job(api, payload(taskapp.url, small_config()))
    _assert_failed_with(api, job_id, r"evaluation after step 1 failed \(injected\)")
    steps = [e["data"]["step"] for e in events_of(api, job_id) if e["type"] == "rl.train.step"]
    metrics = api.get(f"/rl/jobs/{job_id}/metrics").json()["points"]
    assert steps == [1]
    assert sorted(m["name"] for m in metrics if m["step"] == 1) == ["train.entropy", "train.loss", "train.mean_score"]


def _broken_taskapp(answer) -> ServerHandle:
    app = FastAPI()
    app.post("/rollout")(answer)
    return ServerHandle("broken task app", app, _bind("127.0.0.1", 0)).start("/docs")


@pytest.mark.parametrize("answer,needle", [
    (lambda: PlainTextResponse("upstream exploded", status_code=503), r"HTTP 503: upstream exploded"),
    (lambda: PlainTextResponse("<html>oops</html>"), r"the answer is not JSON: .<html>oops</html>."),
    (lambda: {"metrics": {}}, (r"the answer has no score: it has none of reward_info.outcome_reward, "
                               r"metrics.outcome_reward, metrics.mean_return, metrics.episode_returns")),
])
def test_task_app_errors_fail_the_job_with_the_reason(api, answer, needle, quick_rollout_retries):
    with _broken_taskapp(answer) as broken:
        job_id = create_job(api, payload(broken.url))
        _assert_failed_with(api, job_id, rf"^POST {re.escape(broken.url)}/rollout failed( after 6 attempts)?: {needle}",
                            # a job's first rollout is its step-0 evaluation's
                            r"\(eval seed \d+, before any update\)"
                            r"(\. The task app failed to answer each time; its log says why\.)?$")


def test_an_unreachable_task_app_says_connection_refused(api, quick_rollout_retries):
    with _bind("127.0.0.1", 0) as sock:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    job_id = create_job(api, payload(url))
    _assert_failed_with(api, job_id, rf"^POST {url}/rollout failed after 6 attempts: connection refused "
                                     r"\(nothing is listening there\) \(eval seed \d+, before any update\)\. "
                                     r"Check that the task app")


def test_a_backend_without_environment_keys(db_path, taskapp):
    with start_backend(api_key=API_KEY, db_path=db_path, env_api_keys=[]) as backend, api_client(backend) as api:
        report = api.post("/rl/verify_task_app", json={"endpoint_base_url": taskapp.url}).json()
        assert report["any_ok"] is False and "ENVIRONMENT_API_KEY" in report["detail"]
        _assert_failed_with(api, create_job(api, payload(taskapp.url)), "ENVIRONMENT_API_KEY")


def test_verify_with_a_wrong_key_reports_the_400s(db_path, taskapp):
    with start_backend(api_key=API_KEY, db_path=db_path, env_api_keys=["not-the-key"]) as backend, \
            api_client(backend) as api:
        report = api.post("/rl/verify_task_app", json={"endpoint_base_url": taskapp.url}).json()
        assert report["any_ok"] is False
        assert report["candidates_first15"] == ["****"]  # a short key shows nothing of itself
        assert [a["status"] for a in report["attempts"]] == [400] * 6
        assert all("unauthorised" in a["detail"] for a in report["attempts"])
        # Training with that key fails on the first rollout, saying so.
        _assert_failed_with(api, create_job(api, payload(taskapp.url)), "HTTP 400: .*unauthorised")


def test_a_slow_task_app_gets_the_configs_rollout_timeout(api):
    """[rollout] timeout_s bounds one rollout; a task app slower than that is named in words."""
    slow = FastAPI()

    @slow.post("/rollout")
    async def rollout(request: Request):
        # 5 s, or until the trainer hangs up (then the server can stop without waiting it out).
        deadline = time.monotonic() + 5
        while not await request.is_disconnected() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    config = small_config()
    config["rollout"]["timeout_s"] = 1
    with ServerHandle("slow task app", slow, _bind("127.0.0.1", 0)).start("/docs") as taskapp:
        job_id = create_job(api, payload(taskapp.url, config))
        _assert_failed_with(api, job_id, r"failed after 1 attempt: no whole answer within 1 s "
                                         r"\(the task app is slow or overloaded\)")
