"""What both apps share, on synth-ai 0.5.0: the app from a `Game`, one episode per rollout.

A `Game` says what the policy sees and how a call is judged; `run_episode` plays it against
the policy's chat endpoint the way the SDK's helpers do it (the inference URL normalised to
`.../chat/completions`, the task-app key forwarded as X-API-Key, `max_completion_tokens`,
`expected_tool_name`), and answers with `build_rollout_response`: `reward_info.outcome_reward`,
per-turn `event_rewards`, and a v3 trace with one `lm_call` event per turn.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from synth_ai.sdk.localapi import LocalAPIConfig, create_local_api
from synth_ai.sdk.localapi.helpers import call_chat_completion_api, create_http_client_hooks, extract_api_key
from synth_ai.sdk.task import build_rollout_response
from synth_ai.sdk.task.contracts import RolloutRequest, RolloutResponse, TaskInfo
from synth_ai.sdk.task.trace_correlation_helpers import build_trace_payload


@dataclass
class Turn:
    """How one call was judged: the tool result the policy reads next, this turn's reward, the
    user message that follows (None: none), and whether the episode ends here."""

    feedback: str
    reward: float
    next_user: str | None = None
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Episode:
    """One seeded episode of a game; `judge` is called once per turn with the parsed arguments
    of the policy's first call (None when it made no call of the game's tool, or an unparsable one)."""

    first_user: str
    judge: Callable[[int, dict[str, Any] | None], Turn]
    score: Callable[[list[Turn]], float]
    details: Callable[[list[Turn]], dict[str, Any]]


@dataclass(frozen=True)
class Game:
    app_id: str
    name: str
    description: str
    system_prompt: str
    tool: dict[str, Any]
    tool_choice: str | dict[str, Any]
    max_turns: int
    new_episode: Callable[[random.Random], Episode]
    taskset: dict[str, Any]

    @property
    def tool_name(self) -> str:
        return str(self.tool["function"]["name"])


def call_arguments(tool_calls: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The arguments of the first call of `name`, parsed; None when there is none or they are not
    a JSON object."""
    for call in tool_calls:
        function = call.get("function") or {}
        if function.get("name") != name:
            continue
        raw = function.get("arguments")
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            return None
        return args if isinstance(args, dict) else None
    return None


async def run_episode(game: Game, request: RolloutRequest, fastapi_request: Request) -> RolloutResponse:
    policy_config = dict(request.policy.config or {})
    seed = request.env.seed if request.env.seed is not None else 0
    episode = game.new_episode(random.Random(seed))
    api_key = extract_api_key(fastapi_request, policy_config)
    http_client = fastapi_request.app.state.http_client
    cid = request.trace_correlation_id

    messages: list[dict[str, Any]] = [{"role": "system", "content": game.system_prompt},
                                      {"role": "user", "content": episode.first_user}]
    turns: list[Turn] = []
    events: list[dict[str, Any]] = []
    for turn_no in range(1, game.max_turns + 1):
        text, response_json, tool_calls = await call_chat_completion_api(
            policy_config, messages, tools=[game.tool], tool_choice=game.tool_choice,
            api_key=api_key, http_client=http_client, expected_tool_name=game.tool_name)
        event = build_trace_payload(list(messages), response_json, correlation_id=cid)["event_history"][0]
        turn = episode.judge(turn_no, call_arguments(tool_calls, game.tool_name))
        event.update(turn=turn_no, reward=turn.reward, metadata={"done": turn.done, "info": turn.info})
        events.append(event)
        turns.append(turn)
        assistant: dict[str, Any] = {"role": "assistant", "content": text or None}
        if tool_calls:
            assistant["tool_calls"] = tool_calls
        messages.append(assistant)
        if tool_calls:
            messages.append({"role": "tool", "tool_call_id": tool_calls[0].get("id", ""), "content": turn.feedback})
        else:  # an answer in text: the feedback comes as the user's next words
            messages.append({"role": "user", "content": turn.feedback})
        if turn.done:
            break
        if turn.next_user is not None:
            messages.append({"role": "user", "content": turn.next_user})

    score = episode.score(turns)
    trace = build_trace_payload(messages, None, correlation_id=cid, metadata={"env_id": f"{game.app_id}:{seed}"})
    trace["event_history"] = events
    return build_rollout_response(
        request=request, outcome_reward=score, inference_url=policy_config.get("inference_url"), trace=trace,
        event_rewards=[t.reward for t in turns],
        details={**episode.details(turns), "seed": seed, "num_steps": len(turns)},
        success_status="success")


def build_app(game: Game) -> Any:
    """The FastAPI app, built by the SDK from a LocalAPIConfig: /, /health, /info, /task_info,
    /rollout and /done, with the SDK's ENVIRONMENT_API_KEY checks."""
    startup, shutdown = create_http_client_hooks(timeout=30.0)

    def task_instances(seeds: list[int]) -> list[TaskInfo]:
        return [TaskInfo(task={"id": game.app_id, "name": game.name}, dataset={"id": game.app_id, "seed": seed},
                         inference={}, limits={"max_turns": game.max_turns},
                         task_metadata={"first_message": game.new_episode(random.Random(seed)).first_user})
                for seed in seeds]

    async def rollout(request: RolloutRequest, fastapi_request: Request) -> RolloutResponse:
        return await run_episode(game, request, fastapi_request)

    return create_local_api(LocalAPIConfig(
        app_id=game.app_id, name=game.name, description=game.description,
        base_task_info=TaskInfo(task={"id": game.app_id, "name": game.name, "description": game.description},
                                dataset={"id": game.app_id}, inference={}, limits={"max_turns": game.max_turns}),
        provide_taskset_description=lambda: {"id": game.app_id, **game.taskset},
        provide_task_instances=task_instances,
        rollout=rollout,
        startup_hooks=[startup], shutdown_hooks=[shutdown],
    ))
