"""A failed HTTP call in words and an error answer's detail, read one way for the client and the
embedded backend (app/core/api/failures.py)."""

from __future__ import annotations

import errno
import socket

import httpx
import pytest

from app.core.api.failures import (
    cause_text,
    describe_exception,
    describe_http_error,
    error_detail,
    failure_kind,
    response_detail,
)


def wrapped(outer: BaseException, inner: BaseException) -> BaseException:
    outer.__cause__ = inner
    return outer


REFUSED = wrapped(httpx.ConnectError("All connection attempts failed"), ConnectionRefusedError(errno.ECONNREFUSED, ""))
NO_HOST = wrapped(httpx.ConnectError(""), socket.gaierror(-2, "Name or service not known"))
UNREACHABLE = wrapped(httpx.ConnectError(""), OSError(errno.ENETUNREACH, "Network is unreachable"))


@pytest.mark.parametrize(("exc", "kind", "client", "backend"), [
    (REFUSED, "refused", "connection refused", "connection refused (nothing is listening there)"),
    (httpx.ConnectError("[Errno 111] Connection refused"), "refused", "connection refused",
     "connection refused (nothing is listening there)"),
    (NO_HOST, "no-host", "host name not found", "the host name cannot be resolved"),
    (UNREACHABLE, "unreachable", "network unreachable",
     f"cannot connect ([Errno {errno.ENETUNREACH}] Network is unreachable)"),
], ids=["refused", "refused-in-text", "no-host", "unreachable"])
def test_both_sides_find_the_same_cause_and_keep_their_words(exc, kind, client, backend):
    assert failure_kind(exc) == kind
    assert describe_exception(exc) == client
    assert describe_http_error(exc) == backend


def test_what_is_not_a_known_cause_is_named_by_its_type():
    assert describe_exception(httpx.RemoteProtocolError("Server disconnected.")) == \
        "RemoteProtocolError: Server disconnected"
    assert describe_exception(httpx.ReadError("")) == "ReadError"
    assert describe_http_error(httpx.ReadTimeout("")) == "no answer within the time limit"
    assert describe_http_error(httpx.RemoteProtocolError("")) == "the server closed the connection without answering"
    assert describe_http_error(ValueError("odd")) == "ValueError: odd"
    assert describe_http_error(ValueError()) == "ValueError: no reason given"


def test_a_librarys_internals_are_never_quoted_and_a_looping_chain_ends():
    internal = wrapped(httpx.ReadError(""), RuntimeError("Attempted to exit cancel scope in a different task"))
    assert describe_http_error(internal) == "the connection was closed while waiting for the answer"
    assert cause_text(httpx.ConnectError("<socket.socket object at 0x7f3a2b1c>")) == ""
    first, second = OSError("first"), OSError("second")
    first.__cause__, second.__cause__ = second, first
    assert failure_kind(first) is None and cause_text(first) == "first"


@pytest.mark.parametrize(("body", "text", "summary"), [
    ({"detail": "bad key"}, "", "bad key"),
    ({"message": "slow down"}, "", "slow down"),
    ({"detail": "", "error": {"code": 7}}, "", '{"code": 7}'),
    ({"other": 1}, "", '{"other": 1}'),
    (None, "  <html>\n  Bad   gateway </html> ", "<html> Bad gateway </html>"),
    (None, "", "(empty body)"),
])
def test_the_clients_summary_of_an_error_body(body, text, summary):
    assert error_detail(body, text) == summary


def test_the_embedded_backend_relays_only_the_detail_of_an_answer():
    def answer(**kwargs) -> httpx.Response:
        return httpx.Response(502, **kwargs)

    assert response_detail(answer(json={"detail": "upstream down"})) == "upstream down"
    assert response_detail(answer(json={"detail": {"why": "x"}})) == '{"why": "x"}'
    assert response_detail(answer(json={"message": "not the detail"})) == '{"message": "not the detail"}'
    assert response_detail(answer(json=["a"])) == '["a"]'
    assert response_detail(answer(text="plain " * 100), limit=12) == "plain plain "
