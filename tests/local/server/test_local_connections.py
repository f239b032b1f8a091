"""Connections no route sees (app/local/server/connections.py, docs/hardening.md section 2):
one that never finishes its request headers is closed within the header deadline, and past
the connection cap a request is answered 503, while a normal request is answered meanwhile.
Issue 41: 1,100 connections that sent half a request line were all held after 40 s."""

from __future__ import annotations

import selectors
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager

import pytest

from app.local import servers
from app.local.server import connections
from app.local.servers import ServerHandle, start_backend, start_taskapp
from support import loopback_http

from ..conftest import API_KEY, ENV_KEY

HALF_OPEN = 100
WAIT_BOUND_S = 20.0  # a bound on the waits below, never a measurement


@contextmanager
def _backend(tmp_path) -> Iterator[ServerHandle]:
    with start_backend(api_key=API_KEY, db_path=tmp_path / "db.sqlite3", env_api_keys=[ENV_KEY]) as server:
        yield server


@contextmanager
def _taskapp(tmp_path) -> Iterator[ServerHandle]:
    with start_taskapp(env_api_keys=[ENV_KEY]) as server:
        yield server


SERVERS: dict[str, tuple[Callable[..., AbstractContextManager[ServerHandle]], str]] = {
    "backend": (_backend, "/api/health"), "task app": (_taskapp, "/"),
}


def _open(server: ServerHandle, first_bytes: bytes) -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=5)
    if first_bytes:
        sock.sendall(first_bytes)
    return sock


def _whole_answer(sock: socket.socket) -> bytes:
    """One answer read to its end (its headers, then Content-Length bytes of body)."""
    data = b""
    while b"\r\n\r\n" not in data:  # each recv bounded by the socket's timeout
        chunk = sock.recv(4096)
        assert chunk, f"closed before a whole answer: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        chunk = sock.recv(4096)
        assert chunk, f"closed before a whole answer: {data + body!r}"
        body += chunk
    return head + b"\r\n\r\n" + body


def _wait_all_closed(socks: list[socket.socket]) -> list[socket.socket]:
    """Wait (bounded) until the server closed each socket; the ones still open when the bound passed."""
    selector = selectors.DefaultSelector()
    for sock in socks:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)
    open_ones = set(socks)
    deadline = time.monotonic() + WAIT_BOUND_S
    while open_ones and time.monotonic() < deadline:
        for key, _ in selector.select(timeout=0.2):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(4096)
            except ConnectionResetError:
                data = b""
            if not data:  # EOF or a reset: closed by the server, without an answer
                selector.unregister(sock)
                open_ones.discard(sock)
            else:
                raise AssertionError(f"an answer to half a request: {data[:80]!r}")
    selector.close()
    return list(open_ones)


@pytest.mark.parametrize("which", SERVERS.keys())
def test_connections_that_never_finish_their_headers_are_closed_and_others_served(tmp_path, monkeypatch, which):
    monkeypatch.setattr(connections, "HEADER_TIMEOUT_S", 0.5)
    start, probe = SERVERS[which]
    with start(tmp_path) as server, ExitStack() as held:
        socks = [held.enter_context(_open(server, b"GET /api/hea" if n % 4 else b"")) for n in range(HALF_OPEN)]
        # A kept-alive connection: one whole request answered, then half of the next.
        kept = held.enter_context(_open(server, f"GET {probe} HTTP/1.1\r\nHost: x\r\n\r\n".encode()))
        assert _whole_answer(kept).startswith(b"HTTP/1.1 200 "), "the whole request is answered"
        kept.sendall(b"GET / HT")
        with loopback_http.client(timeout=10) as client:
            assert client.get(server.url + probe).status_code == 200  # a normal request meanwhile
        still_open = _wait_all_closed([*socks, kept])
        assert not still_open, f"{len(still_open)} of {len(socks) + 1} connections still held"
        with loopback_http.client(timeout=10) as client:
            assert client.get(server.url + probe).status_code == 200


def test_past_the_connection_cap_a_request_is_answered_503_then_served_again(tmp_path, monkeypatch):
    monkeypatch.setattr(servers, "MAX_CONNECTIONS", 5)
    monkeypatch.setattr(connections, "HEADER_TIMEOUT_S", 1.0)
    with _backend(tmp_path) as server, ExitStack() as held:
        socks = [held.enter_context(_open(server, b"GET /api/he")) for _ in range(5)]
        with loopback_http.client(timeout=10) as client:
            assert client.get(server.url + "/api/health").status_code == 503
        assert not _wait_all_closed(socks)  # the header deadline frees their places
        with loopback_http.client(timeout=10) as client:
            assert client.get(server.url + "/api/health").status_code == 200


def test_a_stop_wakes_the_server_at_once_not_at_its_next_tick(monkeypatch):
    """A stop ends the server without waiting out uvicorn's tick (docs/testing.md#speed): with a
    tick of an hour, the server's thread still ends within the stop's own bound."""
    monkeypatch.setattr(servers._Server, "TICK_S", 3600.0)
    handle = start_taskapp(env_api_keys=[ENV_KEY])  # answers: start() waited for it
    handle.stop(timeout=10)
    assert handle._thread is not None and not handle._thread.is_alive()
