"""Press the button the message names: the right call depends only on the current message.

Each turn the user names a button from 1 to 4 (drawn from the rollout's seed) and the policy
must call `press` with that number; the tool result says whether it was right, and the next
turn's button comes in a new user message. 4 turns; score = the fraction pressed right, so
random play scores 0.25 on average. A copy task with a small vocabulary and a short prompt
(about 100 tokens an episode), for a tiny language model to learn.
"""

from __future__ import annotations

import os
import random
from typing import Any

from .episode import Episode, Game, Turn

APP_ID = "press-the-button"
BUTTONS = (1, 2, 3, 4)
TURNS = 4
SYSTEM_PROMPT = "Press the button each message names. Call press."
PRESS_TOOL = {"type": "function", "function": {
    "name": "press", "description": "Press a button.",
    "parameters": {"type": "object",
                   "properties": {"button": {"type": "integer", "minimum": BUTTONS[0], "maximum": BUTTONS[-1]}},
                   "required": ["button"], "additionalProperties": False}}}


def ask(button: int) -> str:
    return f"Press button {button}."


def _button(args: dict[str, Any] | None) -> int | None:
    value = (args or {}).get("button")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def asked_buttons() -> tuple[int, ...]:
    """The buttons the messages name: all four, or those of $CONTEXT_FREE_BUTTONS ("1" or
    "1,3"; the tool still offers 1 to 4). A tiny random-init model learns which button is
    wanted; copying the number from the message takes a model that can read
    (docs/embedded-policy.md#what-is-not-done)."""
    chosen = tuple(int(b) for b in os.environ.get("CONTEXT_FREE_BUTTONS", "").split(",") if b.strip().isdigit())
    return tuple(b for b in chosen if b in BUTTONS) or BUTTONS


def new_episode(rng: random.Random) -> Episode:
    asked = asked_buttons()
    targets = [rng.choice(asked) for _ in range(TURNS)]

    def judge(turn: int, args: dict[str, Any] | None) -> Turn:
        target, pressed = targets[turn - 1], _button(args)
        right = pressed == target
        if pressed is None:
            feedback = "No button pressed: call press with a button number."
        else:
            feedback = f"Pressed {pressed}: {'right' if right else 'wrong'}."
        last = turn == TURNS
        return Turn(feedback=feedback, reward=1.0 if right else 0.0, next_user=None if last else ask(targets[turn]),
                    done=last, info={"target": target, "pressed": pressed})

    return Episode(
        first_user=ask(targets[0]),
        judge=judge,
        score=lambda turns: sum(t.reward for t in turns) / TURNS,
        details=lambda turns: {"right": int(sum(t.reward for t in turns)), "targets": targets},
    )


GAME = Game(
    app_id=APP_ID,
    name="Press the button",
    description="Each turn names a button from 1 to 4; call press with it. Score: the fraction right.",
    system_prompt=SYSTEM_PROMPT,
    tool=PRESS_TOOL,
    tool_choice="required",
    max_turns=TURNS,
    new_episode=new_episode,
    taskset={"buttons": list(BUTTONS), "max_turns": TURNS, "random_play_score": 1 / len(BUTTONS)},
)
