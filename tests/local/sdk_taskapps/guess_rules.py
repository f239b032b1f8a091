"""The guess-a-number game's rules, shared by the test task app built on our kit
(tests/local/guess_taskapp.py) and the one built on synth-ai 0.5.0's framework (guess_number.py):
the same prompt, tool, feedback and scoring. No imports: the synth-ai app's Python has neither
our package nor our test helpers."""

from __future__ import annotations

APP_ID = "guess-number"
LOW, HIGH, TURNS = 1, 8, 4
SYSTEM_PROMPT = f"Find the secret number from {LOW} to {HIGH} in as few guesses as possible. Call guess."
FIRST_USER = f"Guess the number from {LOW} to {HIGH}."
GUESS_TOOL = {"type": "function", "function": {
    "name": "guess", "description": "Guess the secret number.",
    "parameters": {"type": "object", "properties": {"number": {"type": "integer", "minimum": LOW, "maximum": HIGH}},
                   "required": ["number"], "additionalProperties": False}}}
TOOL_CHOICE = {"type": "function", "function": {"name": "guess"}}


def feedback(guess: int | None, secret: int) -> str:
    if guess is None:
        return "That was not a guess: call guess with a number."
    if guess < secret:
        return f"{guess} is too low: the number is higher."
    if guess > secret:
        return f"{guess} is too high: the number is lower."
    return f"{guess} is right."


def score_of(found_on: int | None) -> float:
    """Found on turn t of 4: 1 - 0.25 (t - 1); not found: 0."""
    return 1.0 - 0.25 * (found_on - 1) if found_on else 0.0
