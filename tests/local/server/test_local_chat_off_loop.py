"""The chat endpoint asks the policy in a worker thread, whatever the policy: a language model
generates for seconds, and meanwhile /api/health, the job's events and other clients must be
answered (docs/embedded-policy.md#the-policy-seam)."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

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
