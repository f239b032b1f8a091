"""The two generations of the task-app rollout contract, as the embedded backend speaks them.

- "0.2" (synth-ai 0.2.x): `POST /rollout` takes `run_id`, `env`, `policy`, `ops`, `mode`,
  `record`...; the inference URL carries the correlation id as `?cid=`; the answer's score is
  `metrics.mean_return`, its turns `metrics.num_steps`, its tool calls in `trajectories`.
- "0.5" (synth-ai 0.4.12 and 0.5.0): the request requires `trace_correlation_id` and has no
  run_id, ops or mode; the inference URL carries the id in its path
  (`…/v1/{trial_id}/{correlation_id}`); the answer's score is `metrics.outcome_reward` (0.4)
  or `reward_info.outcome_reward` (0.5), and its tool calls are in a v3 `trace`.

This module builds the request body of either generation, reads the score, turns and
tool-call ids of an answer in any of them, and tells which generation a task app speaks,
from its /openapi.json or from the 4xx with which it refused a body. docs/rollout-contracts.md.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

import httpx

from app.core.api.retry import Backoff, retrying
from app.core.config.trainable import is_int, short_repr
from app.local.training.answers import NOT_COMPRESSED, SMALL_ANSWER_BYTES, AnswerTooLarge, send_capped
from app.local.training.retry import transient_http_error

GEN_02 = "0.2"
GEN_05 = "0.5"
GENERATIONS = (GEN_02, GEN_05)
GENERATION_NAMES = {
    GEN_02: "synth-ai 0.2: run_id, ops and mode; metrics.mean_return",
    GEN_05: "synth-ai 0.4/0.5: trace_correlation_id; reward_info.outcome_reward",
}

CID_PREFIX = "trace_"  # what the job runner writes: task apps built on the SDK refuse an id without it
CID_PREFIXES = ("trace_", "cid_", "eval_")  # every prefix the SDK's helper recognises in a URL path

# Where a score is read, in this order; the first one present decides.
SCORE_FIELDS = ("reward_info.outcome_reward", "metrics.outcome_reward", "metrics.mean_return",
                "metrics.episode_returns")

OPENAPI_TIMEOUT = httpx.Timeout(5.0, connect=3.0)
OPENAPI_MAX_BYTES = SMALL_ANSWER_BYTES
OPENAPI_BACKOFF = Backoff(attempts=3, first_delay_s=0.1, max_delay_s=0.5)
REFUSAL_STATUS = frozenset({400, 422})


class TaskAppError(Exception):
    """A call to the task app failed; the message names the call and the reason."""


# -- correlation ids ------------------------------------------------------------------------


def correlation_id(job_id: str, rollout_id: str) -> str:
    """The correlation id of a rollout: names the job and the rollout."""
    return f"{CID_PREFIX}{job_id}:{rollout_id}"


def strip_cid_prefix(cid: str) -> str:
    for prefix in CID_PREFIXES:
        if cid.startswith(prefix):
            return cid[len(prefix):]
    return cid


def parse_correlation_id(cid: str) -> tuple[str, str]:
    """(job id, rollout id) of a cid; any of CID_PREFIXES, or none (older clients sent none)."""
    job_id, _, rollout_id = strip_cid_prefix(cid).partition(":")
    return job_id, rollout_id


def cid_in_url(url: str) -> str | None:
    """The correlation id an inference URL carries, as the SDK's helper finds it: the path
    segment before `chat/completions`, else the last path segment, that starts with one of
    CID_PREFIXES; else the `cid` query parameter. None when there is none (or no URL)."""
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        return None
    segments = [unquote(s) for s in parts.path.split("/") if s]
    for segment in reversed(segments):
        if segment.startswith(CID_PREFIXES):
            return segment
    values = parse_qs(parts.query).get("cid") or []
    return next((v.strip() for v in values if v.strip()), None)


def chat_completions_url(url: str) -> str:
    """An inference URL made a chat completions URL, as the SDK's task apps do: a path that
    contains /v1/ (or ends with /v1) gets /chat/completions, one ending with /chat gets
    /completions, any other /v1/chat/completions; the query is kept."""
    parts = urlsplit(url.strip())
    path = parts.path.rstrip("/")
    if not path.endswith("/chat/completions"):
        if "/v1/" in path or path.endswith("/v1"):
            path += "/chat/completions"
        elif path.endswith("/chat"):
            path += "/completions"
        else:
            path += "/v1/chat/completions"
    return urlunsplit(parts._replace(path=path))


# -- the request ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutAsk:
    """What one rollout request says, whatever the generation."""

    job_id: str
    rollout_id: str
    mode: str  # "rl" or "eval"
    seed: int
    env_name: str
    policy_name: str
    model: str
    max_turns: int
    ops: tuple[str, ...]
    timeout_s: float
    api_base: str  # the backend's `{base}/api/v1`

    @property
    def cid(self) -> str:
        return correlation_id(self.job_id, self.rollout_id)


def inference_url(generation: str, api_base: str, job_id: str, cid: str) -> str:
    """0.2: the chat endpoint with `?cid=`; 0.5: the path form `{api_base}/{job_id}/{cid}`, a
    base URL to which the task app appends /chat/completions."""
    if generation == GEN_05:
        return f"{api_base}/{job_id}/{cid}"
    return f"{api_base}/chat/completions?cid={cid}"


def rollout_body(generation: str, ask: RolloutAsk) -> dict[str, Any]:
    """The POST /rollout body of one rollout in a generation. The same ask gives the same body
    on every attempt, so a task app answers a retry from its first run."""
    policy_config = {"model": ask.model, "max_turns": ask.max_turns, "temperature": 1.0,
                     "inference_url": inference_url(generation, ask.api_base, ask.job_id, ask.cid)}
    env = {"env_name": ask.env_name, "config": {"max_turns": ask.max_turns}, "seed": ask.seed}
    policy = {"policy_name": ask.policy_name, "config": policy_config}
    if generation == GEN_05:
        return {
            "trace_correlation_id": ask.cid,
            "env": env,
            "policy": policy,
            "on_done": "reset",
            "safety": {"max_time_s": ask.timeout_s},
            "training_session_id": None,
            "synth_base_url": None,
        }
    return {
        "run_id": f"{ask.job_id}:{ask.rollout_id}",
        "env": env,
        "policy": policy,
        "ops": list(ask.ops) * ask.max_turns,
        "record": {"trajectories": True, "logprobs": False, "value": False, "return_trace": False,
                   "trace_format": "compact"},
        "on_done": "reset",
        "safety": {"max_ops": 100_000, "max_time_s": ask.timeout_s},
        "training_session_id": None,
        "synth_base_url": None,
        "mode": ask.mode,
    }


# -- the answer -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutOutcome:
    score: float
    score_field: str  # which of SCORE_FIELDS it came from
    turns: int | None
    tool_call_ids: frozenset[str]


def read_answer(answer: Any) -> RolloutOutcome:
    """The score, turn count and tool-call ids of a /rollout answer of any generation; a
    TaskAppError (without the call's name: the caller adds it) when there is no usable score."""
    score, field = read_score(answer)
    return RolloutOutcome(score, field, read_turns(answer), frozenset(read_tool_call_ids(answer)))


def _at(answer: Any, dotted: str) -> Any:
    value = answer
    for name in dotted.split("."):
        value = value.get(name) if isinstance(value, dict) else None
    return value


def _finite(value: Any) -> bool:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:  # an integer beyond any float
        return False


def read_score(answer: Any) -> tuple[float, str]:
    """(score, field): the first of SCORE_FIELDS present decides, and must be a finite number
    (episode_returns: a non-empty list of them, averaged)."""
    for field in SCORE_FIELDS:
        value = _at(answer, field)
        if value is None or (field.endswith("episode_returns") and value == []):
            continue
        if field.endswith("episode_returns"):
            if not (isinstance(value, list) and all(_finite(v) for v in value)):
                raise TaskAppError(f"{field} must be a list of finite numbers (got {short_repr(value)})")
            try:
                mean = math.fsum(float(v) for v in value) / len(value)
            except OverflowError:
                mean = math.inf
            if not math.isfinite(mean):
                raise TaskAppError(f"{field} has no finite mean (got {short_repr(value)})")
            return mean, field
        if not _finite(value):
            what = "is" if isinstance(value, (int, float)) and not isinstance(value, bool) else "is not a number:"
            raise TaskAppError(f"{field} {what} {short_repr(value)}")
        return float(value), field
    raise TaskAppError("the answer has no score: it has none of " + ", ".join(SCORE_FIELDS))


def read_turns(answer: Any) -> int | None:
    """`metrics.num_steps`, else `reward_info.details.num_steps`, else
    `metrics.details.num_steps`: a whole number from 0, or None."""
    for field in ("metrics.num_steps", "reward_info.details.num_steps", "metrics.details.num_steps"):
        value = _at(answer, field)
        if is_int(value) and value >= 0:
            return int(value)
    return None


def read_tool_call_ids(answer: Any) -> set[str]:
    """The ids of the tool calls an episode used, wherever the answer reports them:
    `trajectories[].steps[].tool_calls[].id` (0.2), and in a v3 trace (0.5),
    `trace.event_history[]` or `trace.session_trace.event_history[]`, each event's
    `llm_response.message.tool_calls[].id` and `call_records[].output_tool_calls[].call_id`."""
    ids: set[str] = set()
    for step in _dicts(_at(answer, "trajectories"), "steps"):
        ids.update(_ids(step.get("tool_calls"), "id"))
    trace = _at(answer, "trace")
    for history in (_at(trace, "event_history"), _at(trace, "session_trace.event_history")):
        for event in _dicts(history):
            ids.update(_ids(_at(event, "llm_response.message.tool_calls"), "id"))
            for record in _dicts(event.get("call_records")):
                ids.update(_ids(record.get("output_tool_calls"), "call_id"))
    return ids


def _dicts(items: Any, inner: str | None = None) -> Iterator[dict[str, Any]]:
    """The objects of a list (or of each object's `inner` list); anything else is skipped."""
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict):
            continue
        if inner is None:
            yield item
        else:
            yield from _dicts(item.get(inner))


def _ids(calls: Any, key: str) -> Iterator[str]:
    for call in _dicts(calls):
        if isinstance(call.get(key), str):
            yield call[key]


# -- which generation a task app speaks -----------------------------------------------------


def generation_from_openapi(doc: Any) -> str | None:
    """The generation an OpenAPI document describes, from the required fields of the body of
    `POST /rollout` (its `$ref`, else `components.schemas.RolloutRequest`); None when the
    document does not say."""
    schemas = _at(doc, "components.schemas")
    schemas = schemas if isinstance(schemas, dict) else {}
    body = _at(doc, "paths./rollout.post.requestBody.content")
    body = body.get("application/json") if isinstance(body, dict) else None
    ref = _at(body, "schema.$ref") if isinstance(body, dict) else None
    schema = None
    if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
        schema = schemas.get(ref.rsplit("/", 1)[1])
    if not isinstance(schema, dict):
        schema = schemas.get("RolloutRequest")
    required = schema.get("required") if isinstance(schema, dict) else None
    if not isinstance(required, list):
        return None
    if "trace_correlation_id" in required:
        return GEN_05
    if "run_id" in required:
        return GEN_02
    return None


async def fetch_openapi(http: httpx.AsyncClient, task_url: str, headers: dict[str, str]) -> Any:
    """The task app's /openapi.json, or None when it has none we can read (not found, not
    JSON, larger than OPENAPI_MAX_BYTES, unreachable): detection then falls back to refusals."""
    url = f"{task_url}/openapi.json"

    async def fetch() -> httpx.Response:
        request = http.build_request("GET", url, headers={**headers, **NOT_COMPRESSED}, timeout=OPENAPI_TIMEOUT)
        return await send_capped(http, request, OPENAPI_MAX_BYTES)

    try:
        resp = await retrying(fetch, backoff=OPENAPI_BACKOFF, transient_error=transient_http_error)
    except (AnswerTooLarge, httpx.HTTPError):
        return None
    if resp.status_code != 200:
        return None
    try:
        return json.loads(resp.content)
    except (ValueError, RecursionError):
        return None


# Field names in a free-text detail: run_id and trace_correlation_id are unambiguous words;
# "mode" only where it is written as a field (body.mode, "mode", 'mode', `mode`).
_NAMED_IN_TEXT = re.compile(r"(?<![\w.])(?:body\.)?(trace_correlation_id|run_id)(?!\w)"
                            r"|(?:body\.|[\"'`])(mode)(?:[\"'`]|(?!\w))")
_ASKS = {GEN_02: ("trace_correlation_id",), GEN_05: ("run_id", "mode")}  # sent -> names that ask for the other


def refusal_asks_for(sent: str, status: int, body: Any) -> tuple[str, str] | None:
    """(generation, field) when a 400/422 answer to a body of generation `sent` refuses it for
    lacking a field of the other generation: a 0.2 body refused naming trace_correlation_id,
    a 0.5 body refused naming run_id or mode. None for any other refusal."""
    if status not in REFUSAL_STATUS or not isinstance(body, dict):
        return None
    named = set(_named_fields(body.get("detail", body)))
    for field in _ASKS.get(sent, ()):
        if field in named:
            return (GEN_05 if sent == GEN_02 else GEN_02), field
    return None


def _named_fields(detail: Any, depth: int = 0) -> Iterator[str]:
    """The field names an error detail names: the `loc` of FastAPI's validation errors, and the
    words of a text. The `input` a validation error echoes back (the body sent) is skipped."""
    if depth > 8:
        return
    if isinstance(detail, str):
        for match in _NAMED_IN_TEXT.finditer(detail[:4000]):
            yield match.group(1) or match.group(2)
    elif isinstance(detail, list):
        for item in detail[:50]:
            yield from _named_fields(item, depth + 1)
    elif isinstance(detail, dict):
        loc = detail.get("loc")
        if isinstance(loc, list):
            yield from (str(part) for part in loc if isinstance(part, str))
        for key, value in list(detail.items())[:50]:
            if key not in ("input", "loc"):
                yield from _named_fields(value, depth + 1)
