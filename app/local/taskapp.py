"""The reference task app: the gridworld of gridworld.py behind the SDK's task-app contract.

Endpoints and auth follow contract section 5. `POST /rollout` plays one episode: at every turn
it calls the policy's inference URL (an OpenAI-compatible chat endpoint) with the observation
and the `move(direction)` tool, parses the tool call and steps the environment. The user
message ends with a `state: pos=x,y goal=x,y blocked=...` line (see policy.py).
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from typing import Any, Sequence

import httpx
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from app.local import gridworld
from app.local.errors import describe_http_error, install_json_errors, response_detail, without_query

VERSION = "1.0.0"
DEFAULT_MAX_TURNS = 12
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


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class EnvSpec(_Open):
    env_name: str | None = None
    seed: int = 0
    config: dict[str, Any] = Field(default_factory=dict)


class PolicySpec(_Open):
    policy_id: str | None = None
    policy_name: str | None = None
    config: dict[str, Any]


class RolloutRequest(_Open):
    run_id: str
    env: EnvSpec
    policy: PolicySpec
    ops: list[Any] = Field(default_factory=list)
    mode: str


def create_taskapp(*, env_api_keys: Sequence[str], app_id: str = "gridworld") -> FastAPI:
    allowed = [k for k in env_api_keys if k]

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=5.0)) as client:
            app.state.inference = client
            yield

    app = FastAPI(title=f"{app_id} task app", version=VERSION, lifespan=lifespan)
    install_json_errors(app)

    def require_key(request: Request) -> None:
        # Contract 5.2: any of X-API-Key, X-API-Keys (CSV), Authorization: Bearer may match.
        if not allowed:
            raise HTTPException(503, {"error": {
                "code": "missing_environment_api_key",
                "message": "ENVIRONMENT_API_KEY is not configured on the task app",
            }})
        got = [request.headers.get("x-api-key", "")]
        got += request.headers.get("x-api-keys", "").split(",")
        auth = request.headers.get("authorization", "")
        if auth[:7].lower() == "bearer ":
            got.append(auth[7:])
        got = [g.strip() for g in got if g.strip()]
        if not any(g in allowed for g in got):
            raise HTTPException(400, {"error": {
                "code": "unauthorised",
                "message": "API key missing or invalid",
                "allowed_first15": [k[:15] for k in allowed],
                "allowed_count": len(allowed),
                "got_first15": [g[:15] for g in got],
                "got_lens": [len(g) for g in got],
            }})

    authed = [Depends(require_key)]

    @app.api_route("/", methods=["GET", "HEAD"])
    async def root() -> dict:
        return {"status": "ok", "service": app_id}

    @app.get("/health", dependencies=authed)
    async def health() -> dict:
        return {"healthy": True, "auth": {"required": True, "expected_prefix": allowed[0][:6] + "..."}}

    @app.get("/info", dependencies=authed)
    async def info() -> dict:
        return {
            "service": {"task": _task(app_id), "version": VERSION},
            "dataset": _dataset(),
            "rubrics": None,
            "inference": {"tool": "move", "tool_choice": "required"},
            "limits": {"max_turns": DEFAULT_MAX_TURNS},
        }

    @app.get("/task_info", dependencies=authed)
    async def task_info(
        seed: list[int] = Query(default=[]), seeds: str | None = Query(default=None)
    ) -> Any:
        wanted = list(seed)
        if seeds:
            try:
                wanted += [int(s) for s in seeds.split(",") if s.strip()]
            except ValueError:
                raise HTTPException(422, f"seeds must be comma-separated integers, got {seeds!r}")
        if not wanted:
            return {"taskset": {
                **_task(app_id),
                "description": gridworld.__doc__.strip().splitlines()[0],
                "size": gridworld.SIZE,
                "walls": gridworld.WALLS,
                "seeds": "any integer",
                "reward": "1.0 minus 0.01 per move on reaching the goal, else 0",
                "default_max_turns": DEFAULT_MAX_TURNS,
            }}
        infos = [_task_info(app_id, s) for s in wanted]
        return infos[0] if len(infos) == 1 else infos

    @app.post("/rollout", dependencies=authed)
    async def rollout(req: RolloutRequest, request: Request) -> dict:
        return await _play(request.app.state.inference, req)

    @app.post("/done", dependencies=authed)
    async def done() -> dict:
        return {"ok": True, "service": app_id}

    return app


def _task(app_id: str) -> dict:
    return {"id": app_id, "name": "Gridworld", "version": VERSION}


def _dataset() -> dict:
    return {
        "id": "gridworld-seeds",
        "name": "Seeded 5x5 gridworlds",
        "version": VERSION,
        "splits": ["train", "eval"],
        "default_split": "train",
        "description": "Any integer seed is a layout: one wall, a start and a goal.",
    }


def _task_info(app_id: str, seed: int) -> dict:
    return {
        "task": {**_task(app_id), "description": "Walk to the goal."},
        "environment": "gridworld",
        "dataset": _dataset(),
        "rubric": {"outcome": {"criteria": "reach the goal; 0.01 is lost per move"}, "events": None},
        "inference": {"tool": "move"},
        "limits": {"max_turns": DEFAULT_MAX_TURNS},
        "task_metadata": {"seed": seed, **gridworld.layout(seed).describe()},
    }


def _max_turns(req: RolloutRequest) -> int:
    turns = req.env.config.get("max_turns") or req.policy.config.get("max_turns")
    if not turns:  # else one "agent" op per turn, as the hosted trainer expands ops
        turns = sum(1 for op in req.ops if op == "agent") or DEFAULT_MAX_TURNS
    return max(1, min(int(turns), 100))


def _chat_url(inference_url: str) -> str:
    base, _, query = inference_url.partition("?")
    base = base.rstrip("/")
    if not base.endswith("/chat/completions"):
        base += "/chat/completions" if base.endswith("/v1") else "/v1/chat/completions"
    return f"{base}?{query}" if query else base


async def _play(client: httpx.AsyncClient, req: RolloutRequest) -> dict:
    inference_url = req.policy.config.get("inference_url")
    if not isinstance(inference_url, str) or not inference_url.startswith(("http://", "https://")):
        raise HTTPException(422, "policy.config.inference_url must be an http(s) URL")
    url = _chat_url(inference_url)
    episode = gridworld.Episode(req.env.seed, _max_turns(req))
    sampling = {k: req.policy.config[k] for k in ("temperature", "top_p", "max_tokens") if k in req.policy.config}
    steps = []
    while not episode.done:
        obs = episode.observation()
        where = f"turn {episode.turns + 1}, seed {req.env.seed}"
        body = {
            "model": req.policy.config.get("model", "policy"),
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": obs["text"]},
            ],
            "tools": [MOVE_TOOL],
            "tool_choice": "required",
            **sampling,
        }
        try:
            resp = await client.post(url, json=body)
        except httpx.HTTPError as exc:
            raise _inference_failed(url, describe_http_error(exc), where) from exc
        if resp.status_code >= 400:
            raise _inference_failed(url, f"HTTP {resp.status_code}: {response_detail(resp)}", where)
        try:
            tool_calls = resp.json()["choices"][0]["message"].get("tool_calls") or []
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
            raise _inference_failed(url, "the answer is not an OpenAI chat completion", where)
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
    final_obs = episode.observation()
    return {
        "run_id": req.run_id,
        "trajectories": [{
            "env_id": f"gridworld:{req.env.seed}",
            "policy_id": req.policy.policy_id or req.policy.policy_name or "policy",
            "steps": steps,
            "final": {"observation": final_obs, "reward": score},
            "length": len(steps),
            "inference_url": inference_url,
            "decision_samples": None,
        }],
        "branches": {},
        "metrics": {
            "episode_returns": [score],
            "mean_return": score,
            "num_steps": len(steps),
            "num_episodes": 1,
            "outcome_score": score,
            "events_score": None,
            "details": {"reached_goal": episode.reached, "seed": req.env.seed,
                        "shortest_path": episode.layout.shortest},
        },
        "aborted": False,
        "ops_executed": 2 * len(steps),
        "trace_correlation_id": inference_url.partition("cid=")[2] or None,
        "trace": None,
        "pipeline_metadata": {"inference_url": inference_url},
    }


def _direction(tool_calls: list) -> str | None:
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


def _inference_failed(url: str, why: str, where: str) -> HTTPException:
    return HTTPException(502, f"inference call failed: POST {without_query(url)}: {why} ({where})")
