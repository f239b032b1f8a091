"""``--backend local``: the embedded backend inside this process, for one run.

It is what a user has when the hosted service offers no RL jobs (docs/compatibility.md): the
same API on a free loopback port, trained by app/local's RL loop, with its state in
``<state dir>/local`` (a temporary folder while another run holds that one). It gets a fresh
key of its own, so SYNTH_API_KEY is not needed, and it is handed the ENVIRONMENT_API_KEY in
memory when the flow has one. It stops when the run ends, and a job still running with it
(the next start of that backend marks such a job failed).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from app.core.errors import UsageError
from app.core.paths import state_dir

LOCAL = "local"


def wants_embedded_backend(args: argparse.Namespace) -> bool:
    return str(getattr(args, "backend", None) or "").strip().lower() == LOCAL


def refuse_policy_kind_without_embedded(args: argparse.Namespace) -> None:
    """--trainer chooses what the embedded backend of this run trains; a backend elsewhere chose already."""
    if getattr(args, "policy_kind", None) and not wants_embedded_backend(args):
        raise UsageError("--trainer chooses what the embedded backend started by --backend local trains; this run "
                         "uses another backend.",
                         "Pass --backend local with it, or start that backend with `synth-tui backend --trainer ...`.")


def refuse_embedded_attach(args: argparse.Namespace, *, to: str = "attach to") -> None:
    """A job of an embedded backend ends with the process that ran it: nothing to attach to
    (``to``: what the command would do with earlier jobs, e.g. "list" for `synth-tui jobs`)."""
    if wants_embedded_backend(args):
        raise UsageError(f"--backend local starts a new embedded backend for a `train` run; it has no earlier jobs "
                         f"to {to} (each stops with the run that started it).",
                         "Pass --backend http://HOST:PORT of a backend that keeps running, e.g. one started with "
                         "`synth-tui backend`.")


def run_with_embedded_backend(args: argparse.Namespace, run: Callable[[argparse.Namespace], int]) -> int:
    """Start the embedded backend, run the flow against it, stop it."""
    # The servers (FastAPI, uvicorn) and the demo's folder claim load only when used: every
    # command asks wants_embedded_backend first, before its first screen (docs/performance.md).
    import secrets

    from app.commands.demo_setup import claim_folder
    from app.local.servers import start_backend

    folder = claim_folder(state_dir() / "local", "local-")
    try:
        backend = start_backend(api_key=f"sk_local_{secrets.token_hex(16)}",
                                db_path=folder.path / "backend.sqlite3", env_api_keys=[], resume=False,
                                policy_kind=getattr(args, "policy_kind", None) or "auto")
        try:
            print(f"Embedded backend: {backend.url}/api (state: {folder.path}; it stops when this run ends)",
                  file=sys.stderr, flush=True)
            return run(with_backend(args, backend))
        finally:
            stop_recording_its_jobs(backend)
    finally:
        folder.release()


def stop_recording_its_jobs(backend) -> None:
    """Stop an embedded backend (``backend``: a ServerHandle), its unfinished jobs recorded
    first (:func:`record_its_jobs_stopped`)."""
    try:
        record_its_jobs_stopped(backend)
    finally:
        backend.stop()


def record_its_jobs_stopped(backend, why: str | None = None) -> None:
    """Each job an embedded backend (``backend``: a ServerHandle) that stops with its run still
    ran, recorded in the run history as cancelled with why (EMBEDDED_STOPPED by default), as the
    TUI's quit does: the interrupted run said so, and no job stays "running?" in `synth-tui
    history`, asking a backend that is gone."""
    from app.core.api.backend_url import resolve_backend
    from app.core.runs.jobs import EMBEDDED_STOPPED, remember, stop_backend_jobs

    base = resolve_backend(backend.url, {})[0]  # as the session recorded it (…/api)
    warning = remember(lambda history: stop_backend_jobs(history, base, why or EMBEDDED_STOPPED))
    if warning:
        print(f"Warning: {warning}", file=sys.stderr, flush=True)


def with_backend(args: argparse.Namespace, backend) -> argparse.Namespace:
    """The flags of the run, pointed at the embedded backend (``backend``: a ServerHandle)."""
    flags = argparse.Namespace(**vars(args))
    flags.backend = backend.url
    flags.embedded_backend = True
    flags.backend_key = backend.api_key
    flags.hold_env_keys = backend.hold_env_keys
    return flags
