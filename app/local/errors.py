"""JSON errors for both local servers, and plain words for failed HTTP calls.

Every error answer is `{"detail": ...}` with a JSON content type, including 404, 405, 422 and
500, because the SDK's streamer ignores bodies that are not JSON and users read the detail.
"""

from __future__ import annotations

import json

import httpx
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException


def install_json_errors(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = exc.detail
        if exc.status_code == 404 and detail == "Not Found":
            detail = f"Not found: {request.method} {request.url.path}"
        elif exc.status_code == 405 and detail == "Method Not Allowed":
            detail = f"Method {request.method} is not allowed on {request.url.path}"
        return JSONResponse({"detail": detail}, status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err.get('loc', ()))}: {err.get('msg', 'invalid')}"
            for err in exc.errors()
        )
        return JSONResponse({"detail": f"Invalid request: {problems}"}, status_code=422)

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception) -> JSONResponse:
        return JSONResponse(
            {"detail": f"Internal server error: {type(exc).__name__}: {exc}"}, status_code=500
        )


def describe_http_error(exc: BaseException) -> str:
    """'connection refused', 'timed out', ... rather than httpx's generic wording."""
    if isinstance(exc, httpx.ConnectError):
        cause: BaseException | None = exc
        while cause is not None:
            if isinstance(cause, ConnectionRefusedError) or "refused" in str(cause).lower():
                return "connection refused"
            cause = cause.__cause__ or cause.__context__
        return f"cannot connect ({exc or type(exc).__name__})"
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out ({type(exc).__name__})"
    if isinstance(exc, httpx.RemoteProtocolError):
        return f"the server closed the connection ({exc})"
    return f"{type(exc).__name__}: {exc}"


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
