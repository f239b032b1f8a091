"""The request bodies of the embedded backend's routes, as OpenAPI schemas.

The routes read their bodies themselves (so a wrong shape gets our own 422 with every problem
named), which leaves FastAPI nothing to describe. These schemas go into /openapi.json so that
clients, and the API fuzzer in the test suite, know what to send. The bounds come from the
one definition of a trainable config (app.core.trainable).
"""

from __future__ import annotations

from typing import Any

from app.core.trainable import MAX_OPS, NUMBER_BOUNDS
from app.local.rollout_record import MAX_MAX_BYTES, MAX_PER_STEP


def _number(location: str) -> dict[str, Any]:
    bound = next(b for b in NUMBER_BOUNDS if b.location == location)
    return {"type": "integer" if bound.integer else "number", "minimum": bound.low, "maximum": bound.high}


def _section(name: str, keys: tuple[str, ...], required: tuple[str, ...] = (), **other: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {**{key: _number(f"{name}.{key}") for key in keys}, **other},
            "required": list(required)}


RL_CONFIG = {
    "type": "object",
    "properties": {
        "algorithm": {"type": "object", "properties": {
            "type": {"type": "string", "enum": ["online"]},
            "method": {"type": "string", "enum": ["policy_gradient"]},
            "variety": {"type": "string", "enum": ["gspo"]}}, "required": ["type", "method", "variety"]},
        "rollout": _section("rollout", ("max_turns", "max_concurrent_rollouts"),
                            env_name={"type": "string"}, policy_name={"type": "string"},
                            ops={"type": "array", "items": {"type": "string"}, "maxItems": MAX_OPS},
                            # What the inspector keeps (app/local/rollout_record.py).
                            inspect_per_step={"type": "integer", "minimum": 0, "maximum": MAX_PER_STEP},
                            inspect_max_bytes={"type": "integer", "minimum": 0, "maximum": MAX_MAX_BYTES}),
        "training": _section("training", ("num_epochs", "iterations_per_epoch", "max_turns", "batch_size",
                                          "group_size", "learning_rate", "seed"),
                             ("num_epochs", "iterations_per_epoch", "max_turns", "batch_size", "group_size",
                              "learning_rate")),
        "evaluation": _section("evaluation", ("instances", "every_n_iters"), ("instances", "every_n_iters", "seeds"),
                               seeds={"type": "array", "items": {"type": "integer"}, "minItems": 1}),
    },
    "required": ["algorithm", "rollout", "training"],
}

JOB_CREATE = {
    "type": "object",
    "properties": {
        "job_type": {"type": "string", "enum": ["rl"]},
        "data": {"type": "object", "properties": {
            "endpoint_base_url": {"type": "string", "format": "uri"},
            "model": {"type": "string"},
            "base_model": {"type": "string"},
            "config": RL_CONFIG}, "required": ["endpoint_base_url", "config"]},
    },
    "required": ["job_type", "data"],
}

VERIFY = {"type": "object", "properties": {"endpoint_base_url": {"type": "string", "format": "uri"}},
          "required": ["endpoint_base_url"]}

CHAT = {
    "type": "object",
    "properties": {
        "model": {"type": "string"},
        "messages": {"type": "array", "minItems": 1, "items": {
            "type": "object", "properties": {"role": {"type": "string"},
                                             "content": {"type": ["string", "array", "null"]}},
            "required": ["role"]}},
        "tools": {"type": "array", "items": {"type": "object", "properties": {
            "type": {"type": "string", "enum": ["function"]},
            "function": {"type": "object", "properties": {"name": {"type": "string"},
                                                          "parameters": {"type": "object"}},
                         "required": ["name"]}}}},
        "tool_choice": {},
    },
    "required": ["messages"],
}


CID = {"name": "cid", "in": "query", "required": False, "schema": {"type": "string"},
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
CID_PATH = {"name": "cid", "in": "path", "required": True, "schema": {"type": "string"},
            "description": "trace_<job_id>:<rollout_id> (or with cid_ or eval_), as the trainer writes it "
                           "into a 0.4/0.5 inference URL"}


def json_body(schema: dict[str, Any], *query: dict[str, Any]) -> dict[str, Any]:
    """`openapi_extra` for a route that reads a JSON body of this shape (and query or path
    parameters it reads itself)."""
    extra: dict[str, Any] = {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}
    if query:
        extra["parameters"] = list(query)
    return extra
