"""``synth-tui train --no-tui``: the train flow as the SDK's printed lines
(docs/wire-contract.md#headless-output): the config, the .env and its keys, the checks, the
payload and the job's creation, then the watch (``app.headless.watch``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from app.core.api.results import CreateResult
from app.core.config import rl as cfg
from app.core.config.toml_source import read_config_text
from app.core.env.keys import REQUIRED_KEYS
from app.core.env.resolve import ResolvedKey, source_of_flag_key
from app.core.errors import INTERRUPTED_BEFORE_A_JOB, ExitCode, SynthTuiError, UsageError
from app.core.launch import service
from app.core.launch.diagnosis import BackendCheck, ModelCheck, TaskAppCheck, model_summary
from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession
from app.core.launch.steps import PreparedJob
from app.core.redact import mask_secret
from app.core.text import cut_at_line
from app.headless.printer import Printer
from app.headless.watch import stream_job

# The SDK prints this much of the payload before it is sent (docs/wire-contract.md#flow-lines).
PAYLOAD_PREVIEW_CHARS = 800


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
    # The one read of the config: a file that cannot be read, or one with problems, stops here,
    # before the .env is read (a bad key must not hide a broken config); prepare() builds from
    # this report.
    report = session.validate(config_path, strict=True)
    report.raise_if_invalid()  # the config's own problems first: finding them needs no key
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
        service.require_configs(run.options.config_paths)  # the TUI's words and exit code for a missing file
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
    return {"flag": source_of_flag_key(key), "shell": "shell environment", "file": ".env file",
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
        other = task_app.other_environment
        if other is not None:
            printer.warning(f"Task app: {other.message} Fix: {other.fix}")
    else:
        printer.line(f"Task app health: FAILED ({report.detail})")
        for attempt in report.attempts:
            if not attempt.ok:
                fix = f" Fix: {attempt.fix}" if attempt.fix else ""
                printer.diag(f"  {attempt.endpoint}: {attempt.reason}.{fix}")


HEADLESS_UNFINISHED_FIX = ("run the command again for the check's answer (the backend goes on with the check and "
                           "answers at once when it has finished), or let the job check the model as it loads it")


def _print_model_check(check: ModelCheck, printer: Printer) -> None:
    """`Model check: OK (…)` or FAILED, and each warning (docs/wire-contract.md#flow-lines)."""
    result = check.result
    if result is None:
        why = check.error.message if check.error is not None else f"no answer within {check.timeout_s:g} s"
        printer.line(f"Model check: FAILED ({check.tried}: {why})")
        return
    if not result.finished:  # no verdict on the model; the fix says what a headless run can do
        said = result.warnings[0].message if result.warnings else "no answer within the backend's bound"
        printer.line(f"Model check: NOT FINISHED ({check.tried}: {said})")
        printer.warning(f"Model check: {said}. Fix: {HEADLESS_UNFINISHED_FIX}")
        return
    # Its problems are the verdict's: run_checks ends with them (Error:, Also:), each said once.
    printer.line(f"Model check: {'OK' if result.ok else 'FAILED'} ({check.tried}: {model_summary(result)})")
    for finding in result.warnings:
        printer.warning(f"Model check: {finding.message}." + (f" Fix: {finding.fix}" if finding.fix else ""))


async def create_job(session: LaunchSession, prepared: PreparedJob, printer: Printer) -> str:
    """The launch service's submit, with the SDK's lines: the payload, the answer."""
    printer.line("Payload preview:")
    printer.line(cut_at_line(json.dumps(prepared.payload, indent=2, ensure_ascii=False), PAYLOAD_PREVIEW_CHARS,
                             "--dry-run prints the whole payload"))
    printer.diag(f"Idempotency-Key: {session.idempotency_key}")

    def answered(result: CreateResult) -> None:
        printer.line(f"Response {result.status}: {result.response.preview(400)}")

    submitted = await service.submit(session, prepared.payload, config_path=str(prepared.config_path),
                                      answered=answered)
    printer.warning(submitted.history_warning)
    return submitted.job.job_id
