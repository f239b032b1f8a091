"""JSON errors for both local servers, and plain words for failed HTTP calls.

Every error answer is `{"detail": ...}` with a JSON content type, including 404, 405, 422 and
500, because the SDK's streamer ignores bodies that are not JSON and users read the detail.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

_log = logging.getLogger("synth_tui.local")


def install_json_errors(app: FastAPI) -> None:
    """Every error answered as `{"detail": "..."}` JSON, and /openapi.json saying so."""
    _drop_default_validation_answers(app)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"Not found: {request.method} {request.url.path}"
        headers = exc.headers
        if exc.status_code == 405 and detail == "Method Not Allowed":
            allowed = _allowed_methods(request)
            detail = f"Method {request.method} is not allowed on {request.url.path}"
            if allowed:  # Starlette names the methods of the first route of the path only
                detail += f" (allowed: {', '.join(allowed)})"
                headers = {**(headers or {}), "Allow": ", ".join(allowed)}
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err.get('loc', ()))}: {err.get('msg', 'invalid')}"
            for err in exc.errors()
        )
        return JSONResponse({"detail": f"Invalid request: {problems}"}, status_code=422)

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        # A bug, not bad input (the fuzzer in the tests looks for these). The answer names
        # only the kind of error: its text could quote a header or a key.
        _log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return JSONResponse({"detail": f"Internal server error ({type(exc).__name__}); the server's log "
                                       "has the details"}, status_code=500)


# A cause's text that only the library's authors can read: an anyio cancel scope, an object's
# repr or address, a hex id. Such text is left out of every message (docs/hardening.md).
_INTERNAL = re.compile(r"cancel scope|object at 0x|<[\w.]+ |\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{6,}\b",
                       re.IGNORECASE)
_TIMEOUTS = (httpx.TimeoutException,)
_DEFAULT_422 = "#/components/schemas/HTTPValidationError"


def _drop_default_validation_answers(app: FastAPI) -> None:
    """FastAPI documents a 422 with a list of validation errors on every route with a parameter.
    Ours is a string (below), and routes that can answer 422 declare it themselves
    (app.local.api_schemas.error_responses), so the default is dropped, with its schemas."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = build()
            for operations in document.get("paths", {}).values():
                for operation in operations.values():
                    responses = operation.get("responses", {})
                    if _DEFAULT_422 in json.dumps(responses.get("422", {})):
                        del responses["422"]
            schemas = document.get("components", {}).get("schemas", {})
            if _DEFAULT_422 not in json.dumps(document.get("paths", {})):
                schemas.pop("HTTPValidationError", None)
                schemas.pop("ValidationError", None)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves on this request's path (a path can have one route per
    method, and Starlette's 405 names the first route's only)."""
    routes = request.app.router.routes
    return [method for method in _METHODS
            if any(route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes)]


def describe_http_error(exc: BaseException) -> str:
    """A failed call's cause in words; httpx's own message is often empty, and the text of
    the error under it can be a library's internals (never quoted: `_INTERNAL`)."""
    words = {
        httpx.ConnectTimeout: "the connection timed out",
        httpx.ReadTimeout: "no answer within the time limit",
        httpx.WriteTimeout: "sending the request timed out",
        httpx.PoolTimeout: "no free connection in time (too many requests at once)",
        httpx.ReadError: "the connection was closed while waiting for the answer",
        httpx.WriteError: "the connection was closed while sending the request",
        httpx.RemoteProtocolError: "the server closed the connection without answering",
    }
    if isinstance(exc, httpx.ConnectError):
        text = " ".join(_chain_texts(exc)).lower()
        if "refused" in text or any(isinstance(e, ConnectionRefusedError) for e in _chain(exc)):
            return "connection refused (nothing is listening there)"
        if "name or service not known" in text or "nodename" in text or "getaddrinfo" in text:
            return "the host name cannot be resolved"
        return f"cannot connect ({_cause_text(exc) or 'no reason given'})"
    for kind, text in words.items():
        if isinstance(exc, kind):
            # A timeout's words say all there is; what lies under it is the event loop's.
            detail = "" if isinstance(exc, _TIMEOUTS) else _cause_text(exc)
            return f"{text} ({detail})" if detail else text
    return f"{type(exc).__name__}: {_cause_text(exc) or 'no reason given'}"


def _chain(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and seen not in chain and len(chain) < 8:  # a cause chain can loop
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    return chain


def _chain_texts(exc: BaseException) -> list[str]:
    return [text for text in (str(e).strip() for e in _chain(exc)) if text]


def _cause_text(exc: BaseException) -> str:
    """The first text in the cause chain, unless it is a library's internals."""
    texts = _chain_texts(exc)
    return texts[0] if texts and not _INTERNAL.search(texts[0]) else ""


def response_detail(response: httpx.Response, limit: int = 300) -> str:
    """The `detail` of an error answer, else the start of its body."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:limit]
    detail = body.get("detail", body) if isinstance(body, dict) else body
    text = detail if isinstance(detail, str) else json.dumps(detail)
    return text[:limit]


def without_query(url: str) -> str:
    """URLs in messages lose their query: the cid in an inference URL is a credential."""
    return url.split("?", 1)[0]
