"""A finished job's policy is loaded once for the chat endpoint, whatever the number of callers,
and the oldest of those kept is closed (issue 41's probe: a model loaded from disk per call, N
loads at once, raced a job's own load and broke it). app/local/server/saved_policies.py."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from app.local.server.saved_policies import SavedPolicies


class _Loaded:
    def __init__(self, name: str) -> None:
        self.name, self.closed = name, False

    def close(self) -> None:
        self.closed = True


def test_callers_at_once_share_one_load():
    saved, loads, release = SavedPolicies(), [], threading.Event()

    def load() -> Any:
        loads.append(1)
        release.wait(10)  # every caller arrives while the first load runs
        return _Loaded("a")

    got: list[Any] = []
    callers = [threading.Thread(target=lambda: got.append(saved.get("job_a", Path("/s/1"), load))) for _ in range(6)]
    for caller in callers:
        caller.start()
    release.set()
    for caller in callers:
        caller.join(10)
    assert len(loads) == 1 and len(got) == 6 and len({id(p) for p in got}) == 1


def test_a_new_step_is_loaded_again_and_the_oldest_kept_is_closed():
    saved = SavedPolicies(kept=2)
    first = saved.get("job_a", Path("/s/1"), lambda: _Loaded("a1"))
    second = saved.get("job_b", Path("/s/2"), lambda: _Loaded("b2"))
    assert saved.get("job_a", Path("/s/1"), lambda: _Loaded("again")) is first  # kept: no load
    third = saved.get("job_a", Path("/s/3"), lambda: _Loaded("a3"))  # a later step of job_a
    assert third.name == "a3" and second.closed and not first.closed  # job_b's was the least recently used
    saved.close()
    assert first.closed and third.closed
