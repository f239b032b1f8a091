"""A finished job's policy is loaded once for the chat endpoint, whatever the number of callers,
and the oldest of those kept is closed (issue 41's probe: a model loaded from disk per call, N
loads at once, raced a job's own load and broke it), once no call acts on it any more (issue 40).
app/local/server/saved_policies.py."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from app.local.server.saved_policies import SavedPolicies


class _Loaded:
    def __init__(self, name: str) -> None:
        self.name, self.closed = name, False

    def act(self) -> str:
        if self.closed:
            raise RuntimeError(f"{self.name} acted after it was closed")
        return self.name

    def close(self) -> None:
        self.closed = True


def _get(saved: SavedPolicies, job_id: str, folder: Path, load: Any) -> Any:
    with saved.use(job_id, folder, load) as policy:
        return policy


def test_callers_at_once_share_one_load():
    saved, loads, release = SavedPolicies(), [], threading.Event()

    def load() -> Any:
        loads.append(1)
        release.wait(10)  # every caller arrives while the first load runs
        return _Loaded("a")

    got: list[Any] = []
    callers = [threading.Thread(target=lambda: got.append(_get(saved, "job_a", Path("/s/1"), load))) for _ in range(6)]
    for caller in callers:
        caller.start()
    release.set()
    for caller in callers:
        caller.join(10)
    assert len(loads) == 1 and len(got) == 6 and len({id(p) for p in got}) == 1


def test_a_new_step_is_loaded_again_and_the_oldest_kept_is_closed():
    saved = SavedPolicies(kept=2)
    first = _get(saved, "job_a", Path("/s/1"), lambda: _Loaded("a1"))
    second = _get(saved, "job_b", Path("/s/2"), lambda: _Loaded("b2"))
    assert _get(saved, "job_a", Path("/s/1"), lambda: _Loaded("again")) is first  # kept: no load
    third = _get(saved, "job_a", Path("/s/3"), lambda: _Loaded("a3"))  # a later step of job_a
    assert third.name == "a3" and second.closed and not first.closed  # job_b's was the least recently used
    saved.close()
    assert first.closed and third.closed


def test_a_policy_evicted_while_a_call_acts_on_it_is_closed_when_the_call_ends():
    saved = SavedPolicies(kept=1)
    inside, release, answers = threading.Event(), threading.Event(), []
    errors: list[BaseException] = []
    held: list[Any] = []

    def call_on_a() -> None:
        try:
            with saved.use("job_a", Path("/s/a"), lambda: _Loaded("a")) as policy:
                held.append(policy)
                inside.set()
                release.wait(10)  # B is loaded (and A evicted) while this call is still acting
                answers.append(policy.act())
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    caller = threading.Thread(target=call_on_a)
    caller.start()
    assert inside.wait(10)
    with saved.use("job_b", Path("/s/b"), lambda: _Loaded("b")) as b:
        assert b.act() == "b"
    with saved.use("job_b", Path("/s/b"), lambda: _Loaded("b again")) as kept:
        assert kept is b  # B is the one kept
    a = held[0]
    assert not a.closed  # evicted, but its call is still acting
    release.set()
    caller.join(10)
    assert errors == [] and answers == ["a"] and a.closed and not b.closed
    saved.close()
    assert b.closed
