"""The chat endpoint asks the policy in a worker thread, whatever the policy: a language model
generates for seconds, and meanwhile /api/health, the job's events and other clients must be
answered (docs/embedded-policy.md#the-policy-seam)."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from app.local.policies.base import plays_evaluation
from app.local.policies.tabular.policy import TabularPolicy

from ..conftest import create_job, long_config, payload


def test_health_and_events_answer_while_the_policy_is_acting(api: httpx.Client, taskapp: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    entered, release = threading.Event(), threading.Event()
    original = TabularPolicy.act

    def slow_act(self: TabularPolicy, *args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(20)  # a model generating, blocking its thread
        return original(self, *args, **kwargs)

    monkeypatch.setattr(TabularPolicy, "act", slow_act)
    job_id = create_job(api, payload(taskapp.url, long_config()))
    try:
        assert entered.wait(20), "the task app never asked the policy"
        assert api.get("/health", timeout=3).status_code == 200
        assert api.get(f"/rl/jobs/{job_id}/events", timeout=3).status_code == 200
        assert api.get(f"/rl/jobs/{job_id}", timeout=3).json()["status"] == "running"
    finally:
        release.set()
        api.post(f"/rl/jobs/{job_id}/cancel")


def test_every_rollout_in_flight_has_a_thread_to_answer_on(api: httpx.Client, taskapp: Any,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """8 rollouts in flight make 8 chat calls at once, and all 8 are inside the policy together
    (the lm policy's generation loop batches what is there). asyncio's default executor has
    os.cpu_count() + 4 threads: on 2 cores, 6 acted and 2 waited for a thread."""
    in_flight = 8
    inside, most = 0, 0
    counting = threading.Lock()
    all_in = threading.Event()
    original = TabularPolicy.act

    def meeting_act(self: TabularPolicy, *args: Any, **kwargs: Any) -> Any:
        nonlocal inside, most
        if plays_evaluation(args[3]):  # the baseline's episodes, before the first step's
            return original(self, *args, **kwargs)
        with counting:
            inside += 1
            most = max(most, inside)
            if inside >= in_flight:
                all_in.set()
        try:
            all_in.wait(20)  # a turn waiting in the generation loop for the others to join it
            return original(self, *args, **kwargs)
        finally:
            with counting:
                inside -= 1

    monkeypatch.setattr(TabularPolicy, "act", meeting_act)
    config = long_config()
    config["training"].update(batch_size=4, group_size=2)
    config["rollout"]["max_concurrent_rollouts"] = in_flight
    job_id = create_job(api, payload(taskapp.url, config))
    try:
        assert all_in.wait(30), f"at most {most} of {in_flight} rollouts' chat calls were answered at once"
    finally:
        all_in.set()
        api.post(f"/rl/jobs/{job_id}/cancel")
