"""Bounded waits, the one copy the tests share: a condition is polled until it holds, and a
hang fails the test instead of stalling the run.

``wait_for`` / ``wait_until`` poll inside a Pilot test (workers run in threads, so tests wait
for a condition); ``wait_for_screen`` waits for a screen to be shown and built.
``poll_until`` polls from plain test code (servers, subprocesses, jobs).
``type_ahead`` queues keys at once, as a fast typist's terminal does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

from textual.app import App
from textual.screen import Screen

from widgets.compat.textual_compat import deliver_as_driver

T = TypeVar("T")
S = TypeVar("S", bound=Screen)

# poll_until's interval: quick at first, then backing off. A test polling the embedded backend
# at 50 Hz takes the GIL from the server's own thread, which then trains at half speed.
FIRST_INTERVAL_S = 0.02
MAX_INTERVAL_S = 0.2


async def wait_for(pilot, condition: Callable[[], bool], *, what: str = "condition", limit: int = 1500,
                   step: float = 0.02) -> None:
    """Until `condition()` holds; at most `limit` pauses of `step` (30 s by default, as
    wait_for_screen: a passing test never waits longer for it, a loaded machine may need it).

    Between polls the test only sleeps: the app runs in the same event loop and handles its
    messages meanwhile. ``pilot.pause`` would also post a callback to every widget of the screen
    and redraw it, 50 times a second: a tenth of the TUI tests' CPU, spent while waiting."""
    for _ in range(limit):
        if condition():
            return
        await asyncio.sleep(step)
    raise AssertionError(f"timed out waiting for {what}")


async def wait_until(pilot, condition: Callable[[], bool], what: str = "condition") -> None:
    """The picker and env tests' finer-grained bound (500 x 0.01 s)."""
    await wait_for(pilot, condition, what=what, limit=500, step=0.01)


async def wait_for_screen(pilot, screen_type: type[S], what: str | None = None, *,
                          where: Callable[[S], bool] | None = None, limit: int = 1500) -> S:
    """Wait until the active screen is a ``screen_type`` whose widgets exist, and return it.

    ``isinstance(app.screen, X)`` alone holds as soon as the screen is pushed, before it has
    composed or run its on_mount: a query then finds nothing, and a test that ends there closes
    a screen still being built. ``is_mounted`` is set once both are done. ``where`` adds what the
    test reads next (a job id, a row). The bound is 30 s (1,500 x 0.02 s): a step may wait on a
    subprocess or a loopback server, and the machine may be loaded.
    """

    def shown() -> bool:
        screen = pilot.app.screen
        return isinstance(screen, screen_type) and screen.is_mounted and (where is None or where(screen))

    try:
        await wait_for(pilot, shown, what=what or f"the {screen_type.__name__}", limit=limit)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; {what_is_shown(pilot.app)}") from None
    return pilot.app.screen


def what_is_shown(app: App) -> str:
    """The screen a wait ended on, and its text as drawn: a timeout says where the flow stopped
    (a check that failed under load, a key that went elsewhere), not only that it stopped."""
    from support.screen_text import screen_lines

    screen = app.screen
    try:
        lines = [line.rstrip() for line in screen_lines(app)]
    except Exception as exc:  # a screen being torn down: its name is still worth saying
        lines = [f"(not drawable: {type(exc).__name__})"]
    text = "\n".join(line for line in lines if line.strip())
    return f"the screen was {type(screen).__name__} (mounted: {screen.is_mounted}), showing:\n{text}"


def poll_until(fn: Callable[[], T | None], *, timeout: float = 10.0, what: str = "the condition") -> T:
    """Call fn until it returns something truthy, and return that; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    interval = FIRST_INTERVAL_S
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)
        interval = min(interval * 1.5, MAX_INTERVAL_S)


async def wait_for_process(pilot, condition: Callable[[], bool], what: str = "condition") -> None:
    """A step that waits for a subprocess (the Modal CLI's stand-in starts a Python each call):
    under a loaded parallel run that takes seconds, so the bound is 30 s (3,000 x 0.01 s)."""
    await wait_for(pilot, condition, what=what, limit=3000, step=0.01)


def type_ahead(app: App, *keys: str) -> None:
    """Keys as a fast typist or `tmux send-keys` gives them: all queued at once, as the terminal
    driver queues what it reads (Pilot.press waits for the app to be idle after each key)."""
    from textual import events

    from support.textual_compat import key_for_character

    for key in keys:
        char = key if len(key) == 1 else {"enter": "\r", "tab": "\t"}.get(key)
        event = events.Key(key_for_character(key) if len(key) == 1 and not key.isalnum() else key, char)
        event.set_sender(app)
        deliver_as_driver(app, event)
