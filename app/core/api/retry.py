"""Retrying a call that failed transiently: one helper and one jitter rule for every retry.

Our client's requests to a backend (app/core/api/transport.py), its reconnecting watch
(app/core/api/streaming.py) and the embedded backend's hops to and from task apps
(app/local/training/retry.py, app/local/training/rollout_contract.py) all wait by :func:`backoff_delay`, and all
but the watch loop through :func:`retrying`. What counts as transient is the caller's to say:
an error type, a status, a flag on an error. docs/hardening.md, section 3.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

OnRetry = Callable[[int, str], None]  # (the number of the attempt that failed, why in words)


def backoff_delay(failed_attempt: int, first_delay_s: float, max_delay_s: float,
                  rng: random.Random | None = None) -> float:
    """The wait after attempt `failed_attempt` (1 for the first) failed: exponential from
    `first_delay_s`, doubling each time up to `max_delay_s`, then ±50 % jitter, so that many
    clients that failed together do not retry in step."""
    base = min(max_delay_s, first_delay_s * 2.0 ** max(0, failed_attempt - 1))
    return base * (rng or random).uniform(0.5, 1.5)


@dataclass(frozen=True)
class Backoff:
    """How often and how patiently to retry."""

    attempts: int = 4  # in all, the first included
    first_delay_s: float = 0.2
    max_delay_s: float = 3.0

    def delay(self, failed_attempt: int, rng: random.Random | None = None) -> float:
        return backoff_delay(failed_attempt, self.first_delay_s, self.max_delay_s, rng)


@dataclass
class Attempts:
    """How many times `retrying` actually called: a message about a failure says the true
    number (one for an error that is not retried), never the most allowed."""

    made: int = 0


def _never(_: object) -> str | None:
    return None


async def retrying(call: Callable[[], Awaitable[T]], *, backoff: Backoff,
                   transient_error: Callable[[Exception], str | None] = _never,
                   transient_answer: Callable[[T], str | None] = _never,
                   on_retry: OnRetry | None = None, attempts: Attempts | None = None) -> T:
    """`call()` until it answers something that is not a transient failure, at most
    `backoff.attempts` times, waiting `backoff.delay(n)` after failed attempt n.

    `transient_error(exc)` and `transient_answer(answer)` say why an error or an answer is a
    transient failure worth another attempt (None: it is not). When the last attempt fails
    transiently too, its error is raised or its answer returned. `on_retry(n, why)` is told
    before each wait; `attempts`, when given, counts the calls made."""
    for attempt in range(1, backoff.attempts + 1):
        last = attempt == backoff.attempts
        if attempts is not None:
            attempts.made = attempt
        try:
            answer = await call()
        except Exception as exc:
            why = transient_error(exc)
            if last or why is None:
                raise
        else:
            why = transient_answer(answer)
            if last or why is None:
                return answer
        if on_retry is not None:
            on_retry(attempt, why)
        await asyncio.sleep(backoff.delay(attempt))
    raise ValueError(f"backoff.attempts must be at least 1 (got {backoff.attempts})")
