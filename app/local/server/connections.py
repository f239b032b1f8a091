"""Bounds on connections to our servers that no route sees: a header deadline and a cap.

uvicorn bounds an idle connection between requests (`timeout_keep_alive`) but not one that
never finishes a request's headers: 1,100 connections that sent half a request line were all
held after 40 s, each a socket and a protocol object (issue 41). uvicorn has no option for it,
so its h11 protocol is extended here: a connection whose request headers are not complete
within HEADER_TIMEOUT_S of its first byte (or of its opening, for one that sends nothing) is
closed without an answer. And at most MAX_CONNECTIONS are served at once (`limit_concurrency`):
past it a request is answered 503, which our clients retry (app/core/api/retry.py).
docs/hardening.md section 2.
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

# Seconds a connection may take to send a request's headers. Our clients send them in one
# write; 10 s is generous for a slow network and short enough that a flood of them drains.
HEADER_TIMEOUT_S = 10.0
# Connections at once, idle ones included: far above what the backend serves (a job's rollouts
# in flight are at most 256, each one chat call at a time, plus a few clients' event streams).
MAX_CONNECTIONS = 1024


class HeaderDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request headers are late."""

    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        if self._header_timer is None and self._awaiting_headers():
            self._arm_header_timer()  # the first byte of the next request on a kept-alive connection
        super().data_received(data)
        if not self._awaiting_headers():
            self._disarm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def _awaiting_headers(self) -> bool:
        return bool(self.conn.their_state is h11.IDLE)

    def _arm_header_timer(self) -> None:
        self._disarm_header_timer()
        self._header_timer = self.loop.call_later(HEADER_TIMEOUT_S, self._headers_late)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self._awaiting_headers() and not self.transport.is_closing():
            self.transport.close()
