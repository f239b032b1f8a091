"""The one retry loop and jitter rule (app/core/api/retry.py) of the client and the embedded backend."""

from __future__ import annotations

import random

import pytest

from app.core.api import retry
from app.core.api.retry import Attempts, Backoff, backoff_delay, retrying


def test_the_delay_doubles_up_to_its_cap_with_half_jitter_either_way():
    rng = random.Random(7)
    for failed, base in ((1, 0.2), (2, 0.4), (3, 0.8), (4, 1.6), (5, 3.0), (9, 3.0)):
        delays = [backoff_delay(failed, 0.2, 3.0, rng) for _ in range(200)]
        assert all(0.5 * base <= d <= 1.5 * base for d in delays), failed
        assert max(delays) - min(delays) > 0.5 * base  # jittered, not fixed


@pytest.fixture
def no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry, "backoff_delay", lambda *args: 0.0)


async def test_transient_failures_are_retried_and_counted(no_waits):
    answers = iter([ConnectionError("reset"), 503, 200])
    told: list[tuple[int, str]] = []
    attempts = Attempts()

    async def call() -> int:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    got = await retrying(call, backoff=Backoff(attempts=4), attempts=attempts,
                         transient_error=lambda exc: str(exc) if isinstance(exc, ConnectionError) else None,
                         transient_answer=lambda status: f"HTTP {status}" if status >= 500 else None,
                         on_retry=lambda n, why: told.append((n, why)))
    assert (got, attempts.made, told) == (200, 3, [(1, "reset"), (2, "HTTP 503")])


async def test_the_last_attempt_answers_and_a_lasting_error_is_raised_at_once(no_waits):
    attempts = Attempts()

    async def busy() -> int:
        return 503

    assert await retrying(busy, backoff=Backoff(attempts=3), attempts=attempts,
                          transient_answer=lambda status: "busy") == 503
    assert attempts.made == 3

    async def refused() -> int:
        raise ValueError("not transient")

    with pytest.raises(ValueError):
        await retrying(refused, backoff=Backoff(attempts=3), attempts=attempts)
    assert attempts.made == 1  # the true count: it was not retried
