"""A small reference task app for tests: guess a number from 1 to 8 with higher/lower feedback.

The feedback comes back as the tool result of the call before (a `tool` message), so the
latest observation is what a policy must key on to learn; nothing here sends a compact
`state:` line. Score: found on turn t of 4, 1 - 0.25 (t - 1); not found, 0. Random guesses
score about 0.28. Built on app/local/taskapps/kit.py like the gridworld and crafter-lite.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI

from app.local.taskapps.kit import (
    add_rollout_route,
    ask_policy,
    base_taskapp,
    chat_url,
    first_call_argument,
    rollout_response,
)
from app.local.training.rollout_contract import GEN_02

from .sdk_taskapps.guess_rules import (
    APP_ID,
    FIRST_USER,
    GUESS_TOOL,
    HIGH,
    LOW,
    SYSTEM_PROMPT,
    TOOL_CHOICE,
    TURNS,
    feedback,
    score_of,
)


def _number(tool_calls: list[Any]) -> int | None:
    number = first_call_argument(tool_calls, "number")
    return number if isinstance(number, int) and LOW <= number <= HIGH else None


async def _play(policy: Any, req: Any) -> dict[str, Any]:
    url = chat_url(req.policy.config.inference_url)
    secret = random.Random(req.env.seed).randint(LOW, HIGH)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT},
                                      {"role": "user", "content": FIRST_USER}]
    steps, found = [], 0
    for turn in range(1, TURNS + 1):
        obs = {"text": messages[-1]["content"]}
        body = {"model": req.policy.config.model or "policy", "messages": messages, "tools": [GUESS_TOOL],
                "tool_choice": TOOL_CHOICE}
        tool_calls = await ask_policy(policy, url, body, f"turn {turn}, seed {req.env.seed}")
        guess = _number(tool_calls)
        said = feedback(guess, secret)
        messages = [*messages, {"role": "assistant", "content": None, "tool_calls": tool_calls},
                    {"role": "tool", "tool_call_id": (tool_calls or [{}])[0].get("id", ""), "content": said}]
        if guess == secret:
            found = turn
        steps.append({"obs": obs, "tool_calls": tool_calls, "reward": 0.0, "done": bool(found),
                      "truncated": not found and turn == TURNS, "info": {"guess": guess}})
        if found:
            break
    score = score_of(found)
    steps[-1]["reward"] = score
    return rollout_response(req, env_id=f"{APP_ID}:{req.env.seed}", steps=steps, score=score,
                            final={"observation": {"text": messages[-1]["content"]}, "reward": score},
                            details={"found_on_turn": found or None, "seed": req.env.seed},
                            system_prompt=SYSTEM_PROMPT)


def create_guess_taskapp(*, env_api_keys: Sequence[str], contract: str = GEN_02) -> FastAPI:
    app, authed = base_taskapp(app_id=APP_ID, title="guess-a-number task app", version="0.1.0",
                               env_api_keys=env_api_keys)

    @app.get("/task_info", dependencies=authed)
    async def task_info() -> dict[str, Any]:
        return {"taskset": {"id": APP_ID, "range": [LOW, HIGH], "max_turns": TURNS}}

    add_rollout_route(app, authed, contract, _play)
    return app
