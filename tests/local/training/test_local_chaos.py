"""Dropped connections on both rollout hops do not fail a job, and lose or repeat nothing.

A chaos proxy sits between the backend and the task app (the /rollout hop) and between the
task app and the backend's chat endpoint (the inference hop) and loses some requests, before
or after the server handled them. The job must succeed with every rollout counted once and
every turn of every episode learned from exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from app.local.server.backend import create_backend_app
from app.local.servers import ServerHandle, _bind, start_taskapp
from support.chaos_proxy import ChaosProxy, Mode
from support.pilot_waits import poll_until

from ..conftest import (
    API_KEY,
    ENV_KEY,
    QUICK_CHAT_RETRIES,
    api_client,
    create_job,
    events_of,
    payload,
    small_config,
    wait_terminal,
)


@pytest.fixture
def chaotic_pair(tmp_path, request, quick_rollout_retries) -> Iterator[tuple[ServerHandle, ChaosProxy, ChaosProxy]]:
    """(backend, proxy in front of the task app, proxy in front of the chat endpoint); the
    param is the proxies' mode, or (mode, rollout contract of the task app). Both hops retry as
    always, with waits of milliseconds: what is tested is that nothing is lost or counted twice."""
    mode: Mode
    mode, contract = request.param if isinstance(request.param, tuple) else (request.param, "0.2")
    with start_taskapp(env_api_keys=[ENV_KEY], contract=contract, chat_backoff=QUICK_CHAT_RETRIES) as taskapp, \
            ChaosProxy(every=7, mode=mode) as to_taskapp, ChaosProxy(every=11, mode=mode) as to_chat:
        to_taskapp.target = (taskapp.host, taskapp.port)
        app = create_backend_app(api_key=API_KEY, db_path=tmp_path / "state.sqlite3", env_api_keys=[ENV_KEY],
                                 public_base_url=to_chat.url)
        with ServerHandle("backend", app, _bind("127.0.0.1", 0)).start("/api/health") as backend:
            to_chat.target = (backend.host, backend.port)
            yield backend, to_taskapp, to_chat


@pytest.mark.parametrize("chaotic_pair", ["before", "after", pytest.param(("after", "0.5"), id="after-0.5")],
                         indirect=True)
def test_lost_requests_on_both_hops_are_retried_and_nothing_is_counted_twice(chaotic_pair):
    backend, to_taskapp, to_chat = chaotic_pair
    config = small_config(iterations_per_epoch=4, batch_size=2, group_size=4, max_turns=6, seed=7)
    config["evaluation"].update(instances=4, every_n_iters=2)
    with api_client(backend) as api:
        job_id = create_job(api, payload(to_taskapp.url, config))
        job = wait_terminal(api, job_id, timeout=90)
        events = events_of(api, job_id)
    assert job["status"] == "succeeded", job.get("error")
    assert to_taskapp.lost and to_chat.lost, "the proxies lost nothing: the test proved nothing"
    assert any(e["type"] == "rl.rollout.retry" for e in events)
    steps = [e["data"] for e in events if e["type"] == "rl.train.step"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    for step in steps:
        assert step["rollouts"] == 2 * 4
        assert step["decisions"] == step["turns"] > 0, step
    summary = next(e["data"] for e in events if e["type"] == "rl.job.completed")
    assert summary["rollouts"] == 4 * 8 + 3 * 4  # training + three evaluations (step 0, 2, 4), each once
    assert summary["retries"] >= 1


@pytest.mark.usefixtures("whole_job")  # 30 steps, across a restart: the whole job, with the real waits
def test_a_task_app_restarted_mid_run_does_not_fail_the_job(api):
    """Killed and started again on the same port within a second or two, as a user who fixes
    their task app does: the rollouts in flight are retried and the job goes on. The real retry
    waits: the restart must fit in them."""
    first = start_taskapp(env_api_keys=[ENV_KEY])
    host, port = first.host, first.port
    config = small_config(iterations_per_epoch=30, batch_size=2, group_size=2, max_turns=6, seed=3)
    del config["evaluation"]
    job_id = create_job(api, payload(first.url, config))
    poll_until(lambda: any(e["type"] == "rl.train.step" for e in events_of(api, job_id)), timeout=30,
             what="the first step")
    first.stop()
    time.sleep(0.5)  # the task app is down for a moment, as in a real restart
    with start_taskapp(env_api_keys=[ENV_KEY], host=host, port=port):
        job = wait_terminal(api, job_id, timeout=120)
    assert job["status"] == "succeeded", job.get("error")
    events = events_of(api, job_id)
    assert any(e["type"] == "rl.rollout.retry" and "connection refused" in e["message"] for e in events)
