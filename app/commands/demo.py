"""``synth-tui demo``: the embedded backend and the reference task app on free loopback ports,
a demo .env with fresh keys, and the demo config; then the whole flow, headless or guided.

The .env and the backend's database live in one private folder (``<state dir>/demo`` unless
``--workdir`` says otherwise) that later demos reuse with the same keys, so no new copy of
live keys is left behind on every run."""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from app.core.config.discovery import project_config_roots
from app.core.errors import ExitCode, UsageError
from app.core.invocation import as_run
from app.core.launch.options import LaunchOptions, Preparation
from app.core.launch.session import LaunchSession
from app.core.paths import open_private, private_dir, private_file, state_dir

if TYPE_CHECKING:  # the servers (FastAPI, uvicorn) load only when a demo starts them
    from app.local.servers import ServerHandle

LOCK_NAME = ".lock"


@dataclass
class DemoFolder:
    """The folder one demo uses: its own (locked) or, while another demo holds that one, a
    temporary one that is removed with its keys when the demo ends."""

    path: Path
    lock: IO[bytes]  # held open: the flock lasts until release() or the process ends
    temporary: bool = False
    busy: Path | None = None  # the folder another demo holds, when this one is temporary

    def release(self) -> None:
        """Idempotent: the servers that used the folder must be stopped first."""
        if self.temporary:
            shutil.rmtree(self.path, ignore_errors=True)
        self.lock.close()


@dataclass
class DemoSetup:
    folder: DemoFolder
    env_path: Path
    config_path: Path
    backend: ServerHandle
    task_app: ServerHandle
    reused_keys: bool = False

    def stop(self) -> None:
        """Stop both servers, then let the folder go (a temporary one is removed with its keys)."""
        for server in (self.backend, self.task_app):
            server.stop()
        self.folder.release()


def demo_config_path(cwd: Path | None = None) -> Path:
    """configs/rl/demo.toml of the checkout the demo runs in (as the README says), else the
    copy bundled with the installation."""
    for root in project_config_roots(cwd):
        candidate = root / "rl" / "demo.toml"
        if candidate.is_file():
            return candidate.resolve()
    raise UsageError("The demo config (configs/rl/demo.toml) is missing from this installation.",
                     "Reinstall synth-tui.")


def load_demo_config() -> dict[str, Any]:
    from app.core.config.toml_source import load_toml

    return load_toml(demo_config_path())


def demo_payload(config: Mapping[str, Any], task_url: str, backend_base: str = "") -> dict[str, Any]:
    """The job payload the train flow sends for a config dict (validated like any config)."""
    from app.core.config import rl as cfg  # the schema: not needed before the first frame

    validated = cfg.validate_rl_mapping(dict(config)).raise_if_invalid()
    return cfg.build_rl_payload(validated, task_url=task_url, backend_base=backend_base)


def _check_own_file(env_path: Path) -> None:
    """The demo writes its .env in place: never through a link (it would write, and chmod,
    whatever file the link points at) nor into anything but a plain file."""
    if env_path.is_symlink() or (env_path.exists() and not env_path.is_file()):
        raise UsageError(f"{env_path} is a link or not a plain file; the demo writes only a .env of its own.",
                         "Remove it (the demo makes a new one with fresh keys), or pass another --workdir.")


def demo_keys(env_path: Path) -> tuple[str, str]:
    """Fresh keys, or the keys of an earlier demo in the same folder (its database knows them)."""
    import secrets  # with hmac and OpenSSL's hashlib: in the preparation too, not before the first frame

    from app.core.env import envfile  # in the preparation, after the first frame (docs/performance.md)

    _check_own_file(env_path)
    if env_path.exists():
        private_file(env_path)  # a .env left wider by an earlier version is tightened first
        existing = envfile.EnvFile.load(env_path)
        synth, env_key = existing.get("SYNTH_API_KEY"), existing.get("ENVIRONMENT_API_KEY")
        if synth and env_key:
            return synth, env_key
    return f"sk_demo_{secrets.token_hex(16)}", secrets.token_hex(32)


def write_env(env_path: Path, synth_key: str, env_key: str, task_url: str) -> None:
    """A new demo .env (0600), or the task URL of an earlier one updated (ports change)."""
    from app.core.env import envfile

    if not env_path.exists():
        envfile.write_demo_env(env_path, {"SYNTH_API_KEY": synth_key, "ENVIRONMENT_API_KEY": env_key,
                                          "TASK_APP_URL": task_url})
        return
    existing = envfile.EnvFile.load(env_path)
    # The keys too: an earlier .env whose keys were removed gets the fresh ones (demo_keys).
    for name, value in (("SYNTH_API_KEY", synth_key), ("ENVIRONMENT_API_KEY", env_key), ("TASK_APP_URL", task_url)):
        if existing.get(name) != value:
            existing.set(name, value)
    existing.save()


def default_demo_dir() -> Path:
    return state_dir() / "demo"


def claim_demo_folder(workdir: str | None) -> DemoFolder:
    return claim_folder(Path(workdir).expanduser() if workdir else default_demo_dir(), "demo-")


def claim_folder(path: Path, temporary_prefix: str) -> DemoFolder:
    """``path``, locked for this run; if another run holds it, a fresh private folder named
    ``<temporary_prefix>…`` in the state folder.

    Two runs must never share a backend database: the demo's backend fails the jobs it finds
    running when it opens one, and those would be the other run's live jobs.
    """
    if os.path.lexists(path) and not path.is_dir():
        raise UsageError(f"{path} is not a folder; the run keeps its database and .env in a folder there.",
                         "Pass another folder (--workdir DIR for the demo), or move it away.")
    try:
        chosen = private_dir(path)
        lock = _try_lock(chosen)
    except OSError as exc:  # a folder (or a looping link) where its lock file goes; no permission
        where = exc.filename or path
        raise UsageError(f"Cannot use {path} as the run's folder: {where}: {exc.strerror or exc}.",
                         f"Pass another folder (--workdir DIR for the demo), or move {where} away ({LOCK_NAME} is "
                         f"an empty file that only marks the folder taken).") from None
    if lock is not None:
        return DemoFolder(chosen, lock)
    _remove_abandoned_temporary_folders(temporary_prefix)
    fresh = Path(tempfile.mkdtemp(prefix=temporary_prefix, dir=private_dir(state_dir())))  # mkdtemp: 0700
    lock = _try_lock(fresh)
    assert lock is not None, "a folder made a moment ago cannot be locked by anyone else"
    return DemoFolder(fresh, lock, temporary=True, busy=chosen)


def _remove_abandoned_temporary_folders(prefix: str) -> None:
    """Temporary folders whose run was killed (so never cleaned up) still hold keys: any
    whose lock nobody holds is removed."""
    for folder in state_dir().glob(f"{prefix}*"):
        # A minute old at least: one made this instant may not be locked by its demo yet.
        if folder.is_dir() and not folder.is_symlink() and time.time() - folder.stat().st_mtime > 60:
            lock = _try_lock(folder)
            if lock is not None:
                lock.close()
                shutil.rmtree(folder, ignore_errors=True)


def _try_lock(folder: Path) -> IO[bytes] | None:
    """The folder's lock file, exclusively locked; None while another process holds it."""
    handle = open_private(folder / LOCK_NAME, "ab")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    except BaseException:
        handle.close()
        raise
    return handle


def start_demo(workdir: str | None) -> DemoSetup:
    folder = claim_demo_folder(workdir)
    try:
        return _start_servers(folder)
    except BaseException:
        folder.release()
        raise


def _start_servers(folder: DemoFolder) -> DemoSetup:
    from app.local.servers import start_backend, start_taskapp  # the servers load only when used

    env_path = folder.path / ".env"
    reused = env_path.exists()
    synth_key, env_key = demo_keys(env_path)
    config_path = demo_config_path()
    task_app = start_taskapp(env_api_keys=[env_key])
    try:
        backend = start_backend(api_key=synth_key, db_path=folder.path / "backend.sqlite3", env_api_keys=[env_key],
                                # it stops with the demo: so do its jobs; the demo trains the fast stand-in
                                resume=False, policy_kind="tabular",
                                db_elsewhere="pass --workdir DIR to run the demo in another folder")
    except BaseException:
        task_app.stop()
        raise
    setup = DemoSetup(folder, env_path, config_path, backend, task_app, reused_keys=reused)
    try:
        write_env(env_path, synth_key, env_key, task_app.url)
    except BaseException:
        setup.stop()
        raise
    return setup


def demo_options(setup: DemoSetup, *, poll_interval: float = 0.5, poll_timeout: float = 600.0,
                 cwd: Path | None = None) -> LaunchOptions:
    """What the demo stands for: ``train --type rl`` with its config, .env and backend."""
    return LaunchOptions(config_paths=[str(setup.config_path)], env_files=[str(setup.env_path)],
                         backend=setup.backend.url, poll_interval=poll_interval, poll_timeout=poll_timeout,
                         cwd=cwd or Path.cwd(), embedded_backend=True)


def banner(setup: DemoSetup, *, stopped: bool = False) -> str:
    """Where the demo runs and what happens to its keys (stderr, before the flow starts); once
    it has ended (``stopped``), that its servers stopped with it: their URLs answer no more."""
    folder = setup.folder
    if folder.temporary:
        where = (f"Demo folder: {folder.path} (temporary: another demo is using {folder.busy}; this folder and "
                 f"its keys are removed when this demo exits)")
    else:
        keys = "the keys of the last demo here" if setup.reused_keys else "keys made now"
        where = f"Demo folder: {folder.path} ({keys}; the folder and its keys are kept for the next demo)"
    servers = (f"  backend:  {setup.backend.url}/api\n  task app: {setup.task_app.url}\n" if not stopped else
               "  backend and task app: stopped with the demo (a job still running stopped too: "
               "synth-tui history lists it)\n")
    # Printed on the terminal: its command as it was run (app/core/invocation.py).
    return as_run(f"{where}\n{servers}  .env:     {setup.env_path} (mode 0600)\n  config:   {setup.config_path}")


def run_demo(args: argparse.Namespace, *, interactive: bool) -> int:
    if interactive:
        return _run_demo_tui(args)
    setup = start_demo(args.workdir)
    code: int | None = None
    try:
        print(banner(setup), file=sys.stderr, flush=True)
        options = demo_options(setup, poll_interval=args.poll_interval, poll_timeout=args.poll_timeout)
        from app.headless.train import TrainRun, run_headless

        code = run_headless(TrainRun(options, stream_format=args.stream_format))
        return code
    except BrokenPipeError:  # the reader went away (| head): app.cli ends with 141
        code = ExitCode.OUTPUT_CLOSED
        raise
    except KeyboardInterrupt:
        code = ExitCode.INTERRUPTED
        raise
    finally:
        # As the TUI's quit does: a job the demo's backend still ran ends with it, and the history
        # says so (failed, and why) instead of asking a backend that is gone for ever after.
        record_demo_end(setup, code)
        setup.stop()


def demo_end_note(code: int | None) -> str:
    """Why a headless demo's unfinished job ended, by how the demo ended (its exit code)."""
    how = {ExitCode.OUTPUT_CLOSED: "the demo's output was closed (| head, | awk …)",
           ExitCode.INTERRUPTED: "the demo was interrupted"}.get(code or 0, "the demo ended")
    return f"{how} before the job did; its embedded backend stopped with the demo"


def record_demo_end(setup: DemoSetup, code: int | None) -> None:
    from app.core.launch.steps import resolve_backend
    from app.core.runs.jobs import remember, stop_backend_jobs

    backend = resolve_backend(setup.backend.url, {})[0]  # as the session recorded it (…/api)
    warning = remember(lambda history: stop_backend_jobs(history, backend, demo_end_note(code)))
    if warning:
        print(f"Warning: {warning}", file=sys.stderr, flush=True)


class DemoServers:
    """The guided demo's servers: started by the app after its first frame (:meth:`start`, in a
    worker; the picker says they are starting and waits), stopped when the app has ended. A stop
    during the start waits for it, so no server outlives the demo (docs/performance.md#first-paint)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.setup: DemoSetup | None = None
        self._lock = threading.Lock()
        self._stopped = False

    def preparation(self) -> Preparation:
        return Preparation(waiting="Starting the demo: the embedded backend and the reference task app…",
                           run=self.start, failed="The demo could not start")

    def start(self) -> tuple[LaunchOptions, str]:
        with self._lock:
            if self._stopped:
                raise UsageError("The demo was closed while its servers were starting.")
            self.setup = start_demo(self.args.workdir)
        options = demo_options(self.setup, poll_interval=self.args.poll_interval,
                               poll_timeout=self.args.poll_timeout)
        return options, f"Demo ready: backend {self.setup.backend.url}/api, task app {self.setup.task_app.url}."

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            if self.setup is not None:
                self.setup.stop()


def waiting_options(args: argparse.Namespace) -> LaunchOptions:
    """The demo's options before its servers are up: their ports are not known yet, so the
    backend is a placeholder nothing is sent to (every step waits for the servers, and their
    options replace these: LaunchSession.adopt_options)."""
    return LaunchOptions(config_paths=[str(demo_config_path())], backend="http://127.0.0.1",
                         poll_interval=args.poll_interval, poll_timeout=args.poll_timeout, embedded_backend=True)


def _run_demo_tui(args: argparse.Namespace) -> int:
    from app.tui import SynthTuiApp, run_app  # headless demos never load Textual

    servers = DemoServers(args)
    try:
        return run_app(SynthTuiApp(LaunchSession(waiting_options(args)), start="picker",
                                   preparation=servers.preparation()))
    finally:
        servers.stop()
        if servers.setup is not None:  # where the demo ran, left on the terminal after the app
            print(banner(servers.setup, stopped=True), file=sys.stderr, flush=True)
