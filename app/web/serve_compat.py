"""textual-serve's private names the browser tabs rely on, in one place. Written against
textual-serve 1.1.3.

textual-serve 1.x offers no public hook for an app process's environment or for how the process
starts, and no public handle on the process or its task: ``AppService``'s private methods
``_build_environment`` and ``_open_app_process`` are its seams, overridden here once and given
names. tests/compat/test_textual_serve_names.py fails, naming the version this was written against,
when textual-serve changes or removes one of them.
"""

from __future__ import annotations

import asyncio
from asyncio.subprocess import PIPE, Process

from textual_serve.app_service import AppService

WRITTEN_FOR = "textual-serve 1.1.3"


class NamedSeamsAppService(AppService):
    """textual-serve's ``AppService`` whose process is made by the two methods below, which a
    subclass overrides in place of textual-serve's private ones."""

    def app_environment(self, width: int, height: int) -> dict[str, str]:
        """The app process's environment: textual-serve's (``AppService._build_environment``)."""
        return AppService._build_environment(self, width=width, height=height)

    async def start_app_process(self, environment: dict[str, str]) -> Process:
        """Start the app's process with `environment`: textual-serve's way, the command through
        the shell with stdin, stdout and stderr piped. textual-serve writes to its stdin, reads its
        stdout, and reads its stderr until that ends."""
        return await asyncio.create_subprocess_shell(self.command, stdin=PIPE, stdout=PIPE, stderr=PIPE,
                                                     env=environment)

    @property
    def app_process(self) -> Process | None:
        """The app's process, once started (``AppService._process``)."""
        return self._process

    def take_run_task(self) -> asyncio.Task[None] | None:
        """The task that runs the app's process (``AppService._task``), which this service then
        no longer waits for."""
        task, self._task = self._task, None
        return task

    async def cancel_downloads(self) -> None:
        """Cancel the app's downloads in progress (``AppService._download_manager``)."""
        await self._download_manager.cancel_app_downloads(app_service_id=self.app_service_id)

    # textual-serve's seams, overridden.

    def _build_environment(self, width: int = 80, height: int = 24) -> dict[str, str]:
        return self.app_environment(width, height)

    async def _open_app_process(self, width: int = 80, height: int = 24) -> Process:
        self._process = process = await self.start_app_process(self._build_environment(width=width, height=height))
        assert process.stdin is not None
        self._stdin = process.stdin
        return process
