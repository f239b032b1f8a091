"""JSON errors for both local servers (a failed HTTP call in words, and the detail of an
answer: app/core/api/failures.py).

Every error answer is `{"detail": ...}` with a JSON content type, including 404, 405, 422 and
500, because the SDK's streamer ignores bodies that are not JSON and users read the detail.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic_core import PydanticCustomError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

_log = logging.getLogger("synth_tui.local")

MAX_PROBLEMS_NAMED = 10  # a body with ten thousand bad items is answered with ten, and a count
REFUSED = "refused"  # the type of a validation error whose words are ours (`refused`)
_PARAMETER_SOURCES = frozenset({"query", "header", "path", "cookie"})


def refused(*problems: tuple[str | None, str]) -> PydanticCustomError:
    """A validation error in our own words, raised by a validator: each problem is (where below
    the value checked, or "" for the value itself, or None when the words name the place
    themselves; what is wrong). Answered as `<location>: <what>` (Refusal.detail)."""
    summary = "; ".join(text for _, text in problems)
    return PydanticCustomError(REFUSED, "{summary}", {"summary": summary, "problems": list(problems)})


@dataclass(frozen=True)
class Refusal:
    """How a route answers a request FastAPI found invalid: `words` open the detail, then every
    problem is named (at most MAX_PROBLEMS_NAMED). With `problem_words` (a route that worded its
    body) a problem is `<where> <what>`, its place written from the body's root
    (`data.config.training.batch_size`, `messages[0].content`) or as the parameter's name, and
    problem_words[place] (with `[]` for any index) says what a value there must be; without,
    it is pydantic's `<body|query|…>.<where>: <message>`. A bad header, query or path parameter is answered
    `parameter_status`, a bad body 422."""

    words: str = "Invalid request"
    problem_words: Mapping[str, str] | None = None
    parameter_status: int = 422

    def status(self, errors: Sequence[Mapping[str, Any]]) -> int:
        sources = {error["loc"][0] for error in errors if error.get("loc")}
        return self.parameter_status if sources & _PARAMETER_SOURCES else 422

    def detail(self, errors: Sequence[Mapping[str, Any]], *, from_fastapi: bool = True) -> str:
        """`from_fastapi`: each location starts with its source ("body", "query", …), as in a
        RequestValidationError; False for the errors of a model validated by hand."""
        lines: list[str] = []
        for error in errors:
            for line in self._lines(error, from_fastapi):
                if line not in lines:
                    lines.append(line)
        if len(lines) > MAX_PROBLEMS_NAMED:
            lines[MAX_PROBLEMS_NAMED:] = [f"and {len(lines) - MAX_PROBLEMS_NAMED:,} more"]
        return f"{self.words}: " + "; ".join(lines)

    def _lines(self, error: Mapping[str, Any], from_fastapi: bool) -> list[str]:
        loc = tuple(error.get("loc") or ())
        if self.problem_words is not None and from_fastapi:
            loc = loc[1:]  # "body", "query", …: a route's parameters and body fields have distinct names
        where = _path(loc)
        if error.get("type") == REFUSED:
            return [_at(where, at, text) for at, text in (error.get("ctx") or {}).get("problems", [])]
        if self.problem_words is not None:
            if error.get("type") == "json_invalid":
                return [f"the body is not JSON ({(error.get('ctx') or {}).get('error', 'it does not parse')})"]
            what = self.problem_words.get(_path(loc, any_index=True)) or _what_is_wrong(error, root=not loc)
            if what is not None:
                return [f"{where} {what}".strip()]
        return [f"{where}: {error.get('msg', 'invalid')}" if where else str(error.get("msg", "invalid"))]


def _path(loc: Sequence[Any], any_index: bool = False) -> str:
    """A location as it is written in our messages: `data.config.tags[0]`."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += "[]" if any_index else f"[{part}]"
        else:
            text += f".{part}" if text else str(part)
    return text


def _at(where: str, at: str | None, text: str) -> str:
    if at is None:
        return text
    place = f"{where}.{at}" if where and at else where or at
    return f"{place}: {text}" if place else text


def _what_is_wrong(error: Mapping[str, Any], root: bool) -> str | None:
    """Pydantic's error in our words, to follow the place it is at (None: pydantic's own)."""
    kind, ctx = str(error.get("type")), error.get("ctx") or {}
    if root and kind in ("model_type", "model_attributes_type", "dict_type", "missing"):
        return "the body must be a JSON object"
    words = {
        "model_type": "must be an object",
        "model_attributes_type": "must be an object",
        "dict_type": "must be an object",
        "missing": "is required",
        "list_type": "must be a list",
        "string_type": "must be a string",
        "literal_error": f"must be {ctx.get('expected')}",
        "too_short": f"must have at least {ctx.get('min_length', 1):,} item(s)",
        "too_long": f"must have at most {ctx.get('max_length', 0):,} items",
    }
    return words.get(kind)


GENERIC_REFUSAL = Refusal()
DATABASE_FAILED = ("The backend's database could not be read or written ({kind}); its file may be damaged. "
                   "Stop the backend and start it again: a damaged file is then refused with its path and what to "
                   "do (docs/hardening.md section 6).")


def install_json_errors(app: FastAPI, refusals: Mapping[Callable[..., Any], Refusal] | None = None) -> None:
    """Every error answered as `{"detail": "..."}` JSON, and /openapi.json saying so.
    `refusals`: how a route (by its endpoint function) words and answers a request FastAPI
    found invalid; GENERIC_REFUSAL for the others."""
    known: Mapping[Any, Refusal] = refusals or {}
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
        # The one answer to a request FastAPI found invalid, worded as its route asks.
        refusal = known.get(getattr(request.scope.get("route"), "endpoint", None), GENERIC_REFUSAL)
        errors = exc.errors()
        return JSONResponse({"detail": refusal.detail(errors)}, status_code=refusal.status(errors))

    @app.exception_handler(sqlite3.DatabaseError)
    async def _database(request: Request, exc: sqlite3.DatabaseError) -> JSONResponse:
        # The backend's database failed under a request (damaged after start, locked, a full
        # disk): a 503 in words and one log line, no traceback (issue 41). SQLite's text can
        # quote a stored value, so the answer names the kind only; the log has the text.
        _log.error("%s %s: the database failed (%s: %s)", request.method, request.url.path, type(exc).__name__,
                   " ".join(str(exc).split())[:200])
        return JSONResponse({"detail": DATABASE_FAILED.format(kind=type(exc).__name__)}, status_code=503)

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        # A bug, not bad input (the fuzzer in the tests looks for these). The answer names
        # only the kind of error: its text could quote a header or a key.
        _log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return JSONResponse({"detail": f"Internal server error ({type(exc).__name__}); the server's log "
                                       "has the details"}, status_code=500)


_DEFAULT_422 = "#/components/schemas/HTTPValidationError"


def _drop_default_validation_answers(app: FastAPI) -> None:
    """FastAPI documents a 422 with a list of validation errors on every route with a parameter.
    Ours is a string (below), and routes that can answer 422 declare it themselves
    (app.local.server.api_schemas.error_responses), so the default is dropped, with its schemas."""
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


def without_query(url: str) -> str:
    """URLs in messages lose their query: the cid in an inference URL is a credential."""
    return url.split("?", 1)[0]
