"""``--stream-format chart``: a plotext chart of the reward metric, redrawn in place.

Differs from the SDK on purpose: its RL chart tracks a metric its stream never passes, so it
never plots anything (docs/wire-contract.md#chart-mode). Ours plots the job's mean score (or ``--metric``).
"""

from __future__ import annotations

import re
import shutil
import time
from typing import TextIO

import plotext as plt

from app.core.api.wire import JobEvent, MetricPoint
from app.core.runs.events import event_line
from app.core.runs.series import MetricStore, default_metric, downsample, shown_number

CLEAR_SCREEN = "\x1b[H\x1b[2J"
ANSI_SEQUENCE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class TextChart:
    def __init__(self, out: TextIO, *, metric: str | None = None, live: bool = True,
                 min_interval: float = 0.25) -> None:
        self.out = out
        self.requested_metric = metric
        self.live = live
        self.min_interval = min_interval
        self.store = MetricStore()
        self.status = "unknown"
        self.last_event: JobEvent | None = None
        self._drawn_at = 0.0
        self._dirty = False

    @property
    def metric(self) -> str | None:
        return self.requested_metric or default_metric(self.store.names())

    def add_points(self, points: list[MetricPoint]) -> None:
        self._dirty |= bool(self.store.add(points))

    def set_status(self, status: str) -> None:
        self._dirty |= status != self.status
        self.status = status

    def add_event(self, event: JobEvent) -> None:
        self.last_event = event
        self._dirty = True

    def render(self, width: int, height: int) -> str:
        series = self.store.get(self.metric)
        title = f"{self.metric or 'waiting for metrics…'} | status={self.status}"
        plt.clear_figure()
        plt.theme("clear")
        plt.plotsize(width, max(height - 3, 8))
        plt.title(title)
        if series is not None and len(series):
            xs, ys = downsample(series.steps, series.values, max(width - 12, 10))
            plt.plot(xs, ys, marker="braille")
            plt.xlabel("step")
        chart = plt.build()
        lines = [chart]
        if series is not None and len(series):
            readouts = series.readouts()
            # A score's best and min; any other measure's min only once (Readouts.best_label).
            low = f"min: {_number(readouts.minimum)}  " if readouts.best_label == "best" else ""
            lines.append(f"latest: {_number(readouts.last)} (step {readouts.step})  "
                         f"{readouts.best_label}: {_number(readouts.best)}  {low}"
                         f"max: {_number(readouts.maximum)}")
        if self.last_event is not None:
            lines.append(f"event: {event_line(self.last_event)}")
        return "\n".join(lines)

    def draw(self, *, force: bool = False) -> None:
        """Redraw when something changed, at most every ``min_interval`` seconds."""
        now = time.monotonic()
        if not force and (not self._dirty or now - self._drawn_at < self.min_interval or not self.live):
            return
        size = shutil.get_terminal_size((100, 30))
        text = self.render(min(size.columns, 160), min(size.lines - 1, 40))
        if not self.live:  # a file or a pipe gets plain text: plotext's colour resets stay out
            text = ANSI_SEQUENCE.sub("", text)
        self.out.write((CLEAR_SCREEN if self.live else "") + text + "\n")
        self.out.flush()
        self._drawn_at = now
        self._dirty = False


def _number(value: float | None) -> str:
    """A readout as the dashboard writes it (series.shown_number: 1.49e-08, never 0.0000)."""
    return "—" if value is None else shown_number(value)
