"""A TCP proxy on loopback that loses some requests, for fault tests of the rollout hops.

Every `every`-th chunk a client sends (a chunk is about one HTTP request) is lost:
- "before": the connection is closed before the request reaches the server;
- "after": the server gets the request and answers, and the answer is thrown away as the
  connection is closed, so the work was done but the client never hears of it.
Clients see the same errors as when a keep-alive connection is closed under a request.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Literal

Mode = Literal["before", "after"]


class ChaosProxy:
    def __init__(self, *, every: int, mode: Mode) -> None:
        self.every = every
        self.mode = mode
        self.target: tuple[str, int] | None = None  # may be set after start (a server that needs our URL)
        self.chunks = 0
        self.lost = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"chaos-{self.port}", daemon=True)
        self._server: asyncio.AbstractServer | None = None

    def start(self) -> ChaosProxy:
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, sock=self._sock), self._loop)
        self._server = future.result(timeout=5)
        return self

    def stop(self) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def __enter__(self) -> ChaosProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _lose_this_one(self) -> bool:
        self.chunks += 1
        if self.chunks % self.every:
            return False
        self.lost += 1
        return True

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        assert self.target is not None, "set the proxy's target before sending through it"
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.close()
            return
        swallow = asyncio.Event()  # set: the next answer is thrown away with the connection

        async def upstream() -> None:
            while data := await client_reader.read(65_536):
                if self._lose_this_one():
                    if self.mode == "before":
                        return
                    swallow.set()
                server_writer.write(data)
                await server_writer.drain()

        async def downstream() -> None:
            while data := await server_reader.read(65_536):
                if swallow.is_set():
                    return
                client_writer.write(data)
                await client_writer.drain()

        tasks = [asyncio.ensure_future(upstream()), asyncio.ensure_future(downstream())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except (ConnectionError, OSError):
            pass
        finally:
            for task in tasks:
                task.cancel()
            for writer in (client_writer, server_writer):
                writer.close()
