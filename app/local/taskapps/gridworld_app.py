"""The reference task app: the gridworld of gridworld.py behind the SDK's task-app contract.

Endpoints and auth come from kit.py, in either contract generation (`contract="0.2"`,
the default, or `"0.5"`: docs/rollout-contracts.md). `POST /rollout` plays one episode: at every turn
it calls the policy's inference URL (an OpenAI-compatible chat endpoint) with the observation
and the `move(direction)` tool, parses the tool call and steps the environment. The user
message ends with a compact `state: goal=+x-y blocked_towards_goal=...` line (gridworld.Episode.compact_state),
which any task app may send (docs/embedded-policy.md).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, HTTPException, Request

from app.core.config.trainable import short_repr
from app.local.server.api_schemas import TaskAppErrorAnswer, error_responses
from app.local.taskapps import gridworld
from app.local.taskapps.kit import (
    AUTH_ERRORS,
    PolicyLink,
    add_rollout_route,
    ask_policy,
    base_taskapp,
    chat_url,
    rollout_response,
)
from app.local.training.rollout_contract import GEN_02

VERSION = "1.0.0"
DEFAULT_MAX_TURNS = 12
ENVIRONMENT = "gridworld"  # what [rollout] env_name names (verification compares: docs/product.md#verification)
SYSTEM_PROMPT = (
    "You control an agent in a small gridworld. Reach the goal in as few moves as possible. "
    "Answer only by calling the move tool."
)
MOVE_TOOL = {
    "type": "function",
    "function": {
        "name": "move",
        "description": "Move the agent one cell.",
        "parameters": {
            "type": "object",
            "properties": {"direction": {"type": "string", "enum": list(gridworld.MOVES)}},
            "required": ["direction"],
        },
    },
}


def create_taskapp(*, env_api_keys: Sequence[str], app_id: str = "gridworld", contract: str = GEN_02) -> FastAPI:
    app, authed = base_taskapp(app_id=app_id, title=f"{app_id} task app", version=VERSION,
                               env_api_keys=env_api_keys)

    @app.get("/info", dependencies=authed, responses=AUTH_ERRORS)
    async def info() -> dict[str, Any]:
        return {
            "service": {"task": _task(app_id), "version": VERSION},
            "dataset": _dataset(),
            "rubrics": None,
            "inference": {"tool": "move", "tool_choice": "required"},
            "limits": {"max_turns": DEFAULT_MAX_TURNS},
        }

    @app.get("/task_info", dependencies=authed, responses=error_responses(400, 422, 503, model=TaskAppErrorAnswer),
             openapi_extra={"parameters": TASK_INFO_QUERY})
    async def task_info(request: Request) -> Any:
        wanted = seeds_asked(request.query_params.getlist("seed"), request.query_params.get("seeds"))
        if not wanted:
            return {"taskset": {
                **_task(app_id),
                "environment": ENVIRONMENT,
                "description": gridworld.__doc__.strip().splitlines()[0],
                "size": gridworld.SIZE,
                "walls": gridworld.WALLS,
                "seeds": "any integer",
                "reward": "1.0 minus 0.01 per move on reaching the goal, else 0",
                "default_max_turns": DEFAULT_MAX_TURNS,
            }}
        infos = [_task_info(app_id, s) for s in wanted]
        return infos[0] if len(infos) == 1 else infos

    add_rollout_route(app, authed, contract, _play)
    return app


# Each seed is answered with about 580 bytes: at most 1,000 in seed= and 1,000 in seeds= are at
# most about 1.2 MB (docs/hardening.md).
MAX_TASK_INFO_SEEDS = 1_000
_SEED = re.compile(r"-?[0-9]{1,19}")
_SEED_LIST = r"-?[0-9]{1,18}(,-?[0-9]{1,18}){0,MORE}".replace("MORE", str(MAX_TASK_INFO_SEEDS - 1))
TASK_INFO_QUERY = [
    {"name": "seed", "in": "query", "required": False, "style": "form", "explode": True,
     "schema": {"type": "array", "maxItems": MAX_TASK_INFO_SEEDS,
                "items": {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1}},
     "description": "a seed to describe; repeat for more"},
    {"name": "seeds", "in": "query", "required": False, "schema": {"type": "string", "pattern": f"^{_SEED_LIST}$"},
     "description": f"comma-separated seeds of at most 18 digits, at most {MAX_TASK_INFO_SEEDS:,}"},
]


def seeds_asked(seed: list[str], seeds: str | None) -> list[int]:
    """The seeds of a /task_info query (repeated ?seed= and comma-separated ?seeds=), or a 422
    naming what is wrong. Counted before any is converted or answered."""
    listed = seeds.split(",") if seeds is not None else []
    for name, count in (("seed", len(seed)), ("seeds", len(listed))):
        if count > MAX_TASK_INFO_SEEDS:
            raise HTTPException(422, f"at most {MAX_TASK_INFO_SEEDS:,} seeds in {name}= per /task_info request "
                                     f"(got {count:,}); ask for fewer at a time")
    if seeds is not None and not re.fullmatch(_SEED_LIST, seeds):
        raise HTTPException(422, "seeds must be comma-separated integers of at most 18 digits, without spaces "
                                 f"(got {short_repr(seeds)})")
    bad = next((t for t in seed if not (_SEED.fullmatch(t) and -(2**63) <= int(t) < 2**63)), None)
    if bad is not None:
        raise HTTPException(422, f"seed must be a 64-bit integer (got {short_repr(bad)})")
    return [int(t) for t in [*seed, *listed]]


def _task(app_id: str) -> dict[str, Any]:
    return {"id": app_id, "name": "Gridworld", "version": VERSION}


def _dataset() -> dict[str, Any]:
    return {
        "id": "gridworld-seeds",
        "name": "Seeded 5x5 gridworlds",
        "version": VERSION,
        "splits": ["train", "eval"],
        "default_split": "train",
        "description": "Any integer seed is a layout: one wall, a start and a goal.",
    }


def _task_info(app_id: str, seed: int) -> dict[str, Any]:
    return {
        "task": {**_task(app_id), "description": "Walk to the goal."},
        "environment": ENVIRONMENT,
        "dataset": _dataset(),
        "rubric": {"outcome": {"criteria": "reach the goal; 0.01 is lost per move"}, "events": None},
        "inference": {"tool": "move"},
        "limits": {"max_turns": DEFAULT_MAX_TURNS},
        "task_metadata": {"seed": seed, **gridworld.layout(seed).describe()},
    }


def _max_turns(req: Any) -> int:
    turns = req.env.config.max_turns or req.policy.config.max_turns
    if not turns:  # else one "agent" op per turn, as the hosted service expands ops
        turns = sum(1 for op in req.ops if op == "agent") or DEFAULT_MAX_TURNS
    return max(1, min(int(turns), 100))


async def _play(policy: PolicyLink, req: Any) -> dict[str, Any]:
    inference_url = req.policy.config.inference_url
    url = chat_url(inference_url)
    episode = gridworld.Episode(req.env.seed, _max_turns(req))
    sampling = req.policy.config.model_dump(include={"temperature", "top_p", "max_tokens"}, exclude_none=True)
    steps = []
    while not episode.done:
        obs = episode.observation()
        where = f"turn {episode.turns + 1}, seed {req.env.seed}"
        body = {
            "model": req.policy.config.model or "policy",
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": obs["text"]},
            ],
            "tools": [MOVE_TOOL],
            "tool_choice": "required",
            **sampling,
        }
        tool_calls = await ask_policy(policy, url, body, where)
        direction = _direction(tool_calls)
        moved, reward = episode.step(direction)
        steps.append({
            "obs": obs,
            "tool_calls": tool_calls,
            "reward": reward,
            "done": episode.done,
            "truncated": episode.done and not episode.reached,
            "info": {"meta": {"inference_url": inference_url}, "action": direction, "moved": moved},
        })
    score = episode.score
    return rollout_response(req, env_id=f"gridworld:{req.env.seed}", steps=steps, score=score,
                            final={"observation": episode.observation(), "reward": score},
                            details={"reached_goal": episode.reached, "seed": req.env.seed,
                                     "shortest_path": episode.layout.shortest},
                            system_prompt=SYSTEM_PROMPT)


def _direction(tool_calls: list[Any]) -> str | None:
    """The move asked for, or None (the turn is wasted) if the answer is not a valid call."""
    try:
        call = tool_calls[0]["function"]
        args = call.get("arguments") or {}
        if isinstance(args, str):
            args = json.loads(args)
        direction = args.get("direction")
    except (IndexError, KeyError, TypeError, AttributeError, ValueError):
        return None
    return direction if call.get("name") == "move" and direction in gridworld.MOVES else None
