"""``synth-tui demo``: the embedded backend and the reference task app on free loopback ports,
a demo .env with fresh keys, and the demo config; then the whole flow, headless or guided.

The folder, its keys and the servers are app/commands/demo_setup.py's: the guided demo starts
them after its first frame."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core.config.roots import project_config_roots
from app.core.errors import ExitCode, UsageError
from app.core.invocation import as_run
from app.core.launch.options import LaunchOptions, Preparation
from app.core.launch.session import LaunchSession

if TYPE_CHECKING:  # the folder and its servers come after the first frame (app/commands/demo_setup.py)
    from app.commands.demo_setup import DemoSetup


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
               "  backend and task app: stopped with the demo (any job still running stopped with them: "
               "synth-tui history lists it)\n")
    # Printed on the terminal: its command as it was run (app/core/invocation.py).
    return as_run(f"{where}\n{servers}  .env:     {setup.env_path} (mode 0600)\n  config:   {setup.config_path}")


def run_demo(args: argparse.Namespace, *, interactive: bool) -> int:
    if interactive:
        return _run_demo_tui(args)
    from app.commands.demo_setup import start_demo

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
    from app.commands.embedded_backend import record_its_jobs_stopped

    record_its_jobs_stopped(setup.backend, demo_end_note(code))


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
        from app.commands.demo_setup import start_demo  # in the worker, after the first frame

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
