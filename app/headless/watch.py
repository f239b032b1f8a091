"""A job watched as printed lines: the SDK's ``cli`` stream format or ``--stream-format chart``,
its end and the trained model's path; for a job just created (``train --no-tui``) or an
existing one (``attach --no-tui``)."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from app.core.api.streaming import (
    BackendGaveUp,
    ConnectionState,
    NewEvents,
    NewMetrics,
    StatusChanged,
    Update,
    WatchEnded,
)
from app.core.api.wire import JobEvent, JobStatus, MetricPoint
from app.core.errors import ExitCode, SynthTuiError
from app.core.launch import service
from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession
from app.core.runs.events import event_line, is_noise, metric_line, status_line
from app.core.runs.model import saved_model
from app.core.runs.series import BASELINE_METRIC, MetricStore, baseline_change
from app.core.runs.watch import WatchSink, run_sinks, watch
from app.headless.printer import Printer
from app.headless.text_chart import TextChart


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


class PrinterSink(WatchSink):
    """The watch as printed lines: a sink of the job's watch (app/core/runs/watch.py), beside
    the events file and the history every watch keeps."""

    def __init__(self, printer: Printer, view: LineView | ChartView) -> None:
        self.printer = printer
        self.view = view
        self.hidden = 0
        self.ended: WatchEnded | None = None
        self.evals = MetricStore()  # the evaluations, for the final line's change from step 0

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
            self.evals.add(p for p in update.points if p.name == BASELINE_METRIC)
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
    files, history = run_sinks(job_id)
    try:
        async with service.watch_client(session) as client:
            await watch(client, job_id, session.watch_options(), [files, history, shown])
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
        if (moved := baseline_change(shown.evals)) is not None:  # eval 0.31 -> 0.92, +0.61 +/- 0.09
            printer.line(moved)
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
