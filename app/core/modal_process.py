"""Running the ``modal`` CLI (app/core/modal.py): finding it, one call as a subprocess from an
argument list (never a shell string) with its output captured, a timeout and a cancel from
another thread, stopping it (SIGINT first, so the CLI stops its ephemeral app and container,
docs/modal.md#stopping-a-call), and a failed call as the :class:`ModalError` it means.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.util import find_spec

from app.core.modal_errors import (
    INSTALL_HINT,
    LOGIN_HINT,
    UPGRADE_HINT,
    ModalAppNotFound,
    ModalCancelled,
    ModalCommandFailed,
    ModalError,
    ModalNotInstalled,
    ModalNotLoggedIn,
    ModalSecretNotFound,
    ModalTimeout,
    apps_hint,
)
from app.core.modal_output import error_text

# After a cancel or a timeout: SIGINT first, so the CLI stops its ephemeral app and container
# (docs/modal.md#stopping-a-call), then SIGKILL if it has not exited within this grace.
STOP_GRACE_S = 5.0
_POLL_S = 0.1


@dataclass(frozen=True)
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def run_cli(command: list[str] | None, env: Mapping[str, str], args: list[str], *, timeout: float,
            cancel: threading.Event | None, what: str, stopping: str = "") -> CliResult:
    """Run ``command`` + ``args`` (None: not installed), its output captured, until it ends,
    ``timeout`` passes or ``cancel`` is set (then it is stopped: :func:`stop`)."""
    if command is None:
        raise ModalNotInstalled(f"Modal's command-line tool is not installed (needed for {what}).", INSTALL_HINT)
    try:
        process = subprocess.Popen([*command, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, env=env, text=True, encoding="utf-8",
                                   errors="replace")
    except OSError as exc:
        raise ModalNotInstalled(f"Cannot run {command[0]} ({exc.strerror or type(exc).__name__}), "
                                f"needed for {what}.", INSTALL_HINT) from None
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                stdout, stderr = process.communicate(timeout=_POLL_S)
                return CliResult(process.returncode, stdout or "", stderr or "")
            except subprocess.TimeoutExpired:
                pass
            if cancel is not None and cancel.is_set():
                stop(process)
                raise ModalCancelled(f"Stopped {what}.{stopping}")
            if time.monotonic() >= deadline:
                stop(process)
                raise ModalTimeout(f"Modal did not finish {what} within {timeout:g} s.{stopping}",
                                   "Try again (a first container start can be slow), check Modal's status "
                                   "page, or set the value in the .env instead.")
    finally:
        if process.poll() is None:  # an exception of ours, or Ctrl-C, while it ran
            stop(process)


def cli_failure(result: CliResult, command: str, *, secret: str | None = None, app: str | None = None) -> ModalError:
    """A CLI run that exited non-zero, as the ModalError its stderr says."""
    # stderr only: the CLI prints its errors there, and stdout may hold what a container printed.
    text = error_text(result.stderr)
    low = text.lower()
    if any(s in low for s in ("token missing", "modal token new", "could not authenticate", "unauthenticated",
                              "invalid token", "token validation")):
        return ModalNotLoggedIn("Modal is not logged in on this machine.", LOGIN_HINT)
    if "no such command" in low or "no such option" in low:
        return ModalCommandFailed(f"This modal CLI cannot run `{command}` as synth-tui needs: {text}",
                                  UPGRADE_HINT)
    missing = "not found" in low or "no app with name" in low or "no secret" in low
    if secret is not None and missing:
        return ModalSecretNotFound(f"Modal secret {secret} was not found: {text}",
                                   "`modal secret list` lists them.")
    if app is not None and missing:
        return ModalAppNotFound(f"Modal app {app} was not found: {text}", apps_hint())
    detail = f": {text}" if text else f" (exit {result.returncode}, nothing on stderr)"
    return ModalCommandFailed(f"`{command}` failed{detail}",
                              "Run the same `modal` command yourself to see the whole message.")


def find_modal(env: Mapping[str, str], *, use_module: bool) -> list[str] | None:
    """The command that runs the CLI: ``modal`` on the PATH of ``env``, else ``python -m modal``
    when ``use_module`` and the package is installed here; None when neither."""
    found = shutil.which("modal", path=env.get("PATH", os.defpath))
    if found:
        return [found]
    if use_module and module_installed():
        return [sys.executable, "-m", "modal"]
    return None


def module_installed() -> bool:
    """The ``modal`` package in this interpreter (the synth-tui[modal] extra), without importing it."""
    try:
        return find_spec("modal") is not None
    except (ImportError, ValueError):
        return False


def stop(process: subprocess.Popen[str]) -> None:
    """SIGINT (the CLI then stops its app and container), then SIGKILL after a grace."""
    try:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
    except (OSError, ValueError):
        pass
