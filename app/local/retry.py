"""Retrying the two hops of a rollout: backend → task app `/rollout`, task app → chat endpoint.

One dropped connection used to fail a whole job. Both hops now retry what is transient — a
connection refused, reset or closed under a request, a connect or pool timeout, an answer of
502, 503 or 504 — with jittered exponential backoff, a few times, before the caller reports a
failure. A read timeout is not retried: the other side is working, just slowly, and asking
again would double its load. Both requests are safe to repeat: a rollout is identified by its
`run_id` (the task app answers a repeated one from its first run) and a chat turn that is
asked twice only records the answer the episode used (trainer.py).

Keep-alive: a client must drop an idle connection before the server does, or a request sent
on a connection the server is closing at that instant fails (httpx and uvicorn both default
to 5 s). Our clients keep idle connections 2 s, our servers 15 s. docs/hardening.md.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from app.core.api.client import CLIENT_KEEPALIVE_S
from app.local.errors import describe_http_error

SERVER_KEEPALIVE_S = 15
RETRYABLE_STATUS = frozenset({502, 503, 504})
_NOT_RETRIED = (httpx.ReadTimeout,)

OnRetry = Callable[[int, str], None]  # (attempt number that failed, why in words)


@dataclass
class Attempts:
    """How many times send_with_retries actually sent: a message about a failure says the
    true number (one for a read timeout, which is not retried), never the most allowed."""

    made: int = 0


@dataclass(frozen=True)
class Backoff:
    attempts: int = 4  # in all, the first included
    first_delay_s: float = 0.2
    max_delay_s: float = 3.0

    def delay(self, failed_attempt: int, rng: random.Random | None = None) -> float:
        """Exponential, with ±50% jitter so many clients do not retry in step."""
        base = min(self.max_delay_s, self.first_delay_s * 2.0 ** (failed_attempt - 1))
        return base * (rng or random).uniform(0.5, 1.5)


DEFAULT_BACKOFF = Backoff()  # the chat hop: ~1.4 s of waiting in all
# The rollout hop waits longer (~8 s in all): long enough for a task app restarted by its
# user (uvicorn starts in 1-2 s) to come back before the job is failed.
ROLLOUT_BACKOFF = Backoff(attempts=6, first_delay_s=0.25, max_delay_s=4.0)


def client_limits(max_connections: int = 100) -> httpx.Limits:
    return httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections,
                        keepalive_expiry=CLIENT_KEEPALIVE_S)


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, httpx.TransportError) and not isinstance(exc, _NOT_RETRIED)


async def send_with_retries(send: Callable[[], Awaitable[httpx.Response]], *,
                            backoff: Backoff = DEFAULT_BACKOFF, on_retry: OnRetry | None = None,
                            attempts: Attempts | None = None) -> httpx.Response:
    """The first answer that is not a transient failure; the last answer or error when every
    attempt failed transiently. `attempts`, when given, counts the requests sent."""
    for attempt in range(1, backoff.attempts + 1):
        last = attempt == backoff.attempts
        if attempts is not None:
            attempts.made = attempt
        try:
            response = await send()
        except httpx.HTTPError as exc:
            if last or not is_transient(exc):
                raise
            why = describe_http_error(exc)
        else:
            if last or response.status_code not in RETRYABLE_STATUS:
                return response
            why = f"HTTP {response.status_code}"
        if on_retry is not None:
            on_retry(attempt, why)
        await asyncio.sleep(backoff.delay(attempt))
    raise AssertionError("unreachable")
