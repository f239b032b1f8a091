"""The read-only commands without screens: ``history``, ``jobs`` and ``compare`` with
``--no-tui``, and ``rollouts`` (always headless): tables and turn-by-turn lines."""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Coroutine
from typing import Any

from app.core.api.wire import is_terminal_status
from app.core.errors import ExitCode, SynthTuiError
from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession
from app.core.redact import printable, redact_url
from app.core.runs.compare import compare_rows, open_comparison, read_runs
from app.core.runs.history import RunHistory, RunRecord, take_repair_notes
from app.core.runs.history_refresh import StatusAnswer, needs_refresh, problem_notes, refresh_statuses
from app.core.runs.series import shown_number
from app.core.text import counted
from app.headless.printer import Printer


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
    """``synth-tui compare JOB_A JOB_B --no-tui``: per metric and job, the points read, last (with
    its 95 % interval when the backend sent one), best and step, as a table (docs/product.md#compare-runs)."""
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

    printer.line(f"{'METRIC':<{metric_width}}  {'JOB':<{job_width}}  {'POINTS':>6}  {'LAST':>10}  {'CI95':>17}  "
                 f"{'BEST':>10}  STEP")
    for row in rows:
        step = "-" if row.step is None else str(row.step)
        # An evaluation's interval, when the backend sent one (docs/wire-contract.md#metrics).
        ci = "-" if row.interval is None else f"{number(row.interval.low)}-{number(row.interval.high)}"
        printer.line(f"{printable(row.metric):<{metric_width}}  {printable(row.job_id):<{job_width}}  {row.points:>6}  "
                     f"{number(row.last):>10}  {ci:>17}  {number(row.best):>10}  {step}")
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
