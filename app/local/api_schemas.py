"""The request bodies of the embedded backend's routes, as OpenAPI schemas.

The routes read their bodies themselves (so a wrong shape gets our own 422 with every problem
named), which leaves FastAPI nothing to describe. These schemas go into /openapi.json so that
clients, and the API fuzzer in the test suite, know what to send. The bounds come from the
one definition of a trainable config (app.core.config.trainable).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from app.core.api.urls import MAX_URL_CHARS
from app.core.config.trainable import MAX_NAME_CHARS, MAX_OPS, MAX_TEXT_CHARS, NUMBER_BOUNDS
from app.local.rollout_record import MAX_MAX_BYTES, MAX_PER_STEP


class ErrorAnswer(BaseModel):
    """Every error of both servers: one sentence that says what is wrong (app/local/errors.py).
    Not FastAPI's default list of validation errors: ours is a string naming every problem."""

    detail: str


class TaskAppErrorAnswer(BaseModel):
    """The task app's errors: a sentence, or for a refused key the SDK's shape,
    `{"error": {"code", "message", ...}}` (app/local/taskapp_kit.py)."""

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
    503: "The server cannot serve this now (starting, stopping or without its key)",
}
BODY_ERRORS = (413, 415, 422)  # what the request guard answers before any route with a body (app/local/guard.py)


def error_responses(*codes: int, model: type[BaseModel] = ErrorAnswer) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route that can answer these error statuses, all `{"detail": ...}` JSON.
    The schema is given whole, not as a model: FastAPI would file a model's schema under the
    route's own media type, which for the event stream is not JSON."""
    schema = model.model_json_schema()
    return {code: {"description": ERROR_MEANINGS[code], "content": {"application/json": {"schema": schema}}}
            for code in sorted(set(codes))}


def _anycase(word: str) -> dict[str, Any]:
    """A string equal to `word` once lower-cased, as the backend compares the algorithm."""
    letters = "".join(f"[{c}{c.upper()}]" if c.isalpha() else c for c in word)
    return {"type": "string", "pattern": f"^{letters}$"}


# What Python counts as false: a key with one of these values is read as absent.
FALSY: dict[str, Any] = {"enum": [None, False, 0, "", [], {}]}
TASK_URL = {"type": "string", "format": "uri", "pattern": "^[hH][tT][tT][pP][sS]?://", "maxLength": MAX_URL_CHARS}


def _number(location: str, required: bool = True) -> dict[str, Any]:
    """A bounded number; an optional one may be null, which the backend reads as left out."""
    bound = next(b for b in NUMBER_BOUNDS if b.location == location)
    kind = "integer" if bound.integer else "number"
    return {"type": kind if required else [kind, "null"], "minimum": bound.low, "maximum": bound.high}


def _section(name: str, keys: tuple[str, ...], required: tuple[str, ...] = (), minProperties: int = 0,
             **other: Any) -> dict[str, Any]:
    numbers = {key: _number(f"{name}.{key}", key in required) for key in keys}
    section: dict[str, Any] = {"type": "object", "properties": {**numbers, **other},
               "required": list(required)}
    if minProperties:
        section["minProperties"] = minProperties
    return section


RL_CONFIG = {
    "type": "object",
    "properties": {
        "algorithm": {"type": "object", "properties": {
            "type": _anycase("online"), "method": _anycase("policy_gradient"), "variety": _anycase("gspo")},
            "required": ["type", "method", "variety"]},
        "rollout": _section("rollout", ("max_turns", "max_concurrent_rollouts"), minProperties=1,
                            # Not read by the backend: any value, a string a name.
                            env_name={"maxLength": MAX_NAME_CHARS}, policy_name={"maxLength": MAX_NAME_CHARS},
                            ops={"type": ["array", "null"], "maxItems": MAX_OPS,
                                 "items": {"type": "string", "maxLength": MAX_TEXT_CHARS}},
                            # What the inspector keeps (app/local/rollout_record.py).
                            inspect_per_step={"type": "integer", "minimum": 0, "maximum": MAX_PER_STEP},
                            inspect_max_bytes={"type": "integer", "minimum": 0, "maximum": MAX_MAX_BYTES}),
        "training": _section("training", ("num_epochs", "iterations_per_epoch", "max_turns", "batch_size",
                                          "group_size", "learning_rate", "seed"),
                             ("num_epochs", "iterations_per_epoch", "max_turns", "batch_size", "group_size",
                              "learning_rate")),
        # Left out, null or empty: no evaluation.
        "evaluation": {"anyOf": [FALSY, _section(
            "evaluation", ("instances", "every_n_iters"), ("instances", "every_n_iters", "seeds"),
            seeds={"type": "array", "items": {"type": "integer", "minimum": -(2**63) + 1, "maximum": 2**63 - 1},
                   "minItems": 1, "maxItems": 10_000})]},
    },
    "required": ["algorithm", "rollout", "training"],
}

JOB_CREATE = {
    "type": "object",
    "properties": {
        "job_type": {"type": "string", "enum": ["rl"]},
        "data": {"type": "object", "properties": {
            "endpoint_base_url": TASK_URL,
            # A name each: data.model when it is set (not false or empty), else data.base_model.
            "model": {"maxLength": MAX_NAME_CHARS},
            "base_model": {"maxLength": MAX_NAME_CHARS},
            "config": RL_CONFIG}, "required": ["endpoint_base_url", "config"],
            "anyOf": [
                {"required": ["model"], "properties": {"model": {"type": "string", "pattern": "\\S"}}},
                {"required": ["base_model"], "properties": {"model": FALSY,
                                                            "base_model": {"type": "string", "pattern": "\\S"}}},
            ]},
    },
    "required": ["job_type", "data"],
}

VERIFY = {"type": "object", "properties": {"endpoint_base_url": TASK_URL},
          "required": ["endpoint_base_url"]}

CHAT = {
    "type": "object",
    "properties": {
        "model": {"type": ["string", "null"]},
        "messages": {"type": "array", "minItems": 1, "maxItems": 10_000, "items": {
            "type": "object", "properties": {"role": {"type": "string"},
                                             "content": {"type": ["string", "array", "null"]}},
            "required": ["role"]}},
        # Each tool's "type" is not read (OpenAI's is always "function").
        "tools": {"type": ["array", "null"], "items": {"type": "object", "required": ["function"], "properties": {
            "function": {"type": "object", "properties": {"name": {"type": "string"},
                                                          "parameters": {"type": ["object", "null"]}},
                         "required": ["name"]}}}},
        "tool_choice": {},
    },
    "required": ["messages"],
}


IDEMPOTENCY_KEY = {"name": "Idempotency-Key", "in": "header", "required": False,
                   "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[ -~]+$"},
                   "description": "the same key and body answer the same job (200); another body, 409"}
# A correlation id that names a job: after the prefix, if any, the job id up to ":" is not empty.
_NAMES_A_JOB = "^(?:(?:trace_|cid_|eval_)[^:]|(?!trace_|cid_|eval_)[^:])"
CID = {"name": "cid", "in": "query", "required": True, "schema": {"type": "string", "pattern": _NAMES_A_JOB},
       "description": "trace_<job_id>:<rollout_id>, as the trainer writes it into a 0.2 inference URL"}
ROLLOUT_QUERY = [
    {"name": "step", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 0},
     "description": "only the rollouts of this training step (and the eval after it)"},
    {"name": "phase", "in": "query", "required": False, "schema": {"type": "string", "enum": ["train", "eval"]}},
    {"name": "limit", "in": "query", "required": False,
     "schema": {"type": "integer", "minimum": 1, "maximum": 500, "default": 100}},
    {"name": "after", "in": "query", "required": False, "schema": {"type": "string"},
     "description": "the next_after of the page before"},
]
TRIAL_PATH = {"name": "trial", "in": "path", "required": True, "schema": {"type": "string"},
              "description": "the job id, as the trainer writes it into a 0.4/0.5 inference URL"}
CID_PATH = {"name": "cid", "in": "path", "required": True, "schema": {"type": "string", "pattern": _NAMES_A_JOB},
            "description": "trace_<job_id>:<rollout_id> (or with cid_ or eval_), as the trainer writes it "
                           "into a 0.4/0.5 inference URL"}


def json_body(schema: dict[str, Any], *query: dict[str, Any]) -> dict[str, Any]:
    """`openapi_extra` for a route that reads a JSON body of this shape (and query or path
    parameters it reads itself)."""
    extra: dict[str, Any] = {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}
    if query:
        extra["parameters"] = list(query)
    return extra
