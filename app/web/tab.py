"""One browser tab's process (docs/browser.md#one-process-a-tab).

textual-serve's ``AppService`` speaks Textual's web-driver protocol with the child; this
subclass (through app/web/serve_compat.py) changes how the child starts and how it ends:

- no shell and no secret on its command line: ``python -P -m app.web.child COMMAND...``
  (the tab's command, checked by ``app.web.command``); keys reach it only through the
  environment it inherits, as they reach ``synth-tui`` on a terminal;
- its own process group, so that ending the tab can reach anything it started; its stderr is
  the server's;
- ``close`` does not wait for ever: the web driver's quit, then SIGTERM, then SIGKILL, each
  after a bounded wait (textual-serve's own ``stop`` waits until the child has quit).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence
from typing import Any

from app.core.processes import signal_group  # the child leads its own group: its pid is the group's
from app.web.serve_compat import NamedSeamsAppService

# Set in every tab's environment: the app's "attach again" lines name `synth-tui serve attach`.
SERVE_ENV = "SYNTH_TUI_SERVE"
QUIT_GRACE = 10.0  # the app's own exit: a demo stops its servers and removes a temporary folder
TERM_GRACE = 5.0


def child_argv(command: Sequence[str]) -> list[str]:
    """The tab's process: this interpreter, without the working directory on sys.path (-P: a
    folder named like a module there must not replace ours)."""
    return [sys.executable, "-P", "-m", "app.web.child", *command]


FRAME_BYTES = 1024


class TabSession(NamedSeamsAppService):
    """One browser tab's app process. textual-serve 1.x offers no public hook for a tab's
    environment or its process: serve_compat names its two private seams, overridden below."""

    def __init__(self, command: Sequence[str], **kwargs: Any) -> None:
        self.argv = child_argv(command)
        self.ended_by = "itself"  # or what close() needed: quit, SIGTERM, SIGKILL
        self.page_focused = False
        self.app_drew = False
        super().__init__(" ".join(self.argv), **kwargs)  # the text is only a label there

    # Textual's web driver blurs the app as it starts (a queued AppBlur) and waits for the page to
    # say it has focus. A page that said so before that blur ran was overruled by it: the app
    # stayed blurred, and its footer, which skips key changes while blurred, stayed empty. So the
    # page's focus is held until the app's first frame (its first output of FRAME_BYTES or more;
    # the driver's own set-up writes are a few escape sequences), then passed on.

    async def focus(self) -> None:
        self.page_focused = True
        if self.app_drew:
            await super().focus()

    async def blur(self) -> None:
        self.page_focused = False
        if self.app_drew:
            await super().blur()

    async def on_data(self, payload: bytes) -> None:
        await super().on_data(payload)
        if not self.app_drew and len(payload) >= FRAME_BYTES:
            self.app_drew = True
            if self.page_focused:
                await super().focus()

    def app_environment(self, width: int, height: int) -> dict[str, str]:
        environment = super().app_environment(width, height)
        environment[SERVE_ENV] = "1"
        return environment

    async def start_app_process(self, environment: dict[str, str]) -> asyncio.subprocess.Process:
        # stderr is the server's own: what the tab's process says (why it could not start, where
        # a demo ran) reaches the server's terminal as it is written. textual-serve would collect
        # it and print it when the process ends, losing the last lines to a race; it is given a
        # stream that has ended instead.
        process = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=None,
            env=environment, start_new_session=True)
        process.stderr = asyncio.StreamReader()
        process.stderr.feed_eof()
        return process

    @property
    def pid(self) -> int | None:
        return self.app_process.pid if self.app_process is not None else None

    async def close(self) -> None:
        """End the tab's process and whatever it started; idempotent, bounded in time."""
        process = self.app_process
        if process is None:
            return
        if process.returncode is None:
            self.ended_by = "quit"
            await self._ask_to_quit()
            if not await _exited(process, QUIT_GRACE):
                self.ended_by = "SIGTERM"
                signal_group(process.pid, signal.SIGTERM)
                if not await _exited(process, TERM_GRACE):
                    self.ended_by = "SIGKILL"
                    signal_group(process.pid, signal.SIGKILL)
                    await process.wait()
        # Anything the child started in its group and left behind (it should leave nothing).
        signal_group(process.pid, signal.SIGKILL)
        await self.cancel_downloads()
        task = self.take_run_task()
        if task is not None:
            try:
                await asyncio.wait_for(task, TERM_GRACE)
            except (TimeoutError, asyncio.CancelledError):
                task.cancel()

    async def _ask_to_quit(self) -> None:
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):
            await asyncio.wait_for(self.send_meta({"type": "quit"}), TERM_GRACE)


async def _exited(process: asyncio.subprocess.Process, timeout: float) -> bool:
    try:
        await asyncio.wait_for(process.wait(), timeout)
    except TimeoutError:
        return False
    return True
