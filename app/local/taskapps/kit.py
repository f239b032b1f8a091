"""What every task app of this repository shares, written the way the SDK's task apps are.

The request models of `POST /rollout` in both contract generations (0.2: `run_id`; 0.5:
`trace_correlation_id`, docs/rollout-contracts.md), the app itself with the SDK's auth rules
(any of X-API-Key, X-API-Keys, Authorization: Bearer; 400 when wrong, 503 when the app has no
key), `/`, `/health` and `/done`, the `/rollout` route with answers to repeated rollouts, the
answer in either generation, and the call to the policy's chat endpoint with retries. The
gridworld (gridworld_app.py) and the inventory game (crafter.py) add their own `/info`,
`/task_info` and episode on top. docs/hardening.md.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Annotated, Any, ClassVar

import httpx
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.params import Depends as DependsParam
from pydantic import BaseModel, ConfigDict, Field

from app.core.api.failures import describe_http_error, response_detail
from app.core.api.retry import Backoff
from app.core.api.transport import ssl_context
from app.core.api.urls import MAX_URL_CHARS, http_url_problem
from app.core.redact import held_key_prefix
from app.local.server.api_schemas import BODY_ERRORS, TaskAppErrorAnswer, error_responses
from app.local.server.errors import install_json_errors, without_query
from app.local.server.guard import RequestGuard
from app.local.training.retry import DEFAULT_BACKOFF, client_limits, send_with_retries
from app.local.training.rollout_contract import GEN_05, GENERATIONS, chat_completions_url, cid_in_url

MAX_TURNS_ALLOWED = 1_000  # as training.max_turns (app.core.config.trainable)
MAX_REPORTED_KEYS = 8
# The chat hop's budget is the rollout's own (docs/hardening.md#the-chat-hops-time): a 0.2
# request may name none, and then the backend's default [rollout] timeout_s is assumed.
DEFAULT_ROLLOUT_TIME_S = 120.0
CHAT_CONNECT_TIMEOUT_S = 5.0
MIN_CHAT_READ_S = 1.0  # a chat call near the rollout's end still gets a moment to be answered
# Every route behind the key: 400 when it is missing or wrong, 503 when the app holds none.
AUTH_ERRORS = error_responses(400, 503, model=TaskAppErrorAnswer)


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
    # Checked by chat_url (a 422 in words); the pattern tells clients and the fuzzer what is wanted.
    inference_url: str = Field(json_schema_extra={"pattern": "^[hH][tT][tT][pP][sS]?://", "maxLength": MAX_URL_CHARS})
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
    """The 0.2 request: a rollout is named by its run_id."""

    run_id: str
    env: EnvSpec
    policy: PolicySpec
    ops: list[Any] = Field(default_factory=list)
    mode: str

    @property
    def replay_key(self) -> str:
        return self.run_id


class SafetyConfig(_Open):
    # default= by keyword: type checkers read a positional default as a required field.
    max_time_s: float = Field(default=3600.0, gt=0, le=86_400, allow_inf_nan=False)


class _Gen05:
    # A namespace so that the request's OpenAPI name is RolloutRequest, as in the SDK's apps:
    # the job runner reads the generation from that schema's required fields.
    class RolloutRequest(BaseModel):
        """The 0.4/0.5 request: a rollout is named by its trace_correlation_id; other keys are
        ignored, as pydantic's default does in the SDK."""

        trace_correlation_id: str = Field(min_length=1, max_length=512)
        env: EnvSpec
        policy: PolicySpec
        on_done: str = "reset"
        safety: SafetyConfig = Field(default_factory=SafetyConfig)
        training_session_id: str | None = None
        synth_base_url: str | None = None
        # Not in this generation; read by the episodes as "nothing asked".
        ops: ClassVar[tuple[Any, ...]] = ()
        mode: ClassVar[str | None] = None

        @property
        def replay_key(self) -> str:
            return self.trace_correlation_id


RolloutRequestV05 = _Gen05.RolloutRequest


@dataclass(frozen=True)
class PolicyLink:
    """How an episode reaches the policy's chat endpoint: one HTTP client for the app's life,
    and how patiently a transient failure is retried (``app.state.chat_backoff``, set before the
    app starts: tests shorten the waits, never skip the retries)."""

    client: httpx.AsyncClient
    backoff: Backoff = DEFAULT_BACKOFF
    # time.monotonic() by which the rollout must be answered; None: DEFAULT_ROLLOUT_TIME_S from each call
    deadline: float | None = None

    def for_rollout(self, time_s: float) -> PolicyLink:
        """The link for one rollout that must be answered within `time_s`."""
        return replace(self, deadline=time.monotonic() + time_s)

    def read_timeout_s(self) -> float:
        """How long a chat call may wait for its answer: what is left of the rollout's time.
        A model on a CPU answering several rollouts at once takes tens of seconds a turn, and a
        fixed short bound made such jobs fail with 502s (issue 37); the backend hangs up at the
        rollout's end anyway."""
        left = DEFAULT_ROLLOUT_TIME_S if self.deadline is None else self.deadline - time.monotonic()
        return max(MIN_CHAT_READ_S, left)


def base_taskapp(*, app_id: str, title: str, version: str,
                 env_api_keys: Sequence[str]) -> tuple[FastAPI, list[DependsParam]]:
    """The app with `/`, `/health` and `/done`, and the dependency that checks the key."""
    allowed = [k for k in env_api_keys if k]

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        timeout = httpx.Timeout(DEFAULT_ROLLOUT_TIME_S, connect=CHAT_CONNECT_TIMEOUT_S)
        async with httpx.AsyncClient(timeout=timeout, limits=client_limits(), verify=ssl_context()) as client:
            app.state.inference = PolicyLink(client, app.state.chat_backoff)
            yield

    app = FastAPI(title=title, version=version, lifespan=lifespan)
    app.state.chat_backoff = DEFAULT_BACKOFF
    install_json_errors(app)
    app.add_middleware(RequestGuard)

    def require_key(request: Request) -> None:
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
    async def root() -> dict[str, Any]:
        return {"status": "ok", "service": app_id}

    app.add_api_route("/", root, methods=["HEAD"], include_in_schema=False)  # one operation id for "/"

    @app.get("/health", dependencies=authed, responses=AUTH_ERRORS)
    async def health() -> dict[str, Any]:
        return {"healthy": True, "auth": {"required": True, "expected_prefix": held_key_prefix(allowed[0])}}

    @app.post("/done", dependencies=authed, responses=AUTH_ERRORS)
    async def done() -> dict[str, Any]:
        return {"ok": True, "service": app_id}

    return app, authed


def add_rollout_route(app: FastAPI, authed: list[DependsParam], contract: str,
                      play: Callable[[PolicyLink, Any], Awaitable[dict[str, Any]]],
                      check: Callable[[Any], None] | None = None) -> None:
    """`POST /rollout` in a contract generation: the request model of that generation, its
    checks, then `play(policy, request)` once per rollout (a retried request joins or repeats
    the first run's answer)."""
    if contract not in GENERATIONS:
        raise ValueError(f"contract must be one of {', '.join(GENERATIONS)} (got {contract!r})")
    replays = RolloutReplays()

    async def run(req: Any, request: Request) -> dict[str, Any]:
        if check is not None:
            check(req)
        policy = request.app.state.inference.for_rollout(rollout_time_s(req))
        return await replays.run(req, lambda: play(policy, req))

    async def rollout_05(req: RolloutRequestV05, request: Request) -> dict[str, Any]:
        check_trace_correlation_id(req)
        return await run(req, request)

    async def rollout_02(req: RolloutRequest, request: Request) -> dict[str, Any]:
        return await run(req, request)

    # Named "rollout" either way: the OpenAPI operation id stays rollout_rollout_post.
    app.post("/rollout", dependencies=authed, name="rollout",
             responses=error_responses(400, 422, 502, 503, *BODY_ERRORS, model=TaskAppErrorAnswer),
             )(rollout_05 if contract == GEN_05 else rollout_02)


def rollout_time_s(req: Any) -> float:
    """The rollout's time, `safety.max_time_s` (a field in 0.5, an extra key in 0.2), else the
    backend's default."""
    safety = getattr(req, "safety", None)
    if safety is None:
        safety = (getattr(req, "model_extra", None) or {}).get("safety")
    value = safety.get("max_time_s") if isinstance(safety, dict) else getattr(safety, "max_time_s", None)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 86_400:
        return float(value)
    return DEFAULT_ROLLOUT_TIME_S


def check_trace_correlation_id(req: Any) -> None:
    """0.5: a correlation id the inference URL carries (in its path, else ?cid=) must be the
    request's trace_correlation_id, or the trace and the policy's calls would be filed under
    two ids. The ids are not echoed: an inference URL's id is a credential."""
    in_url = cid_in_url(req.policy.config.inference_url)
    if in_url is not None and in_url != req.trace_correlation_id:
        raise HTTPException(400, "policy.config.inference_url carries a correlation id that differs from "
                                 "trace_correlation_id; send the inference URL made for this rollout, whose "
                                 "id (in its path, /v1/<trial>/<id>, or as ?cid=) is the trace_correlation_id")


def chat_url(inference_url: str) -> str:
    """The chat completions URL of a policy's inference URL (which may be a base URL),
    normalised as the SDK's task apps do (rollout_contract.chat_completions_url)."""
    problem = http_url_problem(inference_url)
    if problem:
        raise HTTPException(422, f"policy.config.inference_url must be an http(s) URL: {problem}")
    return chat_completions_url(inference_url)


async def ask_policy(policy: PolicyLink, url: str, body: dict[str, Any], where: str) -> list[Any]:
    """The tool calls of the policy's answer to one chat request; transient failures are
    retried, and a failure that stays is a 502 naming the call and the reason."""
    read_s = policy.read_timeout_s()
    timeout = httpx.Timeout(read_s, connect=CHAT_CONNECT_TIMEOUT_S)
    try:
        resp = await send_with_retries(lambda: policy.client.post(url, json=body, timeout=timeout),
                                       backoff=policy.backoff)
    except httpx.ReadTimeout as exc:
        raise inference_failed(url, f"no answer within {read_s:.0f} s, what was left of the rollout's time "
                                    "(safety.max_time_s, the backend's [rollout] timeout_s): the model is slower "
                                    "than that", where) from exc
    except httpx.HTTPError as exc:
        raise inference_failed(url, describe_http_error(exc), where) from exc
    if resp.status_code >= 400:
        raise inference_failed(url, f"HTTP {resp.status_code}: {response_detail(resp)}", where)
    try:
        return resp.json()["choices"][0]["message"].get("tool_calls") or []
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise inference_failed(url, "the answer is not an OpenAI chat completion", where) from None


def first_call_argument(tool_calls: list[Any], name: str) -> Any:
    """The argument `name` of the policy's first tool call (its arguments a JSON string or an
    object), or None when the answer has no such call or argument."""
    try:
        args = tool_calls[0]["function"]["arguments"]
        return (json.loads(args) if isinstance(args, str) else args)[name]
    except (IndexError, KeyError, TypeError, ValueError):
        return None


def inference_failed(url: str, why: str, where: str) -> HTTPException:
    return HTTPException(502, f"inference call failed: POST {without_query(url)}: {why} ({where})")


def rollout_response(req: Any, *, env_id: str, steps: list[dict[str, Any]], score: float,
                     final: dict[str, Any], details: dict[str, Any], system_prompt: str) -> dict[str, Any]:
    """The SDK's RolloutResponse for one episode, in the generation of the request. Each step
    is `{obs: {text, ...}, tool_calls, reward, done, truncated, info}`."""
    if isinstance(req, RolloutRequestV05):
        return _response_v05(req, env_id=env_id, steps=steps, score=score, final=final, details=details,
                             system_prompt=system_prompt)
    inference_url = req.policy.config.inference_url
    return {
        "run_id": req.run_id,
        "trajectories": [{
            "env_id": env_id,
            "policy_id": req.policy.policy_id or req.policy.policy_name or "policy",
            "steps": steps,
            "final": final,
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
            "details": details,
        },
        "aborted": False,
        "ops_executed": 2 * len(steps),
        "trace_correlation_id": cid_in_url(inference_url),
        "trace": None,
        "pipeline_metadata": {"inference_url": inference_url},
    }


def _response_v05(req: Any, *, env_id: str, steps: list[dict[str, Any]], score: float, final: dict[str, Any],
                  details: dict[str, Any], system_prompt: str) -> dict[str, Any]:
    """synth-ai 0.5.0's RolloutResponse: reward_info, and a v3 trace with one lm_call event per
    turn, whose tool calls name the turns (docs/rollout-contracts.md)."""
    cid = req.trace_correlation_id
    events = [{
        "type": "lm_call",
        "event_type": "lm_call",
        "turn": turn,
        "llm_request": {"messages": [{"role": "system", "content": system_prompt},
                                     {"role": "user", "content": step["obs"].get("text")}]},
        "llm_response": {"message": {"role": "assistant", "content": None, "tool_calls": step["tool_calls"]}},
        "reward": step["reward"],
        "metadata": {"done": step["done"], "truncated": step["truncated"], "info": step["info"]},
    } for turn, step in enumerate(steps, 1)]
    return {
        "trace_correlation_id": cid,
        "reward_info": {
            "outcome_reward": score,
            "event_rewards": [step["reward"] for step in steps],
            "outcome_objectives": None,
            "details": {**details, "num_steps": len(steps)},
        },
        "trace": {
            "schema_version": "3.0",
            "event_history": events,
            "markov_blanket_message_history": [],
            "metadata": {"trace_correlation_id": cid, "correlation_ids": {"trace_correlation_id": cid},
                         "env_id": env_id, "final": final},
        },
        "inference_url": req.policy.config.inference_url,
        "artifact": None,
        "success_status": "success",
        "status_detail": None,
    }


def _auth_failure(got: list[str]) -> str:
    if not got:
        return ("API key missing: send ENVIRONMENT_API_KEY in X-API-Key, X-API-Keys or "
                "Authorization: Bearer")
    return (f"API key invalid: none of the {len(got)} key(s) sent is one this task app accepts; "
            "send the ENVIRONMENT_API_KEY it was started with")


class RolloutReplays:
    """Rollouts by their id (run_id in 0.2, trace_correlation_id in 0.5: `replay_key`) and
    body, so a retried POST /rollout is answered once: a repeat
    that arrives while the first is running waits for it, one that arrives after it succeeded
    gets the same answer, and one after a failure runs again. Answers are kept for
    KEEP_S seconds, at most KEEP_COUNT of them."""

    KEEP_S = 300.0
    KEEP_COUNT = 256

    def __init__(self) -> None:
        self._runs: OrderedDict[str, tuple[float, asyncio.Task[dict[str, Any]]]] = OrderedDict()

    async def run(self, req: Any, play: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
        self._forget_old()
        key = req.replay_key + ":" + hashlib.sha256(req.model_dump_json().encode()).hexdigest()
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
