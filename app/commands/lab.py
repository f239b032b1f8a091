"""``synth-tui lab``: a reference task app and the embedded backend on free loopback ports, their
URLs and keys written into the run's .env, then the guided flow (or headless) against them.

The README's "Train a language model" walk used to start the two servers by hand, in the
background, on ports 8000 and 8102: on a machine where those were taken, the task app's bind
failure went to its log, and the flow verified against someone else's servers (issue 37). Here
both listen on ports the OS picks, nothing is in the background, and a failure to start is an
error on the terminal. The .env (``--env-file``, else ./.env) keeps the keys it has (fresh
ones are made for a new file, 0600); TASK_APP_URL and BACKEND_BASE_URL are set to the servers'
addresses, so what the flow shows is what the file says. The servers stop when the run ends,
and a job still running with them (as with ``--backend local``, app/commands/embedded_backend.py).
docs/product.md#lab.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from contextlib import ExitStack
from pathlib import Path

from app.core.env import envfile
from app.core.env.discovery import user_path
from app.core.errors import UsageError
from app.core.paths import private_file, state_dir

DEFAULT_ENV = ".env"


def lab_env_path(args: argparse.Namespace) -> Path:
    """The one .env the lab reads its keys from and writes its URLs into."""
    files = list(getattr(args, "env_file", None) or [])
    if len(files) > 1:
        raise UsageError("synth-tui lab writes its servers' URLs into one .env; several --env-file were given.",
                         "Pass one --env-file PATH (or none: ./.env).")
    path = user_path(files[0] if files else DEFAULT_ENV)
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise UsageError(f"{path} is a link or not a plain file; the lab writes only a .env of its own.",
                         "Pass another --env-file PATH (a new one gets fresh keys).")
    return path


def lab_keys(env_path: Path) -> tuple[str, str]:
    """The .env's SYNTH_API_KEY and ENVIRONMENT_API_KEY, or fresh ones for those it lacks."""
    existing = envfile.EnvFile.load(env_path) if env_path.exists() else None
    synth = existing.get("SYNTH_API_KEY") if existing else None
    env_key = existing.get("ENVIRONMENT_API_KEY") if existing else None
    return synth or f"sk_lab_{secrets.token_hex(16)}", env_key or secrets.token_hex(32)


def write_lab_env(env_path: Path, values: dict[str, str]) -> None:
    """A new .env (0600) with ``values``, or those values set in the existing one (every other
    line kept), made private first."""
    if not env_path.exists():
        envfile.write_demo_env(env_path, values)
        return
    private_file(env_path)
    existing = envfile.EnvFile.load(env_path)
    for name, value in values.items():
        if existing.get(name) != value:
            existing.set(name, value)
    existing.save()


def _parallel(args: argparse.Namespace):  # -> Parallel; the servers' modules load only here
    """--processes N: the lm policy data-parallel, as `synth-tui backend --processes N`."""
    from app.local.parallel.launch import check_flags, launch_setup
    from app.local.policies.base import Parallel

    processes = args.processes
    policy_kind = args.policy_kind or "auto"
    if processes > 1 and policy_kind == "auto":
        policy_kind = "lm"  # several processes train the language model only
    refused = check_flags(policy_kind, processes, None, None)
    if refused:
        raise UsageError(f"{refused}.", "synth-tui lab --trainer lm --processes N; docs/scaling.md")
    parallel = Parallel(processes, None, None, None)
    launch_setup(parallel)
    return policy_kind, parallel


def start_lab(args: argparse.Namespace, stack: ExitStack) -> tuple[Path, object, object]:
    """The servers started (each stopped by ``stack``) and the .env written: (.env, backend, task app)."""
    from app.commands.demo_setup import claim_folder
    from app.local.servers import start_backend, start_taskapp

    if args.asks and args.game != "press":
        raise UsageError(f"--asks chooses the press task app's buttons; --game {args.game} has none.",
                         "Pass --game press with it, or leave --asks out.")
    env_path = lab_env_path(args)
    synth_key, env_key = lab_keys(env_path)
    policy_kind, parallel = _parallel(args)
    folder = claim_folder(state_dir() / "lab", "lab-")
    stack.callback(folder.release)
    task_app = start_taskapp(env_api_keys=[env_key], game=args.game, asks=args.asks)
    stack.callback(task_app.stop)
    backend = start_backend(api_key=synth_key, db_path=folder.path / "backend.sqlite3", env_api_keys=[env_key],
                            resume=False, policy_kind=policy_kind, parallel=parallel)
    from app.commands.embedded_backend import stop_recording_its_jobs

    stack.callback(stop_recording_its_jobs, backend)
    write_lab_env(env_path, {"SYNTH_API_KEY": synth_key, "ENVIRONMENT_API_KEY": env_key,
                             "TASK_APP_URL": task_app.url, "BACKEND_BASE_URL": backend.url})
    processes = f" × {parallel.processes} processes" if parallel.processes > 1 else ""
    print(f"Lab (it stops when this run ends):\n  backend:  {backend.url}/api (trainer: {policy_kind}{processes}; "
          f"state: {folder.path})\n  task app: {task_app.url} ({args.game}"
          f"{', asking for ' + ','.join(args.asks) if args.asks else ''})\n"
          f"  .env:     {env_path} (mode 0600; TASK_APP_URL and BACKEND_BASE_URL set to these)",
          file=sys.stderr, flush=True)
    return env_path, backend, task_app


def lab_flags(args: argparse.Namespace, env_path: Path, backend, task_app) -> argparse.Namespace:
    """The run's flags, pointed at the lab's servers: its backend and key (as --backend local
    hands them over), its task app, its .env."""
    from app.commands.embedded_backend import with_backend

    flags = with_backend(args, backend)
    flags.env_file = [str(env_path)]
    flags.task_url = task_app.url
    flags.policy_kind = None  # chosen for the lab's backend already
    flags.backend_key_origin = "lab"  # the key's source reads "made by lab"
    return flags
