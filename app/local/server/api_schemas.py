"""The error answers of both local servers, as /openapi.json declares them.

What a route reads (bodies, parameters) is described by FastAPI from its signature and the
models of app/local/server/bodies.py; what it can answer besides success is declared here, the same
on every route: one sentence, `{"detail": ...}` (app/local/server/errors.py).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class ErrorAnswer(BaseModel):
    """Every error of both servers: one sentence that says what is wrong (app/local/server/errors.py).
    Not FastAPI's default list of validation errors: ours is a string naming every problem."""

    detail: str


class TaskAppErrorAnswer(BaseModel):
    """The task app's errors: a sentence, or for a refused key the SDK's shape,
    `{"error": {"code", "message", ...}}` (app/local/taskapps/kit.py)."""

    detail: str | dict[str, Any]


# What each refusal means, the same on every route that can answer it.
ERROR_MEANINGS = {
    400: "A header, query or path value the route reads itself is wrong (detail names it)",
    401: "Missing or invalid credentials",
    404: "No such job, rollout or route",
    409: "Conflicts with the job's state or an earlier request",
    413: "The request body is over its size limit (docs/hardening.md)",
    415: "The request body is not sent as Content-Type: application/json",
    422: "The request is well-formed HTTP but its body or parameters are invalid (detail names each problem)",
    502: "A call this request depends on failed (detail names the call and why)",
    503: "The server cannot serve this now (starting, stopping, without its key, or its database failed)",
}
BODY_ERRORS = (413, 415, 422)  # what the request guard answers before any route with a body (app/local/server/guard.py)


def error_responses(*codes: int, model: type[BaseModel] = ErrorAnswer) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route that can answer these error statuses, all `{"detail": ...}` JSON.
    The schema is given whole, not as a model: FastAPI would file a model's schema under the
    route's own media type, which for the event stream is not JSON."""
    schema = model.model_json_schema()
    return {code: {"description": ERROR_MEANINGS[code], "content": {"application/json": {"schema": schema}}}
            for code in sorted(set(codes))}
