"""Bounded waits for Pilot tests: workers run in threads, so tests wait for a condition, and a
hang fails the test instead of stalling the run."""

from __future__ import annotations

from collections.abc import Callable


async def wait_for(pilot, condition: Callable[[], bool], *, what: str = "condition", limit: int = 400,
                   step: float = 0.02) -> None:
    for _ in range(limit):
        if condition():
            return
        await pilot.pause(step)
    raise AssertionError(f"timed out waiting for {what}")


async def wait_until(pilot, condition: Callable[[], bool], what: str = "condition") -> None:
    """The picker and env tests' finer-grained bound (500 x 0.01 s)."""
    await wait_for(pilot, condition, what=what, limit=500, step=0.01)
