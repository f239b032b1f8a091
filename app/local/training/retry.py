"""Retrying the two hops of a rollout: backend → task app `/rollout`, task app → chat endpoint.

One dropped connection used to fail a whole job. Both hops now retry what is transient — a
connection refused, reset or closed under a request, a connect or pool timeout, an answer of
502, 503 or 504 — with jittered exponential backoff, a few times, before the caller reports a
failure (app.core.api.retry: the one loop and jitter rule, our client's too). A read timeout is not
retried: the other side is working, just slowly, and asking again would double its load. Both
requests are safe to repeat: a rollout is identified by its `run_id` (the task app answers a
repeated one from its first run) and a chat turn that is asked twice only records the answer the
episode used (job_run.py).

Keep-alive: a client must drop an idle connection before the server does, or a request sent
on a connection the server is closing at that instant fails (httpx and uvicorn both default
to 5 s). Our clients keep idle connections 2 s, our servers 15 s. docs/hardening.md.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import httpx

from app.core.api.failures import describe_http_error, response_detail
from app.core.api.retry import Attempts, Backoff, OnRetry, retrying
from app.core.api.transport import CLIENT_KEEPALIVE_S

SERVER_KEEPALIVE_S = 15
RETRYABLE_STATUS = frozenset({502, 503, 504})
RETRY_DETAIL_CHARS = 200  # of an answer's detail, in a retry's words
_NOT_RETRIED = (httpx.ReadTimeout,)

DEFAULT_BACKOFF = Backoff()  # the chat hop: ~1.4 s of waiting in all
# The rollout hop waits longer (~8 s in all): long enough for a task app restarted by its
# user (uvicorn starts in 1-2 s) to come back before the job is failed.
ROLLOUT_BACKOFF = Backoff(attempts=6, first_delay_s=0.25, max_delay_s=4.0)


def client_limits(max_connections: int = 100) -> httpx.Limits:
    return httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections,
                        keepalive_expiry=CLIENT_KEEPALIVE_S)


def is_transient(exc: BaseException) -> bool:
    return isinstance(exc, httpx.TransportError) and not isinstance(exc, _NOT_RETRIED)


def transient_http_error(exc: Exception) -> str | None:
    """Why a failed HTTP call is worth another attempt, in words; None when it is not."""
    return describe_http_error(exc) if is_transient(exc) else None


def transient_status(response: httpx.Response) -> str | None:
    """`HTTP 502: <the answer's detail>` (its first RETRY_DETAIL_CHARS, on one line) for an
    answer worth another attempt: a retry said without its reason left a user of a slow model
    guessing (issue 37). The caller scrubs it of keys before showing it (rollouts.py)."""
    if response.status_code not in RETRYABLE_STATUS:
        return None
    try:
        detail = " ".join(response_detail(response, RETRY_DETAIL_CHARS).split())
    except (httpx.ResponseNotRead, UnicodeDecodeError, RecursionError):
        detail = ""
    return f"HTTP {response.status_code}: {detail}" if detail else f"HTTP {response.status_code}"


async def send_with_retries(send: Callable[[], Awaitable[httpx.Response]], *,
                            backoff: Backoff = DEFAULT_BACKOFF, on_retry: OnRetry | None = None,
                            attempts: Attempts | None = None) -> httpx.Response:
    """The first answer that is not a transient failure; the last answer or error when every
    attempt failed transiently (app.core.api.retry.retrying). `attempts`, when given, counts the
    requests sent."""
    return await retrying(send, backoff=backoff, transient_error=transient_http_error,
                          transient_answer=transient_status, on_retry=on_retry, attempts=attempts)
