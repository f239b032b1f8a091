"""The reference task app: the gridworld of gridworld.py behind the SDK's task-app contract.

Endpoints and auth follow contract section 5. `POST /rollout` plays one episode: at every turn
it calls the policy's inference URL (an OpenAI-compatible chat endpoint) with the observation
and the `move(direction)` tool, parses the tool call and steps the environment. The user
message ends with a `state: pos=x,y goal=x,y blocked=...` line (see policy.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Annotated, Any, Sequence

import httpx
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from app.local import gridworld
from app.core.redact import held_key_prefix
from app.core.urls import http_url_problem
from app.local.errors import describe_http_error, install_json_errors, response_detail, without_query
from app.local.guard import RequestGuard
from app.local.retry import client_limits, send_with_retries

VERSION = "1.0.0"
DEFAULT_MAX_TURNS = 12
MAX_TURNS_ALLOWED = 1_000  # as training.max_turns (app.core.trainable); an episode plays at most 100
MAX_REPORTED_KEYS = 8
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


# What /rollout reads is typed and bounded here, so a wrong value is pydantic's 422 (and the
# API fuzzer in the tests generates these fields); everything else passes through.
Turns = Annotated[int, Field(ge=1, le=MAX_TURNS_ALLOWED)]


class EnvConfig(_Open):
    max_turns: Turns | None = None


class EnvSpec(_Open):
    env_name: str | None = None
    seed: int = Field(0, ge=-(2**63), le=2**63 - 1)
    config: EnvConfig = Field(default_factory=EnvConfig)


class PolicyConfig(_Open):
    inference_url: str
    model: str | None = None
    max_turns: Turns | None = None
    temperature: float | None = Field(None, ge=0, le=10, allow_inf_nan=False)
    top_p: float | None = Field(None, ge=0, le=1, allow_inf_nan=False)
    max_tokens: int | None = Field(None, ge=1, le=1_000_000)


class PolicySpec(_Open):
    policy_id: str | None = None
    policy_name: str | None = None
    config: PolicyConfig


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
        async with httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=5.0), limits=client_limits()) as client:
            app.state.inference = client
            yield

    app = FastAPI(title=f"{app_id} task app", version=VERSION, lifespan=lifespan)
    install_json_errors(app)
    app.add_middleware(RequestGuard)

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
        if not any(hmac.compare_digest(g.encode(), k.encode()) for g in got for k in allowed):
            # Differs from the SDK on purpose: its task apps answer with the first 15
            # characters of every key they accept (a short key whole), to anyone who asks.
            # This says what was wrong and shows no more of any key than the 4-character mask.
            raise HTTPException(400, {"error": {
                "code": "unauthorised",
                "message": _auth_failure(got),
                "allowed_count": len(allowed),
                "allowed_prefixes": [held_key_prefix(k) for k in allowed],
                "got_prefixes": [held_key_prefix(g) for g in got[:MAX_REPORTED_KEYS]],
                "got_lens": [len(g) for g in got[:MAX_REPORTED_KEYS]],
            }})

    authed = [Depends(require_key)]

    @app.get("/")
    async def root() -> dict:
        return {"status": "ok", "service": app_id}

    app.add_api_route("/", root, methods=["HEAD"], include_in_schema=False)  # one operation id for "/"

    @app.get("/health", dependencies=authed)
    async def health() -> dict:
        return {"healthy": True, "auth": {"required": True, "expected_prefix": held_key_prefix(allowed[0])}}

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

    rollouts = RolloutReplays()

    @app.post("/rollout", dependencies=authed)
    async def rollout(req: RolloutRequest, request: Request) -> dict:
        # A retried request (same run_id and body) joins or repeats the first run's answer.
        return await rollouts.run(req, lambda: _play(request.app.state.inference, req))

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
    turns = req.env.config.max_turns or req.policy.config.max_turns
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
    inference_url = req.policy.config.inference_url
    problem = http_url_problem(inference_url)
    if problem:
        raise HTTPException(422, f"policy.config.inference_url must be an http(s) URL: {problem}")
    url = _chat_url(inference_url)
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
        try:
            resp = await send_with_retries(lambda: client.post(url, json=body))
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


def _auth_failure(got: list[str]) -> str:
    if not got:
        return ("API key missing: send ENVIRONMENT_API_KEY in X-API-Key, X-API-Keys or "
                "Authorization: Bearer")
    return (f"API key invalid: none of the {len(got)} key(s) sent is one this task app accepts; "
            "send the ENVIRONMENT_API_KEY it was started with")


class RolloutReplays:
    """Rollouts by run_id and body, so a retried POST /rollout is answered once: a repeat
    that arrives while the first is running waits for it, one that arrives after it succeeded
    gets the same answer, and one after a failure runs again. Answers are kept for
    KEEP_S seconds, at most KEEP_COUNT of them."""

    KEEP_S = 300.0
    KEEP_COUNT = 256

    def __init__(self) -> None:
        self._runs: OrderedDict[str, tuple[float, asyncio.Task]] = OrderedDict()

    async def run(self, req: RolloutRequest, play: Callable[[], Awaitable[dict]]) -> dict:
        self._forget_old()
        key = req.run_id + ":" + hashlib.sha256(req.model_dump_json().encode()).hexdigest()
        known = self._runs.get(key)
        task = known[1] if known else None
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            task = asyncio.ensure_future(play())
            self._runs[key] = (time.monotonic(), task)
        # Shielded: a client that gives up does not cancel the episode its retry will want.
        return await asyncio.shield(task)

    def _forget_old(self) -> None:
        now = time.monotonic()
        for key, (started, task) in list(self._runs.items()):
            if not task.done():
                continue
            if now - started > self.KEEP_S or len(self._runs) > self.KEEP_COUNT:
                del self._runs[key]
