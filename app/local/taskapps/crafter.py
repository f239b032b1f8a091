"""A second reference task app, shaped like the SDK's Crafter example rather than our gridworld.

What makes it different, on purpose: its one tool, `interact_many`, takes an *array* of
enum actions (1 to 4 a call) and is forced with `tool_choice`; the observation is the
SDK-style free text with a step counter and the recent actions echoed (which a state key must
look through); and, as the SDK's hosted-env helpers do, a 0.2 rollout in "rl" mode needs an
inference URL whose correlation id (`?cid=`) starts with `trace_` (refused with a 400 here,
where the SDK's apps fail with a 500). With `contract="0.5"` it speaks the 0.4/0.5 contract
instead (docs/rollout-contracts.md).

The game, "crafter-lite": collect wood and stone, place a table (2 wood), make a pickaxe (a
table, 1 wood, 1 stone). Making the pickaxe ends the episode with a score of 1.0 less 0.1 per
turn after the first (at least 0.3); an episode that runs out of turns scores what it got done
(0.1 per item of wood, up to 3, 0.1 for the table). An action whose need is not met is
rejected and counted. Seeds set the starting inventory.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, HTTPException

from app.local.taskapps.kit import (
    AUTH_ERRORS,
    PolicyLink,
    add_rollout_route,
    ask_policy,
    base_taskapp,
    chat_url,
    rollout_response,
)
from app.local.training.rollout_contract import GEN_02, cid_in_url

VERSION = "0.1.0"
APP_ID = "crafter-lite"
ENVIRONMENT = APP_ID  # what [rollout] env_name names (verification compares: docs/product.md#verification)
ACTIONS = ("noop", "collect_wood", "collect_stone", "place_table", "make_pickaxe", "sleep")
DEFAULT_MAX_TURNS = 10
SYSTEM_PROMPT = ("You play crafter-lite. Make a pickaxe in as few turns as possible. Each turn, call "
                 "interact_many with 1 to 4 actions.")
INTERACT_MANY = {
    "type": "function",
    "function": {
        "name": "interact_many",
        "description": "Perform a short sequence of actions.",
        "parameters": {
            "type": "object",
            "properties": {"actions": {"type": "array", "items": {"type": "string", "enum": list(ACTIONS)},
                                       "minItems": 1, "maxItems": 4}},
            "required": ["actions"],
            "additionalProperties": False,
        },
    },
}
TOOL_CHOICE = {"type": "function", "function": {"name": "interact_many"}}


@dataclass
class Game:
    seed: int
    max_turns: int
    wood: int = 0
    stone: int = 0
    table: bool = False
    pickaxe: bool = False
    turns: int = 0
    rejected: int = 0
    recent: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        start = random.Random(self.seed)
        self.wood, self.stone = start.randint(0, 1), start.randint(0, 1)

    @property
    def done(self) -> bool:
        return self.pickaxe or self.turns >= self.max_turns

    @property
    def score(self) -> float:
        if self.pickaxe:
            return max(0.3, 1.0 - 0.1 * (self.turns - 1))
        return round(0.1 * min(self.wood, 3) + (0.1 if self.table else 0.0), 3)

    def observation(self) -> dict[str, Any]:
        inventory = {"wood": self.wood, "stone": self.stone, "table": self.table, "pickaxe": self.pickaxe}
        text = (f"Inventory: wood={self.wood} stone={self.stone} table={'yes' if self.table else 'no'} "
                f"pickaxe={'yes' if self.pickaxe else 'no'}\n"
                f"Step {self.turns + 1}/{self.max_turns}\n"
                f"Recent actions: {', '.join(self.recent[-6:]) or 'none'}")
        return {"text": text, "inventory": inventory, "step": self.turns}

    def play(self, actions: Sequence[str]) -> int:
        """One turn of actions; the number rejected (unknown, or a need not met)."""
        rejected = 0
        for action in actions:
            if self.pickaxe:
                break
            if not self._apply(action):
                rejected += 1
            self.recent.append(action if isinstance(action, str) else "?")
        self.turns += 1
        self.rejected += rejected
        return rejected

    def _apply(self, action: str) -> bool:
        if action == "collect_wood":
            self.wood = min(self.wood + 1, 9)
        elif action == "collect_stone":
            self.stone = min(self.stone + 1, 9)
        elif action == "place_table" and not self.table and self.wood >= 2:
            self.wood, self.table = self.wood - 2, True
        elif action == "make_pickaxe" and self.table and self.wood >= 1 and self.stone >= 1:
            self.wood, self.stone, self.pickaxe = self.wood - 1, self.stone - 1, True
        elif action not in ("noop", "sleep"):
            return False
        return True


def create_crafter_taskapp(*, env_api_keys: Sequence[str], contract: str = GEN_02) -> FastAPI:
    app, authed = base_taskapp(app_id=APP_ID, title="crafter-lite task app", version=VERSION,
                               env_api_keys=env_api_keys)

    @app.get("/info", dependencies=authed, responses=AUTH_ERRORS)
    async def info() -> dict[str, Any]:
        return {"service": {"task": _task(), "version": VERSION}, "dataset": {"id": APP_ID, "splits": ["train"]},
                "rubrics": None, "inference": {"tool": "interact_many", "tool_choice": TOOL_CHOICE},
                "limits": {"max_turns": DEFAULT_MAX_TURNS}}

    @app.get("/task_info", dependencies=authed, responses=AUTH_ERRORS)
    async def task_info() -> dict[str, Any]:
        return {"taskset": {**_task(), "environment": ENVIRONMENT, "actions": list(ACTIONS),
                            "default_max_turns": DEFAULT_MAX_TURNS}}

    add_rollout_route(app, authed, contract, _play, check=check_correlation_id if contract == GEN_02 else None)
    return app


def _task() -> dict[str, Any]:
    return {"id": APP_ID, "name": "Crafter-lite", "version": VERSION}


def check_correlation_id(req: Any) -> None:
    """The SDK's 0.2 rule: in rl mode the inference URL must carry a cid that starts with trace_."""
    cid = cid_in_url(req.policy.config.inference_url) or ""
    if req.mode == "rl" and not cid.startswith("trace_"):
        raise HTTPException(400, "policy.config.inference_url must carry ?cid=trace_... in rl mode "
                                 f"(got {'no cid' if not cid else 'a cid without the trace_ prefix'})")


def _actions(tool_calls: list[Any]) -> list[str]:
    """The actions asked for; an answer that does not fit the tool is an empty list, as in
    the SDK's Crafter app (and every such turn is a wasted one)."""
    try:
        call = tool_calls[0]["function"]
        args = call.get("arguments") or {}
        args = json.loads(args) if isinstance(args, str) else args
        actions = args.get("actions")
    except (IndexError, KeyError, TypeError, AttributeError, ValueError):
        return []
    if call.get("name") != "interact_many" or not isinstance(actions, list) or not 1 <= len(actions) <= 4:
        return []
    return [a for a in actions if isinstance(a, str)]


async def _play(policy: PolicyLink, req: Any) -> dict[str, Any]:
    url = chat_url(req.policy.config.inference_url)
    turns = req.env.config.max_turns or req.policy.config.max_turns or DEFAULT_MAX_TURNS
    game = Game(req.env.seed, min(turns, 50))
    steps = []
    while not game.done:
        obs = game.observation()
        body = {"model": req.policy.config.model or "policy",
                "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": obs["text"]}],
                "tools": [INTERACT_MANY], "tool_choice": TOOL_CHOICE}
        tool_calls = await ask_policy(policy, url, body, f"turn {game.turns + 1}, seed {req.env.seed}")
        actions = _actions(tool_calls)
        rejected = game.play(actions)
        if not actions:  # the whole answer was unusable: a wasted turn, counted as rejected
            rejected = 1
            game.rejected += 1
        steps.append({"obs": obs, "tool_calls": tool_calls, "reward": 0.0, "done": game.done,
                      "truncated": game.done and not game.pickaxe,
                      "info": {"actions": actions, "rejected": rejected}})
    score = game.score
    if steps:
        steps[-1]["reward"] = score
    return rollout_response(req, env_id=f"{APP_ID}:{req.env.seed}", steps=steps, score=score,
                            final={"observation": game.observation(), "reward": score},
                            details={"pickaxe": game.pickaxe, "rejected_actions": game.rejected,
                                     "seed": req.env.seed},
                            system_prompt=SYSTEM_PROMPT)
