"""The launch steps shared by the headless command and the TUI: choose the config and the
.env, resolve the secrets and the backend, and build the payload. No printing, no Textual."""

from __future__ import annotations

import errno
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core import shell_env
from app.core.api.backend_url import request_url_problem, shown_url
from app.core.api.backend_url import resolve_backend as resolve_backend  # see below
from app.core.api.urls import CREDENTIALS_PROBLEM
from app.core.env.discovery import demo_state_env_path, discover_env_files, user_path
from app.core.env.keys import HEADER_KEYS, REQUIRED_KEYS, header_value_problem
from app.core.errors import MissingSecretsError, UnusableSecretError, UsageError
from app.core.launch.options import new_idempotency_key as new_idempotency_key  # see below

# resolve_backend and new_idempotency_key are this module's names too, but live where the
# session's construction reaches them without this module: the first frame waits for neither
# its dataclasses nor its imports (docs/performance.md#first-paint).

# The config schema (imported by prepare_payload), the .env's reading and its keys' resolution
# are imported by the functions that use them: the first frame waits for none (docs/performance.md).
if TYPE_CHECKING:
    from app.core.config import rl as cfg
    from app.core.env import envfile
    from app.core.env.resolve import ResolvedKey


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
        path = user_path(env_files[0])
        _check_env_flag_path(path)
        others = [user_path(p) for p in env_files[1:]]
        return EnvChoice(path.resolve(), "flag", [path.resolve(), *others])
    demo = demo_state_env_path()
    if demo is not None and demo.exists():
        return EnvChoice(demo.resolve(), "demo state (~/.synth-ai/demo.json)", [demo.resolve()])
    candidates = discover_env_files(cwd, config_path=config_path)
    if candidates:
        return EnvChoice(candidates[0], "discovered", candidates)
    return EnvChoice(None, "none", [])


def unattended_env_choice(choice: EnvChoice, *, cwd: Path, config_path: Path | None) -> EnvChoice:
    """The .env a run without anyone to confirm it may use. A discovered file is taken only
    from the working directory or the config's folder: one found deeper (a dependency's, say)
    could send the shell's SYNTH_API_KEY to a BACKEND_BASE_URL it names, or its
    ENVIRONMENT_API_KEY to its TASK_APP_URL. docs/hardening.md."""
    if choice.how != "discovered":
        return choice
    trusted = {cwd.resolve(), *([config_path.resolve().parent] if config_path else [])}
    for candidate in choice.candidates:
        if candidate.parent in trusted:
            return EnvChoice(candidate, choice.how, choice.candidates)
    found = ", ".join(str(c) for c in choice.candidates[:5]) + (" …" if len(choice.candidates) > 5 else "")
    raise UsageError(f"No --env-file was given, and the .env files found are all in sub-folders: {found}.",
                     "Pass the one to use with --env-file PATH: a .env in a sub-folder may belong to a "
                     "dependency and name another backend or task app, which would then receive your keys.")


def _check_env_flag_path(path: Path) -> None:
    """A usage error when --env-file names nothing, a folder or a pipe (reading one would wait)."""
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(f"--env-file {path} is a symlink loop (ELOOP): following its links leads back to "
                             "itself", "Point the link at the real .env file, or pass that file itself.") from None
        if isinstance(exc, FileNotFoundError):
            raise UsageError(f"Env file not found: {path}", "Pass an existing file with --env-file.") from None
        raise UsageError(f"Cannot read --env-file {path}: {exc.strerror or type(exc).__name__}",
                         "Pass a readable .env file.") from None
    except ValueError:  # a path the OS cannot take (a NUL byte)
        raise UsageError(f"Env file not found: {path}", "Pass an existing file with --env-file.") from None
    if stat.S_ISDIR(mode):
        raise UsageError(f"--env-file {path} is a directory, not a .env file",
                         f"Pass the file itself, e.g. --env-file {path / '.env'}")
    if not stat.S_ISREG(mode):
        raise UsageError(f"--env-file {path} is not a regular file (a pipe, socket or device)",
                         "Pass a .env text file.")


def resolve_secrets(env: envfile.EnvFile | None, *, shell: Mapping[str, str] | None = None,
                    task_url_flag: str | None = None) -> list[ResolvedKey]:
    from app.core.env.resolve import resolve_keys

    flags = {"TASK_APP_URL": task_url_flag} if task_url_flag else {}
    return resolve_keys(env, shell=shell_env.given_or_shell(shell), flags=flags)


def require_secrets(resolved: Sequence[ResolvedKey], *, env_path: Path | None,
                    task_url_flag: str | None, optional: Sequence[str] = ()) -> dict[str, str]:
    """The required values (``optional`` ones may be missing), or a MissingSecretsError
    naming every missing key and the fix."""
    from app.core.env.resolve import missing_required

    optional = (*optional, *(("TASK_APP_URL",) if task_url_flag else ()))
    missing = missing_required(resolved, optional=optional)
    if missing:
        where = f"add them to {env_path}" if env_path else "pass --env-file PATH or export them in the shell"
        raise MissingSecretsError(f"Missing required keys: {', '.join(missing)}.",
                                  f"{where.capitalize()}; TASK_APP_URL may instead be given with --task-url.")
    require_sendable_keys(resolved)
    return {key.name: key.value for key in resolved if key.name in REQUIRED_KEYS and key.value}


def unsendable_keys(resolved: Sequence[ResolvedKey]) -> list[tuple[ResolvedKey, str]]:
    """The keys an HTTP header cannot carry (say, a non-ASCII letter or a space), each with why:
    the character's position and kind, never the character."""
    return [(key, problem) for key in resolved
            if key.name in HEADER_KEYS and key.value and (problem := header_value_problem(key.value))]


def require_sendable_keys(resolved: Sequence[ResolvedKey]) -> None:
    """An UnusableSecretError for the first key an HTTP header cannot carry: naming the key,
    where it is set and the character's position."""
    unsendable = unsendable_keys(resolved)
    if unsendable:
        key, problem = unsendable[0]
        raise UnusableSecretError(
            f"{key.name} from {key.where} cannot be sent: {problem}.",
            f"API keys are plain ASCII with no spaces: copy {key.name} again from where it was issued "
            f"and replace it in {key.where}.")


@dataclass
class PreparedJob:
    """Everything needed to verify and submit: the validated config and the payload."""

    config_path: Path
    report: cfg.ValidationReport
    payload: dict[str, Any]
    task_url: str
    task_url_source: str


def prepare_payload(report: cfg.ValidationReport, *, task_url_flag: str | None, env_task_url: str | None,
                    backend_base: str, model: str | None, allow_experimental: bool | None,
                    env: Mapping[str, str], env_task_url_where: str = "TASK_APP_URL",
                    task_url_flag_where: str | None = None,
                    generations: frozenset[str] = frozenset()) -> PreparedJob:
    """The payload of a config already read and validated (``report``: nothing is read here),
    under the names a backend of ``generations`` reads (empty: as written). ``env``: the
    shell's variables (SDK_EXPERIMENTAL…), as the session was given them."""
    from app.core.config import rl as cfg
    from app.core.config.payload import for_backend

    config = report.raise_if_invalid()
    assert report.path is not None, "a report of a file"
    config_path = report.path
    config_task_url = config.services.task_url if config.services else None
    task_url, source = cfg.resolve_task_url(cli_task_url=task_url_flag, env_task_url=env_task_url,
                                            config_task_url=config_task_url)
    where = {"flag": task_url_flag_where or "--task-url",
             "env": env_task_url_where}.get(source, f"[services] task_url in {config_path}")
    check_task_url(task_url, where)
    payload = cfg.build_rl_payload(config, task_url=task_url, backend_base=backend_base,
                                   model_override=model, allow_experimental=allow_experimental, env=env)
    payload = for_backend(payload, generations)
    return PreparedJob(config_path, report, payload, task_url, source)


def check_task_url(url: str, where: str) -> None:
    """A UsageError naming where the task app URL came from when it cannot be requested."""
    problem = request_url_problem(url)
    if problem == CREDENTIALS_PROBLEM:
        raise UsageError(f"{where} is not a usable task app URL: {problem}. Got {shown_url(url)}.",
                         "Drop `user:pass@` from the URL: the task app is sent ENVIRONMENT_API_KEY (the .env or "
                         "the shell), and the URL is shown and sent to the backend, credentials and all.")
    if problem:
        raise UsageError(f"{where} is not a usable task app URL: {problem}. Got {shown_url(url)}.",
                         "Write it with its scheme, as http://HOST:PORT or https://HOST, e.g. http://127.0.0.1:8102.")
