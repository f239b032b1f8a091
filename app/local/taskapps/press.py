"""The press task app: "Press C." → press(label="C"), context-free, for trying the `lm` policy.

`synth-tui taskapp --game press` serves it (configs/rl/lm_press.toml trains on it); the `lm`
policy's tests and benchmarks train on it too. The right call depends only on the latest
observation (the label named in it), so a tiny model trained from random weights
(app/local/policies/lm/tiny_model.py) can learn it in a minute of CPU (docs/embedded-policy.md). Each
episode has TURNS turns, each naming a label drawn from the episode's seed; the score is the
fraction pressed right (random play scores 0.25). The feedback and the next label come back as
the tool result. Built on app/local/taskapps/kit.py like tests/local/guess_taskapp.py.

`asks` narrows the labels the app asks for (the tool still offers all four; `--asks` on the
command line). With one label the tiny random-init model learns it in a few steps; with all
four it must learn to copy the label from the observation, which it did not in 40 steps
(docs/embedded-policy.md#what-is-not-done).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI

from app.local.taskapps.kit import (
    PolicyLink,
    add_rollout_route,
    ask_policy,
    base_taskapp,
    chat_url,
    first_call_argument,
    rollout_response,
)
from app.local.training.rollout_contract import GEN_02

APP_ID = "press-button"
ENVIRONMENT = APP_ID  # what [rollout] env_name names (verification compares: docs/product.md#verification)
LABELS = ("A", "B", "C", "D")
TURNS = 2
SYSTEM_PROMPT = "Press the button the user names. Call press."
PRESS_TOOL = {"type": "function", "function": {
    "name": "press", "description": "Press a button.",
    "parameters": {"type": "object", "properties": {"label": {"type": "string", "enum": list(LABELS)}},
                   "required": ["label"], "additionalProperties": False}}}
TOOL_CHOICE = {"type": "function", "function": {"name": "press"}}


def _label(tool_calls: list[Any]) -> str | None:
    label = first_call_argument(tool_calls, "label")
    return label if isinstance(label, str) and label in LABELS else None


async def _play(policy: PolicyLink, req: Any, asks: Sequence[str]) -> dict[str, Any]:
    url = chat_url(req.policy.config.inference_url)
    rng = random.Random(req.env.seed)
    targets = [rng.choice(list(asks)) for _ in range(TURNS)]
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT},
                                      {"role": "user", "content": f"Press {targets[0]}."}]
    steps, right = [], 0
    for turn, target in enumerate(targets, start=1):
        body = {"model": req.policy.config.model or "policy", "messages": messages, "tools": [PRESS_TOOL],
                "tool_choice": TOOL_CHOICE}
        obs = {"text": messages[-1]["content"]}
        tool_calls = await ask_policy(policy, url, body, f"turn {turn}, seed {req.env.seed}")
        pressed = _label(tool_calls)
        right += pressed == target
        said = ("Right." if pressed == target else "Wrong.") + (
            f" Press {targets[turn]}." if turn < TURNS else "")
        messages = [*messages, {"role": "assistant", "content": None, "tool_calls": tool_calls},
                    {"role": "tool", "tool_call_id": (tool_calls or [{}])[0].get("id", ""), "content": said}]
        steps.append({"obs": obs, "tool_calls": tool_calls, "reward": float(pressed == target),
                      "done": turn == TURNS, "truncated": False, "info": {"pressed": pressed, "target": target}})
    score = right / TURNS
    return rollout_response(req, env_id=f"{APP_ID}:{req.env.seed}", steps=steps, score=score,
                            final={"observation": {"text": messages[-1]["content"]}, "reward": score},
                            details={"right": right, "seed": req.env.seed}, system_prompt=SYSTEM_PROMPT)


def create_press_taskapp(*, env_api_keys: Sequence[str], contract: str = GEN_02,
                         asks: Sequence[str] = LABELS) -> FastAPI:
    app, authed = base_taskapp(app_id=APP_ID, title="press-a-button task app", version="0.1.0",
                               env_api_keys=env_api_keys)

    @app.get("/task_info", dependencies=authed)
    async def task_info() -> dict[str, Any]:
        return {"taskset": {"id": APP_ID, "environment": ENVIRONMENT, "labels": list(LABELS), "asks": list(asks),
                            "max_turns": TURNS}}

    async def play(policy: PolicyLink, req: Any) -> dict[str, Any]:
        return await _play(policy, req, asks)

    add_rollout_route(app, authed, contract, play)
    return app
