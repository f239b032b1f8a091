"""The headless mode: the train flow as the SDK's printed lines (contract 1.3, 4.5).

The SDK's lines go to stdout, diagnostics to stderr, and every run ends with the exit code of
design section 2. User errors end with ``Error: <message>`` and a hint, never a traceback.
Everything printed passes through :class:`Printer`, which redacts the secrets in play.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import stat
import sys
from collections import ChainMap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from app.core import config as cfg
from app.core import envfile
from app.core.client import ApiError, SynthClient
from app.core.diagnosis import unreachable_by_backend
from app.core.errors import ExitCode, MissingSecretsError, SynthTuiError, UsageError
from app.core.events import event_line, is_noise, metric_line, status_line
from app.core.history import RunHistory
from app.core.launch import PreparedJob
from app.core.session import LaunchOptions, LaunchSession
from app.core.redact import mask_secret, printable, redact
from app.core.toml_source import read_config_text
from app.core.wire import JobEvent, JobStatus, MetricPoint, check_job_id
from app.text_chart import TextChart
from app.core.streaming import (
    ConnectionState,
    JobWatcher,
    NewEvents,
    NewMetrics,
    StatusChanged,
    WatchEnded,
    WatchOptions,
)


def has_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


@dataclass
class Printer:
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    secrets: list[str] = field(default_factory=list)

    def line(self, text: str = "") -> None:
        print(printable(redact(text, self.secrets)), file=self.out, flush=True)

    def diag(self, text: str) -> None:
        print(printable(redact(text, self.secrets)), file=self.err, flush=True)

    def error(self, exc: SynthTuiError) -> None:
        self.diag(f"Error: {exc.render()}")


@dataclass
class RunState:
    """What the run has learned so far, for the Ctrl-C message."""

    job_id: str | None = None
    session: LaunchSession | None = None


# --------------------------------------------------------------------------- train


def run_train(args: argparse.Namespace, *, printer: Printer | None = None, cwd: Path | None = None) -> int:
    printer = printer or Printer()
    state = RunState()
    try:
        return asyncio.run(train_flow(args, printer, state, cwd=cwd or Path.cwd()))
    except SynthTuiError as exc:
        printer.error(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        if state.job_id and state.session is not None:
            printer.diag(f"\nInterrupted. {state.session.attach_hint(state.job_id)}")
        else:
            printer.diag("\nInterrupted before a job was created; nothing was sent.")
        return ExitCode.INTERRUPTED


async def train_flow(args: argparse.Namespace, printer: Printer, state: RunState, *, cwd: Path) -> int:
    _check_type_flags(args, printer)
    session = LaunchSession(LaunchOptions.from_args(args, cwd=cwd))
    config_path = select_config(args, printer, cwd=cwd)
    session.config_path = config_path
    printer.line(f"Using config: {config_path} (rl)")

    choice = session.unattended_env_choice()
    env = session.open_env(choice.path, choice.how, choice.candidates)
    for warning in env.warnings if env else []:
        printer.diag(f"Warning: {choice.path}: {warning}")
    printer.secrets.extend(session.secret_values())
    _print_found_keys(session.resolved, printer)
    session.secrets()  # every missing key is reported here, before anything is sent
    printer.line(f"Using env file: {choice.path}" if choice.path else "Using env file: none (shell environment only)")

    state.session = session
    printer.line(f"Backend base: {session.backend_base} (key {mask_secret(session.synth_api_key())})")
    session.prepare()  # a config that cannot be sent is reported before any network call

    session.hand_env_keys_to_embedded_backend()
    async with session.client() as client:
        support = await session.probe(client)
        printer.diag(f"Backend offers RL jobs ({support.how}).")
        prepared = session.prepared or session.prepare()
        await verify_backend(client, prepared, printer)
        await check_health(session, printer)
        if args.dry_run:
            printer.line("Payload preview:")
            printer.line(json.dumps(prepared.payload, indent=2)[:800])
            printer.line("Dry run: no job was created.")
            return ExitCode.OK
        job_id = await create_job(client, prepared, session.idempotency_key, printer)
        state.job_id = job_id
        _remember(printer, lambda h: h.record_submission(
            job_id=job_id, backend=session.backend_base, config_path=str(config_path), payload=prepared.payload,
            idempotency_key=session.idempotency_key))
        if not args.poll:
            printer.line(f"Created job {job_id} (polling disabled)")
            return ExitCode.OK
        return await stream_job(client, job_id, args, printer, session)


def _check_type_flags(args: argparse.Namespace, printer: Printer) -> None:
    if args.train_type in ("sft", "prompt_learning"):
        raise UsageError(f"synth-tui launches RL jobs only (got --type {args.train_type}).",
                         f"Use `synth-ai train --type {args.train_type}` for that job type.")
    if args.dataset or args.examples:
        printer.diag("Warning: --dataset and --examples apply to SFT only; they are ignored for RL.")


def select_config(args: argparse.Namespace, printer: Printer, *, cwd: Path) -> Path:
    """Explicit ``--config`` (never filtered by type, as the SDK), else discovery."""
    if args.config:
        paths = [envfile.user_path(p) for p in args.config]
        for path in paths:
            read_config_text(path)  # a ConfigError for a missing, unreadable, huge or special file
        chosen = paths[0].resolve() if len(paths) == 1 else _pick(
            [cfg.ConfigCandidate(p.resolve(), "rl") for p in paths], printer)
        _check_rl_kind(chosen, args.train_type)
    else:
        candidates = cfg.discover_configs(cwd, last_config=cfg.read_last_config())
        if not candidates:
            raise UsageError("No training configs found. Pass --config explicitly.",
                             f"No RL config TOML was found under {cwd} or the bundled configs.")
        chosen = _pick(candidates, printer)
    cfg.write_last_config(chosen)
    return chosen


def _check_rl_kind(path: Path, train_type: str) -> None:
    if train_type == "rl":
        return
    try:
        kind = cfg.infer_config_type(cfg.load_toml(path))
    except SynthTuiError:
        return  # the validator reports the syntax error with its line and column
    if kind != "rl":
        raise UsageError(
            f"Config {path} does not look like an RL config (inferred type: {kind}).",
            "An RL config has [algorithm] type = \"online\", method = \"policy_gradient\", variety = \"gspo\"; "
            "or pass --type rl to validate it as RL anyway.")


def _pick(candidates: list[cfg.ConfigCandidate], printer: Printer) -> Path:
    """The SDK's numbered picker on a terminal; without one, the only or last-used config."""
    if len(candidates) == 1:
        return candidates[0].path
    if not sys.stdin.isatty():
        last = next((c for c in candidates if c.last_used), None)
        if last is not None:
            return last.path
        listing = "\n".join(f"  {c.path}" for c in candidates)
        raise UsageError(f"Several RL configs found and no terminal to choose one:\n{listing}",
                         "Pass --config PATH.")
    printer.line("Select a training config:")
    for index, candidate in enumerate(candidates, 1):
        printer.line(f"  {index}) {candidate.path}{' (last used)' if candidate.last_used else ''}")
    printer.line("  0) Abort")
    answer = input("Enter choice [1]: ").strip() or "1"
    if answer == "0":
        raise UsageError("Aborted by user")
    if not answer.isdigit() or not 1 <= int(answer) <= len(candidates):
        raise UsageError(f"Invalid selection: {answer}", f"Enter a number from 0 to {len(candidates)}.")
    return candidates[int(answer) - 1].path


def _print_found_keys(resolved: list[envfile.ResolvedKey], printer: Printer) -> None:
    for key in resolved:
        if not key.required or not key.value:
            continue
        if key.source == "alias":
            printer.line(f"Found {key.name} via {key.origin}: {key.display}")
        else:
            printer.line(f"Found {key.name} in current sources: {key.display} ({_source_words(key)})")
        if key.shell_overrides_file:
            printer.diag(f"Note: {key.name} from the shell overrides the value in the .env file.")


def _source_words(key: envfile.ResolvedKey) -> str:
    return {"flag": f"flag {key.origin}", "shell": "shell environment", "file": ".env file"}.get(key.source, key.source)


# --------------------------------------------------------------------------- steps


async def verify_backend(client: SynthClient, prepared: PreparedJob, printer: Printer) -> None:
    try:
        result = await client.verify_task_app(prepared.task_url)
    except ApiError as exc:
        exc.message = f"Task app verification call failed: {exc.message}"
        raise
    if result.status >= 400 or result.body is None:
        printer.line("Task app verification error:")
        printer.line(result.preview_source.preview(800))
        raise VerificationFailed(f"Verification failed with status {result.status}",
                                 "The backend could not run the verification; see its answer above.")
    if not result.any_ok:
        printer.line("Task app verification failed; no auth combination succeeded. Full report:")
        printer.line(result.preview_source.preview(1200))
        if unreachable_by_backend(result):
            error = next(a.get("error") for a in result.attempts)
            raise VerificationFailed(
                f"Task app verification failed: the backend could not reach the task app at {prepared.task_url} "
                f"({error})",
                "Start the task app, or fix TASK_APP_URL; the backend must be able to reach that address.")
        raise VerificationFailed(
            "Task app verification failed (auth)",
            "The backend holds no ENVIRONMENT_API_KEY that this task app accepts: upload the task app's key "
            "to the backend, or point TASK_APP_URL at the task app your key belongs to.")
    statuses = [a.get("status") for a in result.attempts]
    printer.line(f"Verification OK (candidates={result.candidates}, statuses={statuses})")


async def check_health(session: LaunchSession, printer: Printer) -> None:
    printer.line("Performing task app health check…")
    report = await session.health()
    if report.ok:
        printer.line("Task app healthy")
        return
    printer.line(f"Task app health check failed: {report.detail}")
    for attempt in report.attempts:
        if not attempt.ok:
            fix = f" Fix: {attempt.fix}" if attempt.fix else ""
            printer.diag(f"  {attempt.endpoint}: {attempt.reason}.{fix}")
    raise VerificationFailed("Aborting due to failing health check", None)


async def create_job(client: SynthClient, prepared: PreparedJob, idempotency_key: str, printer: Printer) -> str:
    printer.line("Payload preview:")
    printer.line(json.dumps(prepared.payload, indent=2)[:800])
    printer.diag(f"Idempotency-Key: {idempotency_key}")
    result = await client.create_job(prepared.payload, idempotency_key=idempotency_key)
    printer.line(f"Response {result.status}: {result.response.preview(400)}")
    if result.status not in (200, 201):
        raise JobCreationFailed("Job creation failed", None)
    if not result.job_id:
        raise JobCreationFailed("Response missing job id", "The backend answered without job_id or id.")
    return result.job_id


class LineView:
    """The SDK's ``cli`` stream format: one line per status change, event and metric."""

    def __init__(self, printer: Printer) -> None:
        self.printer = printer

    def status(self, status: JobStatus) -> None:
        self.printer.line(status_line(status))

    def event(self, event: JobEvent) -> None:
        self.printer.line(event_line(event))

    def metrics(self, points: list[MetricPoint]) -> None:
        # Differs from the SDK on purpose: its RL stream passes only a GEPA metric, so it
        # prints no RL metric at all. We print every metric the job emits.
        for point in points:
            self.printer.line(metric_line(point))

    def finish(self) -> None:
        pass


class ChartView:
    """``--stream-format chart``: the reward chart redrawn in place (once at the end when
    stdout is not a terminal)."""

    def __init__(self, printer: Printer, metric: str | None) -> None:
        self.chart = TextChart(printer.out, metric=metric, live=printer.out.isatty())
        printer.line(f"Using live chart (metric={metric or 'the job mean score'})")

    def status(self, status: JobStatus) -> None:
        self.chart.set_status(status.status)
        self.chart.draw()

    def event(self, event: JobEvent) -> None:
        self.chart.add_event(event)
        self.chart.draw()

    def metrics(self, points: list[MetricPoint]) -> None:
        self.chart.add_points(points)
        self.chart.draw()

    def finish(self) -> None:
        self.chart.draw(force=True)


async def stream_job(client: SynthClient, job_id: str, args: argparse.Namespace, printer: Printer,
                     session: LaunchSession) -> int:
    printer.line()
    printer.line("=== Streaming Job Progress ===")
    view = ChartView(printer, args.metric) if args.stream_format == "chart" else LineView(printer)
    options = WatchOptions(poll_interval=args.poll_interval, poll_timeout=args.poll_timeout)
    hidden = 0
    ended: WatchEnded | None = None
    last_metrics: dict[str, float] = {}
    async for update in JobWatcher(client, job_id, options).watch():
        if isinstance(update, StatusChanged):
            view.status(update.status)
        elif isinstance(update, NewEvents):
            for event in update.events:
                if is_noise(event):
                    hidden += 1
                else:
                    view.event(event)
        elif isinstance(update, NewMetrics):
            view.metrics(update.points)
            last_metrics.update({p.name: p.value for p in update.points if p.value is not None})
        elif isinstance(update, ConnectionState):
            if update.reconnecting:
                printer.diag(f"Reconnecting in {update.retry_in:.1f}s: {update.message}")
            else:
                printer.diag("Reconnected.")
        elif isinstance(update, WatchEnded):
            ended = update
    assert ended is not None
    view.finish()
    _remember(printer, lambda h: h.record_progress(job_id, status=ended.status, last_metrics=last_metrics,
                                                   final=ended.reason == "terminal"))
    if hidden:
        printer.diag(f"({hidden} hatchet/modal infrastructure events hidden)")
    if ended.reason == "timeout":
        printer.diag(f"Stopped watching after --poll-timeout {args.poll_timeout:g}s; job {job_id} was still "
                     f"{ended.status}. {session.attach_hint(job_id)}")
        printer.line(f"Final status: {ended.status} (watch timed out)")
    elif ended.reason == "paused":
        printer.diag(session.paused_message(job_id))
        printer.line(f"Final status: {ended.status} (the job is paused on the backend; watch ended)")
    else:
        printer.line(f"Final status: {ended.status}")
    printer.line(json.dumps(ended.payload, indent=2)[:600])
    # Differs from the SDK on purpose: it exits 0 even when the job failed.
    return ended.exit_code


def _remember(printer: Printer, write: Callable[[RunHistory], None]) -> None:
    """Write to the run history; a history that cannot be written never fails the run."""
    try:
        write(RunHistory())
    except (sqlite3.Error, OSError) as exc:
        printer.diag(f"Warning: could not update the run history: {exc}")


class VerificationFailed(SynthTuiError):
    exit_code = ExitCode.CHECKS_FAILED


class JobCreationFailed(SynthTuiError):
    exit_code = ExitCode.BACKEND


# --------------------------------------------------------------------------- other commands


def run_demo(args: argparse.Namespace, *, interactive: bool = False) -> int:
    from app.demo import run_demo as run

    return run(args, interactive=interactive)


def run_backend_server(args: argparse.Namespace) -> int:
    from app.local.servers import default_db_path, serve_backend

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
                  envfile.user_path(args.db) if args.db else default_db_path())
    return ExitCode.OK


def _key_sources(env_file: str | None) -> Mapping[str, str]:
    """Where a server's keys are looked up: the shell's variables win over the --env-file's."""
    shell = {name: value for name, value in os.environ.items() if value}
    return ChainMap(shell, _env_file_values(env_file))


def _env_file_values(env_file: str | None) -> dict[str, str]:
    """The non-empty values of --env-file; a file that is missing or unreadable is a usage error."""
    if not env_file:
        return {}
    path = envfile.user_path(env_file)
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
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        print(f"Warning: {path} holds keys but other users of this machine can open it (mode {mode:04o}); "
              f"run: chmod 600 {path}", file=sys.stderr, flush=True)


def _where_keys_were_sought(env_file: str | None) -> str:
    return f"the shell or {envfile.user_path(env_file)}" if env_file else "the shell (no --env-file given)"


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


def run_taskapp_server(args: argparse.Namespace) -> int:
    from app.local.servers import serve_taskapp

    _warn_keys_in_argv(args)
    sources = _key_sources(args.env_file)
    env_keys = _env_keys(args, sources)
    if not env_keys:
        # Contract 5.2: a task app without a key answers 503 to every authenticated call.
        printer = Printer()
        printer.diag(f"Warning: no ENVIRONMENT_API_KEY found in {_where_keys_were_sought(args.env_file)}; "
                     "every authenticated call will answer 503.")
    serve_taskapp(args.host, args.port, env_keys, args.game, contract=args.contract)
    return ExitCode.OK


def run_attach(args: argparse.Namespace, *, interactive: bool = False) -> int:
    """Watch an existing job: the dashboard on a terminal, the SDK's lines otherwise."""
    check_job_id(args.job_id)  # it goes into URL paths: "../x" or "" must stop here
    record = RunHistory().get(args.job_id)
    if interactive:
        from app.tui import run_attach_tui

        return run_attach_tui(args, record)
    printer = Printer()
    try:
        return asyncio.run(_attach_flow(args, printer, record))
    except SynthTuiError as exc:
        printer.error(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        printer.diag(f"\nInterrupted. Job {args.job_id} keeps running on the backend.")
        return ExitCode.INTERRUPTED


async def _attach_flow(args: argparse.Namespace, printer: Printer, record) -> int:
    session = LaunchSession(LaunchOptions.from_args(args))
    if record is not None and not args.backend:
        session.use_backend(record.backend, "the job history")
    choice = session.unattended_env_choice()
    session.open_env(choice.path, choice.how, choice.candidates)
    printer.secrets.extend(session.secret_values())
    printer.line(f"Attaching to job {args.job_id} at {session.backend_base}")
    async with session.client() as client:
        await session.probe(client)  # a backend without RL jobs says so, not "job not found"
        return await stream_job(client, args.job_id, args, printer, session)


def run_history(args: argparse.Namespace, *, interactive: bool = False) -> int:
    if interactive:
        from app.tui import run_history_tui

        return run_history_tui(args)
    records = RunHistory().list()
    if not records:
        print("No jobs launched from this machine yet.")
        return ExitCode.OK
    print(f"{'JOB':<28} {'STATUS':<11} {'CREATED':<20} {'BACKEND':<40} CONFIG")
    for record in records:
        print(f"{record.job_id:<28} {record.status:<11} {record.created_at[:19]:<20} {record.backend:<40} "
              f"{record.config_path or '-'}")
    return ExitCode.OK
