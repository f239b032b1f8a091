"""Guess a number from 1 to 8 with higher/lower feedback, on synth-ai 0.5.0's framework.

The same game and scoring as tests/local/guess_taskapp.py (built on our kit): the feedback
comes back as the tool result of the guess before, so the latest message is what a policy must
key on. Found on turn t of 4 scores 1 - 0.25 (t - 1); not found, 0. Random guesses score
about 0.28.
"""

from __future__ import annotations

import random
from typing import Any

from .episode import Episode, Game, Turn
from .guess_rules import (
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


def _number(args: dict[str, Any] | None) -> int | None:
    value = (args or {}).get("number")
    ok = isinstance(value, int) and not isinstance(value, bool) and LOW <= value <= HIGH
    return value if ok else None


def new_episode(rng: random.Random) -> Episode:
    secret = rng.randint(LOW, HIGH)

    def judge(turn: int, args: dict[str, Any] | None) -> Turn:
        guess = _number(args)
        found = guess == secret
        return Turn(feedback=feedback(guess, secret), reward=score_of(turn) if found else 0.0,
                    done=found or turn == TURNS, info={"guess": guess})

    def found_on(turns: list[Turn]) -> int | None:
        return len(turns) if turns and turns[-1].info["guess"] == secret else None

    return Episode(
        first_user=FIRST_USER,
        judge=judge,
        score=lambda turns: score_of(found_on(turns)),
        details=lambda turns: {"found_on_turn": found_on(turns)},
    )


GAME = Game(
    app_id=APP_ID,
    name="Guess the number",
    description=f"Find a secret number from {LOW} to {HIGH} with higher/lower feedback, in at most {TURNS} guesses.",
    system_prompt=SYSTEM_PROMPT,
    tool=GUESS_TOOL,
    tool_choice=TOOL_CHOICE,
    max_turns=TURNS,
    new_episode=new_episode,
    taskset={"range": [LOW, HIGH], "max_turns": TURNS},
)
