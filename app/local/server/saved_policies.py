"""The policies of jobs that are not training in this process, as the chat endpoint answers with
them: each loaded once and kept, the most recently used few, instead of a model loaded from disk
for every call (issue 41: that cost a model load a call, N copies for N calls at once, and loads
racing a job's own). A saved policy is its job's last recorded step, so the step's folder is the
key: a job that records another step is loaded again.

A caller holds the policy with `use(...)` while it acts: a policy evicted meanwhile (KEPT others
were asked for) is closed when its last user leaves, not under a call still generating with it
(issue 40). docs/hardening.md.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from app.local.policies.base import Policy

KEPT = 2  # a language model each: a few hundred MB to GBs; the oldest is closed past this


class SavedPolicies:
    """Loaded saved policies by (job id, step folder), at most KEPT; one load per key at a time
    (a second caller waits for the first's); an evicted one closed once no caller uses it."""

    def __init__(self, kept: int = KEPT) -> None:
        self.kept = kept
        self._policies: OrderedDict[tuple[str, str], Policy] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[tuple[str, str], threading.Lock] = {}
        self._users: dict[int, int] = {}  # id(policy) -> callers inside use() with it
        self._evicted: dict[int, Policy] = {}  # out of _policies, closed when their last user leaves

    @contextmanager
    def use(self, job_id: str, folder: Path | None, load: Callable[[], Policy]) -> Iterator[Policy]:
        """The job's saved policy, loaded by `load` (blocking) unless it is kept already, held
        until the block ends: never closed while a caller is inside it."""
        policy, evicted = self._acquire(job_id, folder, load)
        try:
            self._close(evicted)
            yield policy
        finally:
            self._release(policy)

    def _acquire(self, job_id: str, folder: Path | None, load: Callable[[], Policy]) -> tuple[Policy, list[Policy]]:
        key = (job_id, str(folder))
        with self._lock:
            if key in self._policies:
                return self._held(key), []
            loading = self._loading.setdefault(key, threading.Lock())
        with loading:  # the first caller loads; the others wait for it, then find it kept
            with self._lock:
                if key in self._policies:
                    return self._held(key), []
            policy = load()
            with self._lock:
                self._policies[key] = policy
                self._loading.pop(key, None)
                held = self._held(key)
                evicted = [self._policies.popitem(last=False)[1] for _ in range(len(self._policies) - self.kept)]
                idle = [old for old in evicted if not self._users.get(id(old))]
                self._evicted.update((id(old), old) for old in evicted if self._users.get(id(old)))
        return held, idle

    def _held(self, key: tuple[str, str]) -> Policy:
        """Under self._lock: the kept policy, made the most recently used, one more user counted."""
        self._policies.move_to_end(key)
        policy = self._policies[key]
        self._users[id(policy)] = self._users.get(id(policy), 0) + 1
        return policy

    def _release(self, policy: Policy) -> None:
        with self._lock:
            left = self._users[id(policy)] - 1
            if left:
                self._users[id(policy)] = left
                return
            del self._users[id(policy)]
            last_user_of_evicted = self._evicted.pop(id(policy), None)
        self._close([last_user_of_evicted] if last_user_of_evicted is not None else [])

    @staticmethod
    def _close(policies: list[Policy]) -> None:
        for policy in policies:
            policy.close()

    def close(self) -> None:
        """The backend stops: every policy closed, in use or not (its server is going away)."""
        with self._lock:
            kept = [*self._policies.values(), *self._evicted.values()]
            self._policies, self._evicted = OrderedDict(), {}
        self._close(kept)
