"""``synth-tui demo``: the embedded backend and the reference task app on free loopback ports,
a demo .env with fresh keys, and the demo config; then the whole flow, headless or guided."""

from __future__ import annotations

import argparse
import secrets
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core import config as cfg
from app.core import envfile
from app.core.errors import UsageError


@dataclass
class DemoSetup:
    folder: Path
    env_path: Path
    config_path: Path
    backend: object  # app.local.servers.ServerHandle
    task_app: object

    def stop(self) -> None:
        for server in (self.backend, self.task_app):
            server.stop()


def demo_config_path() -> Path:
    for root in cfg.project_config_roots():
        candidate = root / "rl" / "demo.toml"
        if candidate.is_file():
            return candidate.resolve()
    raise UsageError("The demo config (configs/rl/demo.toml) is missing from this installation.",
                     "Reinstall synth-tui.")


def load_demo_config() -> dict[str, Any]:
    return cfg.load_toml(demo_config_path())


def demo_payload(config: Mapping[str, Any], task_url: str, backend_base: str = "") -> dict[str, Any]:
    """The job payload the train flow sends for a config dict (validated like any config)."""
    validated = cfg.validate_rl_mapping(dict(config)).raise_if_invalid()
    return cfg.build_rl_payload(validated, task_url=task_url, backend_base=backend_base)


def demo_keys(env_path: Path) -> tuple[str, str]:
    """Fresh keys, or the keys of an earlier demo in the same folder (its database knows them)."""
    if env_path.exists():
        existing = envfile.EnvFile.load(env_path)
        synth, env_key = existing.get("SYNTH_API_KEY"), existing.get("ENVIRONMENT_API_KEY")
        if synth and env_key:
            return synth, env_key
    return f"sk_demo_{secrets.token_hex(16)}", secrets.token_hex(32)


def write_env(env_path: Path, synth_key: str, env_key: str, task_url: str) -> None:
    """A new demo .env (0600), or the task URL of an earlier one updated (ports change)."""
    if not env_path.exists():
        envfile.write_demo_env(env_path, {"SYNTH_API_KEY": synth_key, "ENVIRONMENT_API_KEY": env_key,
                                          "TASK_APP_URL": task_url})
        return
    existing = envfile.EnvFile.load(env_path)
    existing.set("TASK_APP_URL", task_url)
    existing.save()


def start_demo(workdir: str | None) -> DemoSetup:
    from app.local.servers import start_backend, start_taskapp  # the servers load only when used

    folder = Path(workdir).expanduser().resolve() if workdir else Path(tempfile.mkdtemp(prefix="synth-tui-demo-"))
    folder.mkdir(parents=True, exist_ok=True)
    env_path = folder / ".env"
    synth_key, env_key = demo_keys(env_path)
    config_path = demo_config_path()
    task_app = start_taskapp(env_api_keys=[env_key])
    try:
        backend = start_backend(api_key=synth_key, db_path=folder / "backend.sqlite3", env_api_keys=[env_key])
    except BaseException:
        task_app.stop()
        raise
    setup = DemoSetup(folder, env_path, config_path, backend, task_app)
    try:
        write_env(env_path, synth_key, env_key, task_app.url)
    except BaseException:
        setup.stop()
        raise
    return setup


def train_args(setup: DemoSetup, args: argparse.Namespace) -> argparse.Namespace:
    """The train flags the demo stands for."""
    from app.cli import build_parser

    flags = build_parser().parse_args([
        "train", "--type", "rl", "--config", str(setup.config_path), "--env-file", str(setup.env_path),
        "--backend", setup.backend.url, "--poll-interval", str(args.poll_interval),
        "--poll-timeout", str(args.poll_timeout), "--stream-format", args.stream_format,
        *(["--no-tui"] if args.no_tui else []),
    ])
    flags.embedded_backend = True
    return flags


def run_demo(args: argparse.Namespace, *, interactive: bool) -> int:
    setup = start_demo(args.workdir)
    print(f"Demo folder: {setup.folder}\n  backend:  {setup.backend.url}/api\n  task app: {setup.task_app.url}\n"
          f"  .env:     {setup.env_path} (mode 0600)\n  config:   {setup.config_path}", file=sys.stderr, flush=True)
    try:
        flags = train_args(setup, args)
        if interactive:
            from app.tui import SynthTuiApp, run_app
            from app.core.session import LaunchOptions, LaunchSession

            return run_app(SynthTuiApp(LaunchSession(LaunchOptions.from_args(flags)), start="picker"))
        from app.headless import run_train

        return run_train(flags)
    finally:
        setup.stop()
