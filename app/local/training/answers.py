"""Reading a task app's answers with a size cap, so one answer cannot fill the backend's memory.

A task app is foreign code: it can answer `/rollout` with hundreds of megabytes (a trace with
every observation as an image, a bug that repeats a list). Parsed into Python objects such an
answer takes about ten times its size, and the backend holds up to
`[rollout] max_concurrent_rollouts` of them at once. Every answer the backend reads from a task
app is therefore streamed: an answer whose Content-Length is over the cap is refused before a
byte of it is read, and one that streams past the cap is dropped at the cap (the connection is
closed). Nothing over the cap is ever buffered. docs/wire-contract.md#answer-sizes.

The cap of a rollout's answer is `[rollout] max_answer_bytes` (DEFAULT_MAX_ANSWER_BYTES; the
bounds are in app/core/config/trainable.py, checked by the client and the backend alike).
"""

from __future__ import annotations

import asyncio

import httpx

# 32 MiB: far above any answer of the reference task apps (a few kB) or of the SDK's Crafter
# app with its full v3 trace (well under 1 MiB for a 10-turn episode), and low enough that
# the default 8 rollouts in flight, each answer parsed, stay in hundreds of megabytes.
DEFAULT_MAX_ANSWER_BYTES = 32 << 20
# /health, /task_info (verify) and /openapi.json: what is read of them is a status, a detail or
# a schema; a few MiB is plenty.
SMALL_ANSWER_BYTES = 4 << 20
# Read as it comes: the answer is never asked to be compressed, so what is counted is what is held.
NOT_COMPRESSED = {"Accept-Encoding": "identity"}
_DROPPED_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding"})


class AnswerTooLarge(Exception):
    """An answer over its cap: `size` is what its Content-Length declared, or None when it
    streamed past the cap (its whole size is then not known: reading stopped there)."""

    def __init__(self, cap: int, size: int | None) -> None:
        self.cap, self.size = cap, size
        super().__init__(self.words())

    def words(self) -> str:
        if self.size is not None:
            return f"declared {show_bytes(self.size)} (Content-Length), over the limit of {show_bytes(self.cap)}"
        return f"exceeded {show_bytes(self.cap)} (reading stopped there)"


class AnswerDeadline(httpx.ReadTimeout):
    """No whole answer within `seconds` of the send: connecting, the headers and the body
    together. A read timeout, so it is not retried (app/local/training/retry.py): the other side
    is working, just slowly, or trickling bytes to keep a per-read timeout from firing."""

    def __init__(self, seconds: float, request: httpx.Request) -> None:
        self.seconds = seconds
        super().__init__(f"no whole answer within {seconds:g} s", request=request)


def show_bytes(count: int) -> str:
    """1536 → "1.5 KiB", 33554432 → "32 MiB": binary units, as the config's bounds are."""
    value, unit = float(count), "bytes"
    for name in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, name
    if unit == "bytes":
        return f"{count:,} bytes"
    return f"{value:.1f}".rstrip("0").rstrip(".") + f" {unit}"


async def send_capped(http: httpx.AsyncClient, request: httpx.Request, cap: int) -> httpx.Response:
    """Send `request` and read its answer, at most `cap` bytes of it: the answer, read and
    closed, or AnswerTooLarge (its connection closed, at most `cap` bytes held). Transport
    errors are httpx's own, so a caller retries them as before (retry.py)."""
    response = await http.send(request, stream=True)
    try:
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise AnswerTooLarge(cap, int(declared))
        chunks: list[bytes] = []
        held = 0
        async for chunk in response.aiter_bytes():
            held += len(chunk)
            if held > cap:
                raise AnswerTooLarge(cap, None)
            chunks.append(chunk)
    finally:
        await response.aclose()
    # The body is decoded already: the headers that described its transfer no longer do.
    headers = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _DROPPED_HEADERS]
    return httpx.Response(response.status_code, headers=headers, content=b"".join(chunks), request=request,
                          extensions={"http_version": response.extensions.get("http_version", b"HTTP/1.1")})


async def send_within(http: httpx.AsyncClient, request: httpx.Request, cap: int, deadline_s: float) -> httpx.Response:
    """`send_capped`, cut at `deadline_s` from now: httpx's timeouts are per read, and a task app
    that sends a byte every few seconds never trips one (issue 41, docs/hardening.md section 3).
    The connection is closed when the deadline passes; AnswerDeadline says so."""
    deadline = asyncio.timeout(deadline_s)
    try:
        async with deadline:
            return await send_capped(http, request, cap)
    except TimeoutError:
        if not deadline.expired():
            raise
        raise AnswerDeadline(deadline_s, request) from None
