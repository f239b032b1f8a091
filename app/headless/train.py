"""The headless mode: the train flow as the SDK's printed lines (docs/wire-contract.md#headless-output).

The SDK's lines go to stdout, diagnostics to stderr, and every run ends with the exit code of
docs/product.md#exit-codes. User errors end with ``Error: <message>`` and a hint, never a traceback.
Everything printed passes through :class:`Printer`, which redacts the secrets in play.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from app.core.api.client import CreateResult
from app.core.api.streaming import (
    BackendGaveUp,
    ConnectionState,
    NewEvents,
    NewMetrics,
    StatusChanged,
    Update,
    WatchEnded,
)
from app.core.api.wire import JobEvent, JobStatus, MetricPoint, is_terminal_status
from app.core.config import rl as cfg
from app.core.config.toml_source import read_config_text
from app.core.env.keys import REQUIRED_KEYS
from app.core.env.resolve import ResolvedKey
from app.core.errors import INTERRUPTED_BEFORE_A_JOB, ExitCode, SynthTuiError, UsageError
from app.core.invocation import as_run
from app.core.launch import service
from app.core.launch.diagnosis import BackendCheck, ModelCheck, TaskAppCheck, model_summary
from app.core.launch.session import LaunchOptions, LaunchSession
from app.core.launch.steps import PreparedJob
from app.core.redact import mask_secret, printable, redact, redact_url
from app.core.runs.compare import compare_rows, open_comparison, read_runs
from app.core.runs.events import event_line, is_noise, metric_line, status_line
from app.core.runs.history import RunHistory, RunRecord, take_repair_notes
from app.core.runs.history_refresh import StatusAnswer, needs_refresh, problem_notes, refresh_statuses
from app.core.runs.model import saved_model
from app.core.runs.series import shown_number
from app.core.text import counted
from app.headless.text_chart import TextChart


@dataclass
class Printer:
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    secrets: list[str] = field(default_factory=list)

    # Each line names our commands as the user ran them (app.core.invocation).
    def line(self, text: str = "") -> None:
        print(as_run(printable(redact(text, self.secrets))), file=self.out, flush=True)

    def diag(self, text: str) -> None:
        print(as_run(printable(redact(text, self.secrets))), file=self.err, flush=True)

    def warning(self, text: str | None) -> None:
        """A problem that does not stop the run (a history write that failed); None: nothing."""
        if text:
            self.diag(f"Warning: {text}")

    def error(self, exc: SynthTuiError) -> None:
        self.diag(f"Error: {exc.render()}")


@dataclass(frozen=True)
class TrainRun:
    """A headless train run: the options both front ends share, and the flags only this one
    reads. ``synth-tui demo --no-tui`` builds one directly."""

    options: LaunchOptions
    train_type: str = "rl"
    dry_run: bool = False
    poll: bool = True
    stream_format: str = "cli"
    sft_flags_given: bool = False  # --dataset / --examples: SFT only, ignored with a warning

    @classmethod
    def from_args(cls, args: argparse.Namespace, *, cwd: Path) -> TrainRun:
        return cls(LaunchOptions.from_args(args, cwd=cwd), train_type=args.train_type, dry_run=args.dry_run,
                   poll=args.poll, stream_format=args.stream_format,
                   sft_flags_given=bool(args.dataset or args.examples))


@dataclass
class RunState:
    """What the run has learned so far, for the Ctrl-C message."""

    job_id: str | None = None
    session: LaunchSession | None = None


# --------------------------------------------------------------------------- train


def run_train(args: argparse.Namespace, *, printer: Printer | None = None, cwd: Path | None = None) -> int:
    """``synth-tui train --no-tui``: every error a message and an exit code."""
    printer = printer or Printer()
    try:
        run = TrainRun.from_args(args, cwd=cwd or Path.cwd())
    except SynthTuiError as exc:
        printer.error(exc)
        return exc.exit_code
    return run_headless(run, printer)


def run_headless(run: TrainRun, printer: Printer | None = None) -> int:
    printer = printer or Printer()
    state = RunState()
    try:
        return asyncio.run(train_flow(run, printer, state))
    except SynthTuiError as exc:
        printer.error(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        if state.job_id and state.session is not None:
            printer.diag(f"\nInterrupted. {state.session.attach_hint(state.job_id)}")
        else:
            printer.diag(f"\n{INTERRUPTED_BEFORE_A_JOB}")
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        # stdout's reader went away (| head): app.cli ends the run with 141. A job created by
        # now keeps running and its id went nowhere, so stderr, if still open, says how to reach it.
        if state.job_id and state.session is not None:
            keeps = "" if state.session.options.embedded_backend else ", which keeps running"
            with contextlib.suppress(OSError):
                printer.diag(f"Output closed; stopped watching job {state.job_id}{keeps}. "
                             f"{state.session.attach_hint(state.job_id)}")
        raise


async def train_flow(run: TrainRun, printer: Printer, state: RunState) -> int:
    _check_type_flags(run, printer)
    session = LaunchSession(run.options)
    config_path = select_config(run, printer)
    # The one read of the config: a file that cannot be read stops here; problems in it are
    # reported by prepare(), which builds from this report.
    report = session.validate(config_path, strict=True)
    if run.options.config_paths:
        _check_rl_kind(report, config_path, run.train_type)
    session.choose_config(config_path, report)
    session.remember_config(config_path, report)
    printer.line(f"Using config: {config_path} (rl)")

    choice = session.open_unattended_env()
    for warning in session.env.warnings if session.env else []:
        printer.diag(f"Warning: {choice.path}: {warning}")
    # --modal-secret / --modal-app (docs/modal.md): a container is started to read the secret,
    # so it is said first; the value only ever reaches the printer as a mask.
    session.fetch_modal_values(announce=printer.diag)
    printer.secrets.extend(session.secret_values())
    _print_found_keys(session.resolved, printer)
    session.secrets()  # every missing key is reported here, before anything is sent
    printer.line(f"Using env file: {choice.path}" if choice.path else "Using env file: none (shell environment only)")

    state.session = session
    printer.line(f"Backend base: {session.backend_base} (key {mask_secret(session.synth_api_key())})")
    session.prepare()  # a config that cannot be sent is reported before any network call

    await run_checks(session, printer)
    prepared = session.prepare()  # under the names the probed backend reads
    if run.dry_run:  # the whole payload: checking it is what a dry run is for
        printer.line("Payload preview:")
        printer.line(json.dumps(prepared.payload, indent=2, ensure_ascii=False))
        printer.line("Dry run: no job was created.")
        return ExitCode.OK
    job_id = await create_job(session, prepared, printer)
    state.job_id = job_id
    if not run.poll:
        printer.line(f"Created job {job_id} (polling disabled)")
        return ExitCode.OK
    return await stream_job(job_id, run.stream_format, printer, session)


def _check_type_flags(run: TrainRun, printer: Printer) -> None:
    if run.train_type in ("sft", "prompt_learning"):
        raise UsageError(f"synth-tui launches RL jobs only (got --type {run.train_type}).",
                         f"Use `synth-ai train --type {run.train_type}` for that job type.")
    if run.sft_flags_given:
        printer.diag("Warning: --dataset and --examples apply to SFT only; they are ignored for RL.")


def select_config(run: TrainRun, printer: Printer) -> Path:
    """Explicit ``--config`` (never filtered by type, as the SDK), else discovery."""
    cwd = run.options.cwd
    if run.options.config_paths:
        paths = [Path(p) for p in run.options.config_paths]
        if len(paths) == 1:  # read (once) by the validation that follows, which names what is wrong
            try:
                return paths[0].resolve()
            except (OSError, RuntimeError):  # a symlink loop: the read says so, with its fix
                return paths[0]
        for path in paths:
            read_config_text(path)  # a ConfigError for a missing, unreadable, huge or special file
        chosen = _pick([cfg.ConfigCandidate(p.resolve(), "rl") for p in paths], printer)
    else:
        candidates = cfg.discover_configs(cwd, last_config=cfg.read_last_config())
        if not candidates:
            raise UsageError("No training configs found. Pass --config explicitly.",
                             f"No RL config TOML was found under {cwd} or the bundled configs.")
        chosen = _pick(candidates, printer)
    return chosen


def _check_rl_kind(report: cfg.ValidationReport, path: Path, train_type: str) -> None:
    if train_type == "rl" or report.raw is None:
        return  # the validator reports a syntax error with its line and column
    kind = cfg.infer_config_type(report.raw)
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


def _print_found_keys(resolved: list[ResolvedKey], printer: Printer) -> None:
    for key in resolved:
        if key.name not in REQUIRED_KEYS or not key.value:
            continue
        if key.source == "alias":
            printer.line(f"Found {key.name} via {key.origin}: {key.display}")
        else:
            printer.line(f"Found {key.name} in current sources: {key.display} ({_source_words(key)})")
        if key.shell_overrides_file:
            printer.diag(f"Note: {key.name} from the shell overrides the value in the .env file.")


def _source_words(key: ResolvedKey) -> str:
    return {"flag": f"flag {key.origin}", "shell": "shell environment", "file": ".env file",
            "modal": str(key.origin)}.get(key.source, key.source)


# --------------------------------------------------------------------------- steps


async def run_checks(session: LaunchSession, printer: Printer) -> service.CheckOutcome:
    """The launch service's checks (probe, the backend's verification, the direct health
    check: one timeout and retry policy, as the TUI's), shown with the SDK's lines; what failed
    is judged once, by the verdict the TUI's verification screen shows too."""
    outcome = await service.check(session)
    backend = outcome.backend
    if backend.error is not None:  # unreachable, 401, no RL jobs…: the error's own exit code and fix
        error = backend.error
        if session.rl_support is not None and not error.message.startswith("Task app verification call failed"):
            error.message = f"Task app verification call failed: {error.message}"
        raise error
    if session.rl_support is not None:
        printer.diag(f"Backend offers RL jobs ({session.rl_support.how}).")
    _print_backend_verify(backend, printer)
    _print_task_app_health(outcome.task_app, printer)
    if outcome.model is not None:
        _print_model_check(outcome.model, printer)
    failure = outcome.failure()
    if failure is not None:
        for problem in outcome.verdict.problems[1:]:
            printer.diag(f"Also: {problem.message}" + (f" Fix: {problem.fix}" if problem.fix else ""))
        raise failure
    return outcome


def _print_backend_verify(backend: BackendCheck, printer: Printer) -> None:
    # Each line says what its check covered (docs/wire-contract.md#headless-output): the backend's
    # verify passing proves nothing about this machine's ENVIRONMENT_API_KEY, which only the
    # health check tries.
    result = backend.result
    if result is None:
        printer.line(f"Backend verify: FAILED (no answer within {backend.timeout_s:g} s)")
    elif result.status >= 400 or result.body is None:
        printer.line(f"Backend verify: ERROR (HTTP {result.status}: the backend could not check the task app). "
                     "Report:")
        printer.line(result.preview_source.preview(800))
    elif not result.any_ok:
        printer.line("Backend verify: FAILED (no call the backend made to the task app succeeded, with any key it "
                     "holds). Full report:")
        printer.line(result.preview_source.preview(1200))
    else:
        statuses = [a.get("status") for a in result.attempts]
        printer.line(f"Backend verify: OK (the backend reached the task app with a key it holds; "
                     f"candidates={result.candidates}, statuses={statuses})")


def _print_task_app_health(task_app: TaskAppCheck, printer: Printer) -> None:
    printer.line(f"Task app health: checking /health and /task_info at {task_app.task_url} from this machine "
                 f"with ENVIRONMENT_API_KEY {task_app.key_hint}")
    report = task_app.report
    if report is None:
        printer.line(f"Task app health: FAILED (no answer within {task_app.timeout_s:g} s)")
    elif report.ok:
        printer.line("Task app health: OK (this machine reached the task app and it accepted ENVIRONMENT_API_KEY)")
    else:
        printer.line(f"Task app health: FAILED ({report.detail})")
        for attempt in report.attempts:
            if not attempt.ok:
                fix = f" Fix: {attempt.fix}" if attempt.fix else ""
                printer.diag(f"  {attempt.endpoint}: {attempt.reason}.{fix}")


def _print_model_check(check: ModelCheck, printer: Printer) -> None:
    """`Model check: OK (…)` or FAILED, and each warning (docs/wire-contract.md#flow-lines)."""
    result = check.result
    if result is None:
        why = check.error.message if check.error is not None else f"no answer within {check.timeout_s:g} s"
        printer.line(f"Model check: FAILED ({check.tried}: {why})")
        return
    # Its problems are the verdict's: run_checks ends with them (Error:, Also:), each said once.
    printer.line(f"Model check: {'OK' if result.ok else 'FAILED'} ({check.tried}: {model_summary(result)})")
    for finding in result.warnings:
        printer.warning(f"Model check: {finding.message}." + (f" Fix: {finding.fix}" if finding.fix else ""))


async def create_job(session: LaunchSession, prepared: PreparedJob, printer: Printer) -> str:
    """The launch service's submit, with the SDK's lines: the payload, the answer."""
    printer.line("Payload preview:")
    printer.line(json.dumps(prepared.payload, indent=2, ensure_ascii=False)[:800])
    printer.diag(f"Idempotency-Key: {session.idempotency_key}")

    def answered(result: CreateResult) -> None:
        printer.line(f"Response {result.status}: {result.response.preview(400)}")

    submitted = await service.submit(session, prepared.payload, config_path=str(prepared.config_path),
                                      answered=answered)
    printer.warning(submitted.history_warning)
    return submitted.job.job_id


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


class PrinterSink(service.WatchSink):
    """The watch as printed lines: a sink of the launch service's watch, beside the events
    file and the history every watch keeps."""

    def __init__(self, printer: Printer, view: LineView | ChartView) -> None:
        self.printer = printer
        self.view = view
        self.hidden = 0
        self.ended: WatchEnded | None = None

    def take(self, update: Update) -> None:
        if isinstance(update, StatusChanged):
            self.view.status(update.status)
        elif isinstance(update, NewEvents):
            for event in update.events:
                if is_noise(event):
                    self.hidden += 1
                else:
                    self.view.event(event)
        elif isinstance(update, NewMetrics):
            self.view.metrics(update.points)
        elif isinstance(update, ConnectionState):
            if update.reconnecting:
                self.printer.diag(f"Reconnecting in {update.retry_in:.1f}s: {update.message}")
            else:
                self.printer.diag("Reconnected.")
        elif isinstance(update, WatchEnded):
            self.ended = update


async def stream_job(job_id: str, stream_format: str, printer: Printer, session: LaunchSession) -> int:
    printer.line()
    printer.line("=== Streaming Job Progress ===")
    flags = session.options
    view = ChartView(printer, flags.metric) if stream_format == "chart" else LineView(printer)
    shown = PrinterSink(printer, view)
    files, history = service.run_sinks(job_id)
    try:
        async with service.watch_client(session) as client:
            await service.watch(client, job_id, session.watch_options(), [files, history, shown])
    except BackendGaveUp as exc:  # a backend that stopped answering: the way back in
        exc.hint = f"{exc.hint} {session.attach_hint(job_id)}"
        raise
    finally:
        for warning in history.warnings:
            printer.warning(warning)
    ended = shown.ended
    assert ended is not None
    view.finish()
    if shown.hidden:
        printer.diag(f"({shown.hidden} hatchet/modal infrastructure events hidden)")
    if ended.reason == "timeout":
        printer.diag(f"Stopped watching after --poll-timeout {flags.poll_timeout:g}s; job {job_id} was still "
                     f"{ended.status}. {session.attach_hint(job_id)}")
        printer.line(f"Final status: {ended.status} (watch timed out)")
    elif ended.reason == "paused":
        printer.diag(session.paused_message(job_id))
        printer.line(f"Final status: {ended.status} (the job is paused on the backend; watch ended)")
    else:
        printer.line(f"Final status: {ended.status}")
    printer.line(json.dumps(ended.payload, indent=2, ensure_ascii=False)[:600])  # the SDK's cut
    _print_model(printer, ended.payload)
    # Differs from the SDK on purpose: it exits 0 even when the job failed.
    return ended.exit_code


def _print_model(printer: Printer, payload: dict[str, Any]) -> None:
    """The trained model's folder as a line of its own, last, and how to load it: the SDK's
    cut of the JSON above (docs/wire-contract.md) ends before artifacts.model_path."""
    model = saved_model(payload)
    if model is not None:
        for line in model.lines():
            printer.line(line)


# --------------------------------------------------------------------------- other commands


def run_attach(args: argparse.Namespace, *, printer: Printer | None = None) -> int:
    """``synth-tui attach JOB_ID --no-tui``: the SDK's lines for an existing job."""
    printer = printer or Printer()
    session: LaunchSession | None = None
    try:
        session = LaunchSession(LaunchOptions.from_args(args))
        return asyncio.run(_attach_flow(session, args, printer))
    except SynthTuiError as exc:
        printer.error(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        hint = f" {session.attach_hint(args.job_id)}" if session is not None else ""
        printer.diag(f"\nInterrupted. Job {args.job_id} keeps running on the backend.{hint}")
        return ExitCode.INTERRUPTED


async def _attach_flow(session: LaunchSession, args: argparse.Namespace, printer: Printer) -> int:
    job = session.attach(args.job_id)
    printer.secrets.extend(session.secret_values())
    printer.line(f"Attaching to job {job.job_id} at {session.backend_base}")
    async with session.client() as client:
        await session.probe_for_attach(client)
    return await stream_job(job.job_id, args.stream_format, printer, session)


def run_history(args: argparse.Namespace | None = None, *, printer: Printer | None = None) -> int:
    """``synth-tui history --no-tui``: one line per job launched from this machine, with the
    statuses of unfinished jobs asked of their backends first (docs/product.md#commands),
    and the command that attaches to each job still running."""
    printer = printer or Printer()
    try:
        session = LaunchSession(LaunchOptions.from_args(args) if args is not None else LaunchOptions())
        if session.options.env_files:
            session.open_unattended_env()  # a --env-file that cannot be read stops here, not per job
        history = RunHistory()
        records = history.list()
        for note in take_repair_notes():  # a damaged history moved aside: told once, here
            printer.diag(f"Note: {note}")
        if not records:
            printer.line("No jobs launched from this machine yet.")
            return ExitCode.OK
        answers = asyncio.run(_refreshed(session, records))
    except SynthTuiError as exc:
        printer.error(exc)
        return exc.exit_code
    unanswered = {a.job_id for a in answers if a.status is None}
    unknown = {a.job_id for a in answers if a.problem_of == "job"}  # the backend does not know it
    statuses = {a.job_id: a.status for a in answers if a.status is not None}
    for warning in dict.fromkeys(a.warning for a in answers if a.warning):
        printer.warning(warning)
    for note in problem_notes(answers):
        printer.diag(f"Warning: {note}")
    printer.line(f"{'JOB':<28} {'STATUS':<11} {'CREATED':<20} {'BACKEND':<40} CONFIG")
    running = []
    for record in records:
        status = statuses.get(record.job_id, record.status) + ("?" if record.job_id in unanswered else "")
        still_running = needs_refresh(record) and not is_terminal_status(statuses.get(record.job_id))
        if still_running and record.job_id not in unknown:
            running.append(record)
        printer.line(f"{record.job_id:<28} {status:<11} {record.created_at[:19]:<20} {redact_url(record.backend):<40} "
                     f"{record.config_path or '-'}")
    if running:
        printer.line("")
        printer.line("Attach to a job still running with:")
        for record in running:
            printer.line(f"  {session.history_attach_command(record)}")
    _print_models(printer, records)
    return ExitCode.OK


def _print_models(printer: Printer, records: list[RunRecord]) -> None:
    """The trained models the jobs' ends named (docs/product.md#where-the-model-is)."""
    saved = [record for record in records if record.model_path]
    if saved:
        printer.line("")
        printer.line("Trained models:")
        for record in saved:
            printer.line(f"  {record.job_id:<28} {printable(record.model_path or '')}")


async def _refreshed(session: LaunchSession, records: list[RunRecord]) -> list[StatusAnswer]:
    return [answer async for answer in refresh_statuses(session, records)]


def _run_listing(flow: Coroutine[Any, Any, int], printer: Printer) -> int:
    """A read-only command's flow (jobs, compare): its exit code, an error printed with its
    fix, Ctrl-C as 130 (nothing was started, so nothing to attach to)."""
    try:
        return asyncio.run(flow)
    except SynthTuiError as exc:
        printer.error(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        printer.diag("\nInterrupted.")
        return ExitCode.INTERRUPTED


def run_jobs(args: argparse.Namespace, *, printer: Printer | None = None) -> int:
    """``synth-tui jobs --no-tui``: every job the backend lists, as a table (docs/product.md#jobs-view)."""
    printer = printer or Printer()
    return _run_listing(_jobs_table(args, printer), printer)


async def _jobs_table(args: argparse.Namespace, printer: Printer) -> int:
    from app.core.runs import job_list

    session = LaunchSession(LaunchOptions.from_args(args))
    session.open_unattended_env()
    session.synth_api_key()
    printer.secrets.extend(session.secret_values())
    async with session.client() as client:
        await job_list.probe_jobs_backend(session, client)
        listing = await job_list.read_jobs(client, status=args.status, max_jobs=args.limit, page_size=args.page_size)
        scores = job_list.ScoreBook()
        await scores.update(client, listing.rows)
    rows = job_list.sort_rows(job_list.merge_scores(listing.rows, scores), args.sort)
    printer.diag(f"Jobs at {session.backend_base}: {len(rows)} in {counted(listing.pages, 'page')}")
    printer.warning(listing.note)
    if scores.failures:
        printer.warning(f"the metrics of {counted(scores.failures, 'job')} could not be read; their score shows "
                        f"{job_list.NO_VALUE}")
    if not rows:
        printer.line("The backend lists no jobs" + (f" with status {args.status}." if args.status else "."))
        return ExitCode.OK
    for line in job_list.table_lines(rows):
        printer.line(line)
    return ExitCode.OK



def run_compare(args: argparse.Namespace, *, printer: Printer | None = None) -> int:
    """``synth-tui compare JOB_A JOB_B --no-tui``: per metric and job, the points read, last,
    best and step, as a table (docs/product.md#compare-runs)."""
    printer = printer or Printer()
    return _run_listing(_compare(args, printer), printer)


async def _compare(args: argparse.Namespace, printer: Printer) -> int:
    session = LaunchSession(LaunchOptions.from_args(args))
    job_ids = open_comparison(session, args.job_ids)
    printer.secrets.extend(session.secret_values())
    async with session.client() as client:
        await session.probe_for_attach(client)
        runs = await read_runs(client, job_ids)
    rows = compare_rows(runs)
    if not rows:
        printer.line("None of these jobs has metrics yet.")
        return ExitCode.OK
    metric_width = max(len("METRIC"), *(len(row.metric) for row in rows))
    job_width = max(len("JOB"), *(len(row.job_id) for row in rows))

    def number(value: float | None) -> str:
        return "-" if value is None else shown_number(value)

    printer.line(f"{'METRIC':<{metric_width}}  {'JOB':<{job_width}}  {'POINTS':>6}  {'LAST':>10}  {'BEST':>10}  STEP")
    for row in rows:
        step = "-" if row.step is None else str(row.step)
        printer.line(f"{printable(row.metric):<{metric_width}}  {printable(row.job_id):<{job_width}}  {row.points:>6}  "
                     f"{number(row.last):>10}  {number(row.best):>10}  {step}")
    for run in runs:
        if run.truncated:
            printer.diag(f"{run.job_id}: more points than are read for a comparison; its start is shown.")
    return ExitCode.OK


# --------------------------------------------------------------------------- rollouts


def run_rollouts(args: argparse.Namespace, *, printer: Printer | None = None) -> int:
    """``synth-tui rollouts JOB_ID``: the rollouts the backend kept for a job, best first, as a
    table; ``--id`` one of them turn by turn; ``--json`` either as JSON (docs/product.md#rollouts)."""
    printer = printer or Printer()
    return _run_listing(_rollouts(args, printer), printer)


async def _rollouts(args: argparse.Namespace, printer: Printer) -> int:
    from dataclasses import asdict

    from app.core.runs import rollouts

    session = LaunchSession(LaunchOptions.from_args(args))
    session.attach(args.job_id)  # the id checked, the backend and key (from the run history when there)
    printer.secrets.extend(session.secret_values())
    async with session.client() as client:
        await session.probe_for_attach(client)
        if args.id is not None:
            rollout = await rollouts.get_rollout(client, args.job_id, args.id)
        else:
            summaries = await rollouts.list_rollouts(client, args.job_id, step=args.step, phase=args.phase)
    if args.id is not None:
        if args.json:
            printer.line(json.dumps(asdict(rollout), indent=2, ensure_ascii=False))
        else:
            for line in rollout_lines(rollout):
                printer.line(line)
        return ExitCode.OK
    if args.json:
        printer.line(json.dumps({"job_id": args.job_id, "rollouts": [asdict(s) for s in summaries]}, indent=2,
                                ensure_ascii=False))
        return ExitCode.OK
    if not summaries:
        which = " ".join(filter(None, [args.phase, f"step {args.step}" if args.step is not None else None]))
        printer.line(f"Job {args.job_id} has no kept {which + ' ' if which else ''}rollouts.")
        return ExitCode.OK
    for line in rollout_table(summaries):
        printer.line(line)
    return ExitCode.OK


def rollout_table(summaries: list[Any]) -> list[str]:
    """One row per rollout: id, phase, step, seed, reward, turns (in the order given: best first)."""
    width = max(len("ROLLOUT"), *(len(printable(s.rollout_id)) for s in summaries))
    lines = [f"{'ROLLOUT':<{width}}  {'PHASE':<5}  {'STEP':>6}  {'SEED':>8}  {'REWARD':>8}  {'TURNS':>5}"]
    for s in summaries:
        seed = "-" if s.seed is None else str(s.seed)
        lines.append(f"{printable(s.rollout_id):<{width}}  {printable(s.phase)[:5]:<5}  {s.step:>6}  {seed:>8}  "
                     f"{s.reward:>8.3f}  {s.turns:>5}")
    return lines


def rollout_lines(rollout: Any) -> list[str]:
    """One rollout turn by turn: what the policy saw, what it chose, what was applied, the reward."""
    s = rollout.summary
    seed = "-" if s.seed is None else s.seed
    lines = [f"Rollout {s.rollout_id}: {s.phase} step {s.step}, index {s.index}, seed {seed}, "
             f"reward {s.reward:.3f}, {counted(s.turns, 'turn')}"]
    for turn in rollout.turns:
        reward = "-" if turn.reward is None else f"{turn.reward:.3f}"
        lines.append("")
        lines.append(f"Turn {turn.index}{' (done)' if turn.done else ''}  reward {reward}")
        for text in turn.observation.splitlines() or [""]:
            lines.append(f"  | {text}")
        images = len(turn.images) + turn.images_omitted
        if images:
            lines.append(f"  images: {images} ({turn.images_omitted} not kept)" if turn.images_omitted
                         else f"  images: {images}")
        lines.append(f"  action:  {turn.action or '-'}")
        lines.append(f"  applied: {turn.applied or '-'}")
    if rollout.turns_cut:
        were = "was" if rollout.turns_cut == 1 else "were"
        lines.append(f"\n… {counted(rollout.turns_cut, 'more turn')} {were} not kept (the backend keeps at most "
                     "the first ones).")
    if not rollout.turns:
        lines.append("No turns were kept for this rollout.")
    return lines
