"""``synth-tui backend`` and ``synth-tui taskapp``: the embedded servers as commands, with
their keys from the shell or an --env-file (never from a flag's value if it can be helped:
a command line is readable by every user of the machine); and ``synth-tui tiny-model``, a
model for trying the backend's `lm` policy without the Hugging Face hub."""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections import ChainMap
from collections.abc import Mapping
from pathlib import Path

from app.core.env import envfile
from app.core.env.discovery import user_path
from app.core.errors import INTERRUPTED, ExitCode, MissingSecretsError, SynthTuiError, UsageError
from app.core.invocation import as_run


def run_backend_server(args: argparse.Namespace) -> int:
    from app.local.parallel.launch import check_flags, launch_setup
    from app.local.policies.base import Parallel
    from app.local.servers import default_db_path, serve_backend

    policy_kind, processes = getattr(args, "policy_kind", "auto"), getattr(args, "processes", 1)
    config, vllm_server = getattr(args, "accelerate_config", None), getattr(args, "vllm_server", None)
    colocate = getattr(args, "vllm_colocate", None)
    if (processes > 1 or vllm_server or colocate is not None) and policy_kind == "auto":
        policy_kind = "lm"  # several processes or vLLM train the language model only: auto has nothing to choose
    refused = check_flags(policy_kind, processes, config, vllm_server, colocate)
    if refused:
        raise UsageError(f"{refused}.", "synth-tui backend --trainer lm --processes N [--accelerate-config FILE] "
                                        "[--vllm-server URL | --vllm-colocate [FRACTION]]; docs/scaling.md")
    shared = getattr(args, "shared_dir", None)
    parallel = Parallel(processes, str(user_path(config)) if config else None, vllm_server,
                        str(user_path(shared)) if shared else None, vllm_colocate=colocate)
    launch_setup(parallel)  # the config file's content and the GPU checks, at start (exit 2 with the fix)
    _warn_keys_in_argv(args)
    sources = _key_sources(args.env_file)
    api_key = args.api_key or sources.get("SYNTH_API_KEY")
    if not api_key:
        raise MissingSecretsError(
            f"The backend needs SYNTH_API_KEY (the key its clients will send); none was found in "
            f"{_where_keys_were_sought(args.env_file)}.",
            "export SYNTH_API_KEY=<key> before starting it, or put SYNTH_API_KEY=<key> in a .env file "
            "(chmod 600) and pass --env-file PATH.")
    serve_backend(args.host, args.port, api_key, _env_keys(args, sources),
                  user_path(args.db) if args.db else default_db_path(),
                  infra_events=getattr(args, "infra_events", False), policy_kind=policy_kind,
                  max_jobs=getattr(args, "max_jobs", None), max_rollouts=getattr(args, "max_rollouts", None),
                  parallel=parallel)
    return ExitCode.OK


def _key_sources(env_file: str | None) -> Mapping[str, str]:
    """Where a server's keys are looked up: the shell's variables win over the --env-file's."""
    shell = {name: value for name, value in os.environ.items() if value}
    return ChainMap(shell, _env_file_values(env_file))


def _env_file_values(env_file: str | None) -> dict[str, str]:
    """The non-empty values of --env-file; a file that is missing or unreadable is a usage error."""
    if not env_file:
        return {}
    path = user_path(env_file)
    try:
        loaded = envfile.EnvFile.load(path)
    except SynthTuiError as exc:
        raise UsageError(exc.message, exc.hint) from None
    if not loaded.exists:
        raise UsageError(f"--env-file {path} does not exist.",
                         "Check the path, or leave --env-file out to take the keys from the shell.")
    bad_lines = [str(line.lineno) for line in loaded.lines if line.error]
    if bad_lines:  # the line's text may be a key, so only its number is told
        which = f"line {bad_lines[0]} is" if len(bad_lines) == 1 else f"lines {', '.join(bad_lines)} are"
        raise UsageError(f"Cannot parse --env-file {path}: {which} not KEY=value.",
                         "Write one KEY=value a line, and close every quote you open; then start again.")
    _warn_if_others_can_read(path)
    return {name: value for name, value in loaded.values.items() if value}


def _warn_if_others_can_read(path: Path) -> None:
    info = path.stat()
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o077:
        # chmod is advice for the user's own file only (docs/hardening.md#8)
        fix = f"run: chmod 600 {path}" if info.st_uid == os.getuid() else \
            "it belongs to another user: copy the keys into a file of your own (chmod 600)"
        print(f"Warning: {path} holds keys but other users of this machine can open it (mode {mode:04o}); {fix}",
              file=sys.stderr, flush=True)


def _where_keys_were_sought(env_file: str | None) -> str:
    return f"the shell or {user_path(env_file)}" if env_file else "the shell (no --env-file given)"


# A flag's value is in /proc/<pid>/cmdline, which every local user can read (ps shows it).
_ARGV_KEY_FLAGS = {
    "api_key": ("--api-key", "SYNTH_API_KEY"),
    "env_key": ("--env-key", "ENVIRONMENT_API_KEY (more keys: ENVIRONMENT_API_KEY_ALIASES=key1,key2)"),
}


def _warn_keys_in_argv(args: argparse.Namespace) -> None:
    """One line per key flag used; the key itself is never printed."""
    for attribute, (flag, variable) in _ARGV_KEY_FLAGS.items():
        if getattr(args, attribute, None):
            print(f"Warning: {flag} puts the key in the command line, which every user of this machine can "
                  f"read with ps; set {variable} in the environment or in a .env file passed with "
                  f"--env-file PATH instead.", file=sys.stderr, flush=True)


def _env_keys(args: argparse.Namespace, sources: Mapping[str, str]) -> list[str]:
    """--env-key values, else ENVIRONMENT_API_KEY and the comma-separated ENVIRONMENT_API_KEY_ALIASES."""
    if args.env_key:
        return list(args.env_key)
    candidates = [sources.get("ENVIRONMENT_API_KEY", ""), *sources.get("ENVIRONMENT_API_KEY_ALIASES", "").split(",")]
    return list(dict.fromkeys(key.strip() for key in candidates if key.strip()))


def run_ranks_host(args: argparse.Namespace) -> int:
    """``synth-tui ranks-host``: this machine's ranks of a multi-machine backend's lm jobs."""
    from app.local.parallel.hosts import RanksHost, wait_forever_until_signalled

    shared = user_path(args.shared_dir)
    if not shared.is_dir():
        raise UsageError(f"--shared-dir {shared} is not a folder here.",
                         "Mount the backend's --shared-dir at the same path on this machine, then start again.")
    if wait_forever_until_signalled(RanksHost(shared, args.machine_rank, args.host,
                                              say=lambda line: print(line, flush=True))):
        print(f"\n{INTERRUPTED}", file=sys.stderr, flush=True)
        return ExitCode.INTERRUPTED
    return ExitCode.OK


def run_taskapp_server(args: argparse.Namespace) -> int:
    from app.local.servers import serve_taskapp

    if args.asks and args.game != "press":
        raise UsageError(f"--asks chooses the press task app's buttons; --game {args.game} has none.",
                         "Pass --game press with it, or leave --asks out.")
    _warn_keys_in_argv(args)
    sources = _key_sources(args.env_file)
    env_keys = _env_keys(args, sources)
    if not env_keys:
        # A task app without a key answers 503 to every authenticated call (docs/wire-contract.md#task-app-auth).
        print(f"Warning: no ENVIRONMENT_API_KEY found in {_where_keys_were_sought(args.env_file)}; "
              "every authenticated call will answer 503.", file=sys.stderr, flush=True)
    serve_taskapp(args.host, args.port, env_keys, args.game, contract=args.contract, asks=args.asks)
    return ExitCode.OK


def run_tiny_model(args: argparse.Namespace) -> int:
    """Write the tiny model into a new or empty folder; says where and what it is for."""
    from app.core.config.models import LOCAL_PATH_PREFIXES
    from app.local.policies import trainer_extra_missing

    folder = user_path(args.folder)
    missing = trainer_extra_missing()
    if missing is not None:
        raise UsageError(f"Cannot build the tiny model: {missing}.", "Install it, then run this again.")
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise UsageError(f"{folder} is {'not empty' if folder.is_dir() else 'not a folder'}; the tiny model is "
                         "written only into a new or empty folder.", "Pass another DIR.")
    from transformers.utils import logging as transformers_logging

    from app.local.policies.lm.tiny_model import build_tiny_qwen3

    transformers_logging.disable_progress_bar()  # "Writing model shards" for a file of half a megabyte
    build_tiny_qwen3(folder, seed=args.seed)
    base = args.folder if args.folder.startswith(LOCAL_PATH_PREFIXES) else f"./{args.folder}"
    print(as_run(f"Wrote a tiny Qwen3-architecture model (random weights, about 140k parameters) to {folder}.\n"
                 "It is for trying the lm policy, not a model to use: with the press task app asking for A "
                 "(`synth-tui lab --game press --asks A --trainer lm --config configs/rl/lm_press.toml --env-file "
                 "lm.env`), it learns to press A within a few steps (README: Train a language model).\n"
                 f'A config trains it with [model] base = "{base}" (a path from where the backend runs).'))
    return ExitCode.OK
