"""What app/web/serve_compat.py takes from textual-serve is still there and behaves as the browser
tabs rely on. A failure names the textual-serve version the module was written against and the
one installed: update the module (and app/web/tab.py) to the installed textual-serve's seams."""

from __future__ import annotations

import asyncio
import inspect
from importlib.metadata import version
from typing import Any

from textual_serve.app_service import AppService
from textual_serve.download_manager import DownloadManager

from app.web import serve_compat
from app.web.serve_compat import NamedSeamsAppService


def changed(what: str) -> str:
    return (f"{what}: app/web/serve_compat.py was written against {serve_compat.WRITTEN_FOR}, "
            f"textual-serve {version('textual-serve')} is installed")


async def _nothing(*_: Any) -> None:
    return None


class FakeProcess:
    def __init__(self) -> None:
        self.stdin = object()
        self.pid = 4242


class Recording(NamedSeamsAppService):
    def __init__(self) -> None:
        super().__init__("the command", write_bytes=_nothing, write_str=_nothing, close=_nothing,
                         download_manager=DownloadManager())
        self.environments: list[dict[str, str]] = []

    def app_environment(self, width: int, height: int) -> dict[str, str]:
        return {**super().app_environment(width, height), "ADDED": "1"}

    async def start_app_process(self, environment: dict[str, str]) -> Any:
        self.environments.append(environment)
        return FakeProcess()


def test_textual_serve_starts_the_process_through_the_seams():
    for name in ("_build_environment", "_open_app_process"):
        assert list(inspect.signature(getattr(AppService, name)).parameters) == ["self", "width", "height"], \
            changed(f"AppService.{name}")
    assert "self._open_app_process(" in inspect.getsource(AppService.start), changed("AppService.start")
    assert "self._build_environment(" in inspect.getsource(AppService._open_app_process), \
        changed("AppService._open_app_process")
    assert "self._task = asyncio.create_task(self.run())" in inspect.getsource(AppService.start), \
        changed("AppService._task (the task that runs the process)")
    assert "self._process" in inspect.getsource(AppService.run), changed("AppService.run reads _process")


async def test_the_named_seams_make_the_process_textual_serve_runs():
    service = Recording()
    assert service.app_process is None and service.take_run_task() is None, changed("AppService._process, _task")
    process = await service._open_app_process(width=100, height=30)  # what AppService.start calls
    (environment,) = service.environments
    assert environment["ADDED"] == "1" and environment["COLUMNS"] == "100" and environment["ROWS"] == "30", \
        changed("AppService._build_environment")
    assert environment["TEXTUAL_DRIVER"] == "textual.drivers.web_driver:WebDriver", \
        changed("AppService._build_environment")
    assert service.app_process is process and service.stdin is process.stdin, changed("AppService._process, _stdin")
    await service.cancel_downloads()  # nothing to cancel: must not raise
    service._task = task = asyncio.create_task(_nothing())
    assert service.take_run_task() is task and service.take_run_task() is None, changed("AppService._task")
    await task
