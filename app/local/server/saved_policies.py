"""The policies of jobs that are not training in this process, as the chat endpoint answers with
them: each loaded once and kept, the most recently used few, instead of a model loaded from disk
for every call (issue 41: that cost a model load a call, N copies for N calls at once, and loads
racing a job's own). A saved policy is its job's last recorded step, so the step's folder is the
key: a job that records another step is loaded again. docs/hardening.md.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

from app.local.policies.base import Policy

KEPT = 2  # a language model each: a few hundred MB to GBs; the oldest is closed past this


class SavedPolicies:
    """Loaded saved policies by (job id, step folder), at most KEPT; one load per key at a time
    (a second caller waits for the first's), and evicted ones closed."""

    def __init__(self, kept: int = KEPT) -> None:
        self.kept = kept
        self._policies: OrderedDict[tuple[str, str], Policy] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[tuple[str, str], threading.Lock] = {}

    def get(self, job_id: str, folder: Path | None, load: Callable[[], Policy]) -> Policy:
        """The job's saved policy, loaded by `load` (blocking) unless it is kept already."""
        key = (job_id, str(folder))
        with self._lock:
            if key in self._policies:
                self._policies.move_to_end(key)
                return self._policies[key]
            loading = self._loading.setdefault(key, threading.Lock())
        with loading:  # the first caller loads; the others wait for it, then find it kept
            with self._lock:
                if key in self._policies:
                    self._policies.move_to_end(key)
                    return self._policies[key]
            policy = load()
            with self._lock:
                self._policies[key] = policy
                self._loading.pop(key, None)
                evicted = [self._policies.popitem(last=False)[1] for _ in range(len(self._policies) - self.kept)]
        for old in evicted:
            old.close()
        return policy

    def close(self) -> None:
        with self._lock:
            kept, self._policies = list(self._policies.values()), OrderedDict()
        for policy in kept:
            policy.close()
