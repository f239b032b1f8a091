"""The launch steps shared by the headless command and the TUI: choose the config and the
.env, resolve the secrets and the backend, and build the payload. No printing, no Textual."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.core import config as cfg
from app.core import envfile
from app.core.client import backend_from_env, ensure_api_base
from app.core.errors import MissingSecretsError, UsageError


def new_idempotency_key() -> str:
    return str(uuid.uuid4())


@dataclass
class EnvChoice:
    """The .env in use and how it was chosen (flag, demo state, discovery or none)."""

    path: Path | None
    how: str
    candidates: list[Path] = field(default_factory=list)


def choose_env_file(env_files: Sequence[str], *, cwd: Path, config_path: Path | None) -> EnvChoice:
    """``--env-file`` first (only the first is read, as the SDK), then ``~/.synth-ai/demo.json``,
    then discovery. Discovered candidates are returned for a picker; the first is proposed."""
    if env_files:
        path = Path(env_files[0]).expanduser()
        if not path.exists():
            raise UsageError(f"Env file not found: {path}", "Pass an existing file with --env-file.")
        others = [Path(p).expanduser() for p in env_files[1:]]
        return EnvChoice(path.resolve(), "flag", [path.resolve(), *others])
    demo = envfile.demo_state_env_path()
    if demo is not None and demo.exists():
        return EnvChoice(demo.resolve(), "demo state (~/.synth-ai/demo.json)", [demo.resolve()])
    candidates = envfile.discover_env_files(cwd, config_path=config_path)
    if candidates:
        return EnvChoice(candidates[0], "discovered", candidates)
    return EnvChoice(None, "none", [])


def resolve_secrets(env: envfile.EnvFile | None, *, shell: Mapping[str, str] | None = None,
                    task_url_flag: str | None = None) -> list[envfile.ResolvedKey]:
    flags = {"TASK_APP_URL": task_url_flag} if task_url_flag else {}
    return envfile.resolve_keys(env, shell=os.environ if shell is None else shell, flags=flags)


def require_secrets(resolved: Sequence[envfile.ResolvedKey], *, env_path: Path | None,
                    task_url_flag: str | None) -> dict[str, str]:
    """The required values, or a MissingSecretsError naming every missing key and the fix."""
    optional = ("TASK_APP_URL",) if task_url_flag else ()
    missing = envfile.missing_required(resolved, optional=optional)
    if missing:
        where = f"add them to {env_path}" if env_path else "pass --env-file PATH or export them in the shell"
        raise MissingSecretsError(f"Missing required keys: {', '.join(missing)}.",
                                  f"{where.capitalize()}; TASK_APP_URL may instead be given with --task-url.")
    values = {key.name: key.value for key in resolved if key.required and key.value}
    task_url = values.get("TASK_APP_URL")
    if task_url and not task_url.startswith(("http://", "https://")):
        raise MissingSecretsError(f"TASK_APP_URL has no http:// or https:// scheme: {task_url!r}.",
                                  f"Write it as http://{task_url} (or https://).")
    return values


def resolve_backend(flag: str | None, env: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(base URL ending in /api, where it came from). ``local`` is handled by the caller."""
    if flag:
        return ensure_api_base(flag), "--backend"
    return backend_from_env(env)


@dataclass
class PreparedJob:
    """Everything needed to verify and submit: the validated config and the payload."""

    config_path: Path
    report: cfg.ValidationReport
    payload: dict
    task_url: str
    task_url_source: str


def prepare_payload(config_path: Path, *, task_url_flag: str | None, env_task_url: str | None,
                    backend_base: str, model: str | None, allow_experimental: bool | None) -> PreparedJob:
    report = cfg.validate_rl_file(config_path, allow_experimental=allow_experimental)
    config = report.raise_if_invalid()
    config_task_url = config.services.task_url if config.services else None
    task_url, source = cfg.resolve_task_url(cli_task_url=task_url_flag, env_task_url=env_task_url,
                                            config_task_url=config_task_url)
    payload = cfg.build_rl_payload(config, task_url=task_url, backend_base=backend_base,
                                   model_override=model, allow_experimental=allow_experimental)
    return PreparedJob(config_path, report, payload, task_url, source)
