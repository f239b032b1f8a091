"""What both local servers refuse before a route sees it: oversized, too deeply nested and
non-JSON bodies.

A pure ASGI middleware, so it runs before FastAPI parses anything:
- a body over its path's byte limit is answered 413, from its Content-Length when it has one
  (nothing is read) or as soon as the streamed bytes pass the limit;
- a body whose Content-Type is not application/json is answered 415 (FastAPI would read it as
  JSON anyway, so a form or text/plain post created jobs);
- a body that is not UTF-8 is answered 422 (FastAPI would answer a bare 400);
- a JSON body nested deeper than MAX_JSON_DEPTH is answered 422 — Python's JSON parser
  would raise RecursionError, which used to become a 500 and a closed connection;
- a number JSON does not have (NaN, Infinity, or one too large for a float) is answered 422
  naming where it is — Python's parser accepts all three, and they passed every check after it.

docs/hardening.md lists the limits. Answers are the same `{"detail": ...}` JSON as every other
error of these servers.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MAX_BODY_BYTES = 1 << 20  # 1 MiB: a job payload is a few kB
MAX_JSON_DEPTH = 32  # a job payload nests 5 deep

# A JSON string, escapes included, matched without backtracking.
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+"', re.DOTALL)
_OPEN = np.frombuffer(b"[{", dtype=np.uint8)
_CLOSE = np.frombuffer(b"]}", dtype=np.uint8)


def json_depth(body: bytes) -> int:
    """How deeply the arrays and objects of a JSON text nest (0 for a scalar). Counts brackets
    outside strings, so it works on any bytes and costs no recursion."""
    return _depth_outside_strings(_JSON_STRING.sub(b'""', body))


def _depth_outside_strings(text: bytes) -> int:
    outside = np.frombuffer(text, dtype=np.uint8)
    if not outside.size:
        return 0
    steps = np.isin(outside, _OPEN).astype(np.int32) - np.isin(outside, _CLOSE).astype(np.int32)
    return int(max(np.cumsum(steps).max(), 0))


# A \uD800-\uDFFF escape that is not half of a pair: Python's parser accepts it, and the string
# then cannot be encoded anywhere (a 500 when stored, logged or sent on).
_LONE_SURROGATE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")


def body_problem(body: bytes, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """Why a request body cannot be taken as JSON text, or None."""
    # JSON between systems is UTF-8 (RFC 8259). Python's parser also guesses UTF-16 and -32,
    # in which the depth count below would read the wrong bytes as brackets and quotes.
    if json.detect_encoding(body) not in ("utf-8", "utf-8-sig"):
        return "The body must be JSON encoded as UTF-8"
    try:  # bytes that are not UTF-8: FastAPI could not decode them (and would answer a bare 400)
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"The body must be JSON encoded as UTF-8 (byte {exc.start:,} is not)"
    outside = _JSON_STRING.sub(b'""', body)
    if _depth_outside_strings(outside) > max_depth:
        return f"The JSON body nests deeper than {max_depth} levels; send a flatter document"
    if _LONE_SURROGATE.search(body):
        return "The JSON body holds a \\u escape of half a character (a lone surrogate); send valid text"
    if _MAYBE_NOT_FINITE.search(outside):
        return not_finite_problem(body)
    return None


# Outside strings, only these can be a number that is not finite: a NaN or Infinity literal, or
# a number with an exponent or more digits than a float holds (1e999 parses to inf).
_MAYBE_NOT_FINITE = re.compile(rb"NaN|Infinity|[0-9][eE]|[0-9]{300}")
MAX_NAMED_PATHS = 5


class _NotFinite:
    """What the parser puts where a number is not finite, so the walk below can name the place."""


_NOT_FINITE = _NotFinite()


def _not_finite_float(text: str) -> float | _NotFinite:
    value = float(text)
    return value if math.isfinite(value) else _NOT_FINITE


def not_finite_paths(value: Any, path: str = "") -> Iterator[str]:
    """Where a parsed document holds _NOT_FINITE, as `data.config.tags[0]`. Recursion is bounded:
    the depth was checked before parsing."""
    if value is _NOT_FINITE:
        yield path or "the body"
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from not_finite_paths(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from not_finite_paths(item, f"{path}[{index}]")


def not_finite_problem(body: bytes) -> str | None:
    """A 422 detail naming where a JSON body holds NaN, Infinity or a number beyond a float, or
    None (also when the body is not JSON at all: the route says so in its own words)."""
    try:
        parsed = json.loads(body, parse_constant=lambda _: _NOT_FINITE, parse_float=_not_finite_float)
    except (ValueError, RecursionError):
        return None
    paths = list(itertools.islice(not_finite_paths(parsed), MAX_NAMED_PATHS + 1))
    if not paths:
        return None
    named = ", ".join(short_repr_path(p) for p in paths[:MAX_NAMED_PATHS])
    if len(paths) > MAX_NAMED_PATHS:
        named += ", …"
    return (f"The JSON body holds a number that is not finite (NaN, Infinity or beyond a 64-bit float) at {named}; "
            "JSON has no such numbers: send finite ones")


def short_repr_path(path: str, limit: int = 120) -> str:
    """A path named in an error, cut: its keys come from the client."""
    return path if len(path) <= limit else path[:limit] + "…"


# What a request body must be labelled: JSON (parameters other than charset=utf-8 are refused,
# the body is UTF-8 anyway). Also for bodies sent without a Content-Type: FastAPI reads those as
# JSON, and a client that sends none has not said what it sends.
JSON_MEDIA_TYPE = "application/json"
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def content_type_problem(content_type: str | None) -> str | None:
    """Why a request body with this Content-Type header is not taken as JSON, or None."""
    if content_type is None:
        return f"The request has a body but no Content-Type; send Content-Type: {JSON_MEDIA_TYPE}"
    media, *params = (part.strip() for part in content_type.split(";"))
    shown = content_type if len(content_type) <= 80 and content_type.isprintable() else repr(content_type[:80]) + "…"
    if media.lower() != JSON_MEDIA_TYPE:
        return f"The request body must be JSON sent as Content-Type: {JSON_MEDIA_TYPE} (got {shown})"
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip().strip('"').lower() not in ("utf-8", "utf8"):
            return f"A JSON request body must be UTF-8: send Content-Type: {JSON_MEDIA_TYPE} (got {shown})"
    return None


class BodyTooLarge(Exception):
    pass


class RequestGuard:
    """Buffers each request body (up to its limit), checks it, then hands it to the app."""

    def __init__(self, app: ASGIApp, *, limits: Mapping[str, int] | None = None,
                 pattern_limits: Sequence[tuple[re.Pattern[str], int]] = (),
                 default_limit: int = MAX_BODY_BYTES, max_depth: int = MAX_JSON_DEPTH) -> None:
        self.app = app
        self.limits = dict(limits or {})  # path -> bytes, for routes that need more
        self.pattern_limits = list(pattern_limits)  # (full-path pattern, bytes), for routes with path parameters
        self.default_limit = default_limit
        self.max_depth = max_depth

    def limit_for(self, path: str) -> int:
        if path in self.limits:
            return self.limits[path]
        return next((limit for pattern, limit in self.pattern_limits if pattern.fullmatch(path)), self.default_limit)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope.get("path", ""))
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _refuse(send, 413, _too_large(limit, f"{declared:,} bytes"))
            return
        try:
            body = await _read_body(receive, limit)
        except BodyTooLarge:
            await _refuse(send, 413, _too_large(limit, "more"))
            return
        if body and scope.get("method", "GET") in _BODY_METHODS:
            problem = content_type_problem(_header(scope, b"content-type"))
            if problem:
                await _refuse(send, 415, problem)
                return
        problem = body_problem(body, self.max_depth) if body else None
        if problem:
            await _refuse(send, 422, problem)
            return
        await self.app(scope, _replay(body, receive), send)


def _header(scope: Scope, wanted: bytes) -> str | None:
    for name, value in scope.get("headers") or ():
        if name.lower() == wanted:
            return bytes(value).decode("latin-1")
    return None


def _content_length(scope: Scope) -> int | None:
    value = _header(scope, b"content-length")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


async def _read_body(receive: Receive, limit: int) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break  # the client went away; the app sees an empty body and then the disconnect
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # later calls wait for the disconnect, as the server's would

    return replayed


def _too_large(limit: int, got: str) -> str:
    return f"The request body is too large: at most {limit:,} bytes (got {got})"


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})
