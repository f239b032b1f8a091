"""Run the embedded backend or the task app on loopback: in a background thread (demo, tests,
`--backend local`) or blocking (the `synth-tui backend` / `synth-tui taskapp` commands).

Each background server is a uvicorn.Server with its own event loop in its own thread. Port 0
means a free port: we bind the socket ourselves and hand it to uvicorn, so the port is known
(and reserved) before the app is built, which lets the backend tell task apps its own URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx
import uvicorn
from fastapi import FastAPI

from app.core.api.retry import Backoff
from app.core.api.transport import ssl_context
from app.core.errors import UsageError
from app.core.paths import state_dir
from app.core.text import counted
from app.local.policies import ONE_PROCESS
from app.local.policies.base import Parallel
from app.local.server.backend import create_backend_app
from app.local.server.connections import MAX_CONNECTIONS, HeaderDeadlineProtocol
from app.local.state.store import check_store_file
from app.local.taskapps.crafter import create_crafter_taskapp
from app.local.taskapps.gridworld_app import create_taskapp
from app.local.taskapps.press import create_press_taskapp
from app.local.training.retry import SERVER_KEEPALIVE_S
from app.local.training.rollout_contract import GEN_02

START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0


def default_db_path() -> Path:
    return state_dir() / "backend.sqlite3"


class _Server(uvicorn.Server):
    """uvicorn waits for open responses before shutting down; the backend's event streams
    would never end by themselves, so the app is told first (backend.begin_shutdown)."""

    TICK_S = 0.1  # uvicorn's: how often the loop refreshes its Date header and checks for a stop

    def __init__(self, config: uvicorn.Config, before_shutdown: Callable[[], None] | None) -> None:
        super().__init__(config)
        self._before_shutdown = before_shutdown
        self._wake = asyncio.Event()
        self._wake_loop: asyncio.AbstractEventLoop | None = None

    async def main_loop(self) -> None:
        """uvicorn's loop, but a stop (:meth:`request_exit`) wakes it at once instead of at its
        next tick: every server stop, in the demo and the tests, is that much shorter."""
        self._wake_loop = asyncio.get_running_loop()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.TICK_S)
            should_exit = await self.on_tick(counter)

    def request_exit(self) -> None:
        """Stop serving, from any thread (the one that started the server calls it)."""
        self.should_exit = True
        loop = self._wake_loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already closed
                loop.call_soon_threadsafe(self._wake.set)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self._before_shutdown is not None:
            self._before_shutdown()
        await super().shutdown(sockets=sockets)


def _config(app: FastAPI, host: str, port: int) -> uvicorn.Config:
    # Idle connections outlive our clients' (app/local/training/retry.py): a client never reuses one the server
    # is closing at that moment. Late request headers and too many connections: server/connections.py.
    return uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                          lifespan="on", timeout_graceful_shutdown=3, timeout_keep_alive=SERVER_KEEPALIVE_S,
                          http=HeaderDeadlineProtocol, limit_concurrency=MAX_CONNECTIONS)


def _bind(host: str, port: int) -> socket.socket:
    # proto must be IPPROTO_TCP (not 0): asyncio only sets TCP_NODELAY on such sockets, and
    # without it every response waits ~40 ms for a delayed ACK.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def _url(host: str, port: int) -> str:
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class ServerHandle:
    """A server running in a background thread on an already bound socket.
    `with start_backend(...) as server:` or call stop()."""

    def __init__(self, name: str, app: FastAPI, sock: socket.socket) -> None:
        self.name = name
        self.host, self.port = sock.getsockname()[:2]
        self.url = _url(self.host, self.port)
        self._app = app
        self._sock = sock
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        # Set by start_backend, for a flow in this process (app/commands/embedded_backend.py).
        self.api_key: str | None = None
        self.hold_env_keys: Callable[[Sequence[str]], None] | None = None

    def start(self, probe_path: str) -> ServerHandle:
        self._server = _Server(_config(self._app, self.host, self.port),
                               getattr(self._app.state, "begin_shutdown", None))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name=f"{self.name}-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        with httpx.Client(timeout=2.0, verify=ssl_context()) as client:
            while True:
                if not self._thread.is_alive():
                    self._sock.close()
                    raise RuntimeError(f"the {self.name} on port {self.port} failed to start")
                if self._server.started:
                    try:
                        client.get(self.url + probe_path)
                        return self  # it answers
                    except httpx.TransportError:
                        pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"the {self.name} on port {self.port} did not answer "
                                       f"within {START_TIMEOUT_S:.0f}s")
                time.sleep(0.01)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        if self._server is not None and self._thread is not None:
            self._server.request_exit()
            self._thread.join(timeout)
            if self._thread.is_alive():  # a stuck connection: stop waiting for it
                self._server.force_exit = True
                self._thread.join(timeout)
        self._sock.close()

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_backend(
    *, api_key: str, db_path: Path, env_api_keys: Sequence[str], host: str = "127.0.0.1", port: int = 0,
    infra_events: bool = False, resume: bool = True, policy_kind: str = "tabular", db_elsewhere: str | None = None,
    max_jobs: int | None = None, max_rollouts: int | None = None, parallel: Parallel = ONE_PROCESS,
) -> ServerHandle:
    """``db_elsewhere``: the caller's other way out of a database that cannot be used, for its
    error (``pass --workdir DIR``); such a database stops the start here, untouched (app/local/state/store.py).
    ``max_jobs``, ``max_rollouts``: None sizes them to the machine (app/local/training/admission.py)."""
    check_store_file(db_path, elsewhere=db_elsewhere)
    sock = _bind(host, port)
    app = create_backend_app(api_key=api_key, db_path=db_path, env_api_keys=env_api_keys,
                             public_base_url=_url(host, sock.getsockname()[1]), infra_events=infra_events,
                             resume=resume, policy_kind=policy_kind, max_jobs=max_jobs, max_rollouts=max_rollouts,
                             parallel=parallel)
    handle = ServerHandle("backend", app, sock).start("/api/health")
    handle.api_key = api_key  # for a flow in this process (app/commands/embedded_backend.py)
    handle.hold_env_keys = app.state.hold_env_keys
    return handle


TASK_APPS: dict[str, Callable[..., FastAPI]] = {"gridworld": create_taskapp, "crafter-lite": create_crafter_taskapp,
                                                "press": create_press_taskapp}


def _taskapp(game: str, env_api_keys: Sequence[str], contract: str, asks: Sequence[str] | None) -> FastAPI:
    """``asks``: the press app's buttons to ask for (None: all); the other games take none."""
    extra = {} if asks is None else {"asks": tuple(asks)}
    return TASK_APPS[game](env_api_keys=env_api_keys, contract=contract, **extra)


def start_taskapp(*, env_api_keys: Sequence[str], host: str = "127.0.0.1", port: int = 0,
                  game: str = "gridworld", contract: str = GEN_02, asks: Sequence[str] | None = None,
                  chat_backoff: Backoff | None = None) -> ServerHandle:
    """A reference task app; `contract` is the rollout contract generation it speaks
    ("0.2" or "0.5", docs/rollout-contracts.md); `chat_backoff` replaces how it retries the
    policy's chat endpoint (app.local.training.retry.DEFAULT_BACKOFF)."""
    app = _taskapp(game, env_api_keys, contract, asks)
    if chat_backoff is not None:
        app.state.chat_backoff = chat_backoff
    return ServerHandle("task app", app, _bind(host, port)).start("/")


def _bind_for_serving(host: str, port: int, what: str) -> socket.socket:
    """The listening socket of a `synth-tui backend`/`taskapp` command, or a clear error."""
    if not 0 <= port <= 65535:
        raise UsageError(f"--port {port} is not a TCP port.", "Choose a port from 1 to 65535 (0 picks a free one).")
    try:
        sock = _bind(host, port)
    except socket.gaierror:
        raise UsageError(f"--host {host!r} is not an address of this machine.",
                         "Use 127.0.0.1 (this machine only) or an address from `ip addr`.") from None
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise UsageError(f"Port {port} on {host} is already in use, so the {what} cannot listen there.",
                             "Stop what is using it, or pass another --port (0 picks a free one).") from None
        raise UsageError(f"The {what} cannot listen on {host}:{port}: {exc.strerror or exc}.",
                         "Pass another --host or --port.") from None
    if host not in ("127.0.0.1", "::1", "localhost"):
        print(f"Warning: the {what} listens on {host}, beyond this machine's loopback; anyone who can reach "
              "that address can try its keys.", file=sys.stderr, flush=True)
    return sock


def serve_backend(host: str, port: int, api_key: str, env_api_keys: Sequence[str], db_path: Path,
                  infra_events: bool = False, policy_kind: str = "auto", max_jobs: int | None = None,
                  max_rollouts: int | None = None, parallel: Parallel = ONE_PROCESS) -> None:
    """Serve until Ctrl-C (blocking)."""
    check_store_file(db_path, elsewhere="pass --db PATH to use another file")
    sock = _bind_for_serving(host, port, "backend")
    bound = sock.getsockname()[1]
    app = create_backend_app(api_key=api_key, db_path=db_path, env_api_keys=env_api_keys,
                             listen_url=_url(host, bound), infra_events=infra_events, policy_kind=policy_kind,
                             max_jobs=max_jobs, max_rollouts=max_rollouts, parallel=parallel)
    limits = app.state.admission_limits
    print(f"synth-tui embedded backend on {_url(host, bound)}/api (state: {db_path}; trainer: {policy_kind}"
          f"{f' × {parallel.processes} processes' if parallel.processes > 1 else ''}; "
          f"at most {counted(limits[0], 'job')} at once"
          f"{'' if policy_kind == 'tabular' else ' (lm jobs: one per device)'}, "
          f"{counted(limits[1], 'rollout')} in flight)",
          file=sys.stderr, flush=True)
    _Server(_config(app, host, bound), app.state.begin_shutdown).run(sockets=[sock])


def serve_taskapp(host: str, port: int, env_api_keys: Sequence[str], game: str = "gridworld",
                  contract: str = GEN_02, asks: Sequence[str] | None = None) -> None:
    """Serve until Ctrl-C (blocking)."""
    app = _taskapp(game, env_api_keys, contract, asks)  # an unknown contract fails here
    sock = _bind_for_serving(host, port, "task app")
    bound = sock.getsockname()[1]
    asking = f", asking for {','.join(asks)}" if asks else ""
    print(f"synth-tui {game} task app (rollout contract {contract}{asking}) on {_url(host, bound)}", file=sys.stderr,
          flush=True)
    _Server(_config(app, host, bound), None).run(sockets=[sock])
