"""A job's end gives its policy's memory back: nothing the backend keeps holds the closed policy
(its model, trainer and caches), and the freed heap is returned to the system
(app/local/policies/heap.py; docs/embedded-policy.md#memory-of-a-step)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest

from app.local import policies
from app.local.policies import heap
from support.pilot_waits import poll_until

from ..conftest import create_job, payload, small_config, wait_terminal


def test_a_finished_jobs_policy_is_freed_and_the_heap_trimmed(api, taskapp, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[weakref.ref[Any]] = []
    closed: list[bool] = []
    released: list[bool] = []
    make = policies.make_policy

    def make_and_watch(*args: Any, **kwargs: Any) -> Any:
        policy, why = make(*args, **kwargs)
        made.append(weakref.ref(policy))
        close = policy.close

        def close_and_note() -> None:
            close()
            closed.append(True)

        policy.close = close_and_note
        return policy, why

    release = heap.release_freed_memory

    def release_and_note(collect: bool = True) -> bool:
        released.append(closed == [True])  # after the policy closed
        return release(collect)

    monkeypatch.setattr(policies, "make_policy", make_and_watch)
    monkeypatch.setattr(heap, "release_freed_memory", release_and_note)
    job_id = create_job(api, payload(taskapp.url, small_config(seed=3)))
    assert wait_terminal(api, job_id)["status"] == "succeeded"
    assert len(made) == 1
    poll_until(lambda: True in released, timeout=15.0, what="the heap trimmed after the policy closed")

    def freed() -> bool:
        gc.collect()
        return made[0]() is None

    poll_until(freed, timeout=15.0, what="the finished job's policy collected")
