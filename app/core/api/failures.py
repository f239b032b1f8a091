"""A failed HTTP call in words, and the detail of an error answer: written once, for the client
(app/core/api/transport.py, health.py) and the embedded backend's hops (app/local: the task app
calls, their retries, the inference calls of the reference task apps).

- What went wrong under a network error is found one way (:func:`cause_chain`,
  :func:`failure_kind`: refused, a host name that does not resolve, an unreachable network),
  and a cause's text is quoted only when it is not a library's internals (:func:`cause_text`).
  Two phrasings of it are kept, each where its tests and docs expect it: the client's short
  phrase after "Cannot reach the backend at URL for …:" (:func:`describe_exception`), and the
  embedded backend's, which says what each failure means for a task app (:func:`describe_http_error`).
- What an error answer says is read one way (:func:`detail_of`): the client's one-line summary
  (:func:`error_detail`) and the embedded backend's relay of a task app's answer
  (:func:`response_detail`) both take it from there.
"""

from __future__ import annotations

import errno
import json
import re
import socket
from collections.abc import Sequence
from typing import Any, Literal

import httpx

# A cause's text that only the library's authors can read: an anyio cancel scope, an object's
# repr or address, a hex id. Such text is left out of every message (docs/hardening.md).
_INTERNAL = re.compile(r"cancel scope|object at 0x|<[\w.]+ |\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{6,}\b",
                       re.IGNORECASE)
_TIMEOUTS = (httpx.TimeoutException,)
# The keys an error body's words are under, in the order they are looked for.
DETAIL_KEYS = ("detail", "message", "error")

FailureKind = Literal["refused", "no-host", "unreachable"]


# --------------------------------------------------------------------------- the cause


def cause_chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it wraps (``__cause__``, else ``__context__``), at most 8, once each."""
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain and len(chain) < 8:  # a cause chain can loop
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def _chain_texts(exc: BaseException) -> list[str]:
    return [text for text in (str(e).strip() for e in cause_chain(exc)) if text]


def cause_text(exc: BaseException) -> str:
    """The first text in the cause chain, unless it is a library's internals."""
    texts = _chain_texts(exc)
    return texts[0] if texts and not _INTERNAL.search(texts[0]) else ""


def failure_kind(exc: BaseException) -> FailureKind | None:
    """What a failed connection came to, from the errors under it and their texts: ``refused``
    (nothing listens there), ``no-host`` (the name does not resolve), ``unreachable`` (no route
    to the network or host), or None."""
    chain = cause_chain(exc)
    text = " ".join(_chain_texts(exc)).lower()
    if "refused" in text or any(isinstance(e, ConnectionRefusedError) for e in chain):
        return "refused"
    if (any(isinstance(e, socket.gaierror) for e in chain)
            or any(words in text for words in ("name or service not known", "nodename", "getaddrinfo"))):
        return "no-host"
    if any(isinstance(e, OSError) and e.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH) for e in chain):
        return "unreachable"
    return None


# --------------------------------------------------------------------------- in words

_SHORT = {"refused": "connection refused", "no-host": "host name not found", "unreachable": "network unreachable"}


def describe_exception(exc: BaseException) -> str:
    """The client's short phrase for a network error: what the failure came to, else its type
    and text ("Cannot reach the backend at URL for …: connection refused.")."""
    kind = failure_kind(exc)
    if kind is not None:
        return _SHORT[kind]
    text = str(exc).strip().rstrip(".")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_HTTPX_WORDS: dict[type[BaseException], str] = {
    httpx.ConnectTimeout: "the connection timed out",
    httpx.ReadTimeout: "no answer within the time limit",
    httpx.WriteTimeout: "sending the request timed out",
    httpx.PoolTimeout: "no free connection in time (too many requests at once)",
    httpx.ReadError: "the connection was closed while waiting for the answer",
    httpx.WriteError: "the connection was closed while sending the request",
    httpx.RemoteProtocolError: "the server closed the connection without answering",
}


def describe_http_error(exc: BaseException) -> str:
    """The embedded backend's words for a failed call to a task app or an inference URL, which
    say what each failure means there; httpx's own message is often empty, and the text of
    the error under it can be a library's internals (never quoted: :func:`cause_text`)."""
    if isinstance(exc, httpx.ConnectError):
        kind = failure_kind(exc)
        if kind == "refused":
            return "connection refused (nothing is listening there)"
        if kind == "no-host":
            return "the host name cannot be resolved"
        return f"cannot connect ({cause_text(exc) or 'no reason given'})"
    for kind_of_error, text in _HTTPX_WORDS.items():
        if isinstance(exc, kind_of_error):
            # A timeout's words say all there is; what lies under it is the event loop's.
            detail = "" if isinstance(exc, _TIMEOUTS) else cause_text(exc)
            return f"{text} ({detail})" if detail else text
    return f"{type(exc).__name__}: {cause_text(exc) or 'no reason given'}"


# --------------------------------------------------------------------------- an error answer


def detail_of(body: Any, keys: Sequence[str] = DETAIL_KEYS) -> Any:
    """What a parsed error body says: the first of ``keys`` an object holds with a value, else
    the body itself."""
    if isinstance(body, dict):
        for key in keys:
            if body.get(key):
                return body[key]
    return body


def error_detail(body: Any, text: str) -> str:
    """A one-line summary of an error body: ``detail``, ``message`` or ``error``, else the text."""
    if isinstance(body, dict):
        value = detail_of(body)
        return value if isinstance(value, str) else json.dumps(value)[:300]
    snippet = " ".join(text.split())[:160]
    return snippet or "(empty body)"


def response_detail(response: httpx.Response, limit: int = 300) -> str:
    """The `detail` of an error answer, else the start of its body."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:limit]
    detail = detail_of(body, ("detail",))
    text = detail if isinstance(detail, str) else json.dumps(detail)
    return text[:limit]


__all__ = ["DETAIL_KEYS", "cause_chain", "cause_text", "describe_exception", "describe_http_error", "detail_of",
           "error_detail", "failure_kind", "response_detail"]
