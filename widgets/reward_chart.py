"""The reward chart: a plotext plot of one metric with smoothing, zoom and readouts.

It redraws only when what it shows changed (data version, metric, smoothing, zoom or size),
at most ``max_fps`` times a second, from a copy downsampled to two points per column, so its
cost does not grow with the run.
"""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Static
from textual_plotext import PlotextPlot

from app.core.series import SMOOTHING_MODES, MetricStore, Readouts, default_metric, downsample, window

ZOOM_STEPS = 50


def format_readouts(readouts: Readouts, smoothing: str, zoomed: bool) -> str:
    def number(value: float | None) -> str:
        return "—" if value is None else f"{value:.4f}"

    rate = "—" if readouts.steps_per_minute is None else f"{readouts.steps_per_minute:.1f}/min"
    view = f"last {ZOOM_STEPS} steps" if zoomed else "all steps"
    return (f"last {number(readouts.last)}   best {number(readouts.best)}   min {number(readouts.minimum)}   "
            f"max {number(readouts.maximum)}   step {readouts.step if readouts.step is not None else '—'}   "
            f"rate {rate}   ·   m metric · s smoothing: {smoothing} · z zoom: {view}")


def integer_ticks(first: float, last: float, count: int = 6) -> list[int]:
    """Steps are whole numbers: label the x axis with integers, not 1.50."""
    first, last = int(first), int(last)
    if last <= first:
        return [first]
    stride = max(1, round((last - first) / (count - 1)))
    return list(range(first, last + 1, stride))


def plot_line(plt, xs: list[float], ys: list[float], banded: bool, *, color: str, label: str | None) -> None:
    """A downsampled series is drawn as two lines, its per-column lows and highs: one zigzag
    through both would stroke every column from min to max, and plotext's cost grows with
    the sub-pixels drawn (profiled: 40-56 ms a frame zigzag, about 20 ms as two lines)."""
    if banded:
        plt.plot(xs[0::2], ys[0::2], marker="braille", color=color, label=label)
        plt.plot(xs[1::2], ys[1::2], marker="braille", color=color)
    else:
        plt.plot(xs, ys, marker="braille", color=color, label=label)


class RewardChart(Vertical):
    metric: reactive[str | None] = reactive(None)
    smoothing: reactive[str] = reactive("none")
    zoomed: reactive[bool] = reactive(False)
    paused: reactive[bool] = reactive(False)

    def __init__(self, store: MetricStore, *, preferred_metric: str | None = None, max_fps: float = 4.0,
                 data_interval: float = 2.0, id: str | None = None) -> None:
        super().__init__(id=id)
        self.store = store
        self.preferred_metric = preferred_metric
        self.max_fps = max_fps
        self.redraws = 0
        self.data_interval = data_interval
        self._drawn_key: tuple | None = None
        self._drawn_at = 0.0

    def compose(self) -> ComposeResult:
        yield PlotextPlot(id="chart-plot")
        yield Static("waiting for metrics…", id="chart-readouts", markup=False)

    def on_mount(self) -> None:
        self.set_interval(1.0 / self.max_fps, self.redraw_if_changed, name="chart-redraw")

    # -- what to show ----------------------------------------------------------------------

    def data_changed(self) -> None:
        """New points arrived; the next tick redraws if they touch what is shown."""
        if self.metric is None or self.metric not in self.store.series:
            self.metric = self.preferred_metric if self.preferred_metric in self.store.series \
                else default_metric(self.store.names())

    def cycle_metric(self) -> None:
        names = self.store.names()
        if names:
            index = names.index(self.metric) + 1 if self.metric in names else 0
            self.metric = names[index % len(names)]
            self.redraw_if_changed()

    def cycle_smoothing(self) -> None:
        self.smoothing = SMOOTHING_MODES[(SMOOTHING_MODES.index(self.smoothing) + 1) % len(SMOOTHING_MODES)]
        self.redraw_if_changed()

    def toggle_zoom(self) -> None:
        self.zoomed = not self.zoomed
        self.redraw_if_changed()

    # -- drawing -----------------------------------------------------------------------------

    def _view_key(self) -> tuple:
        series = self.store.get(self.metric)
        plot = self.query_one(PlotextPlot)
        return (self.metric, series.version if series else -1, self.smoothing, self.zoomed, plot.size)

    def redraw_if_changed(self) -> None:
        """Redraw when the view changed (metric, smoothing, zoom, size: at once) or its data
        did (at most every ``data_interval`` seconds: a figure costs tens of milliseconds,
        and a reward curve gains nothing from more than one frame every couple of seconds)."""
        if self.paused:
            return
        key = self._view_key()
        if key == self._drawn_key:
            return
        only_data = self._drawn_key is not None and key[0] == self._drawn_key[0] and key[2:] == self._drawn_key[2:]
        if only_data and time.monotonic() - self._drawn_at < self.data_interval:
            return
        self._drawn_key = key
        self._drawn_at = time.monotonic()
        self.redraw()

    def redraw(self) -> None:
        plot = self.query_one(PlotextPlot)
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        series = self.store.get(self.metric)
        readouts = self.query_one("#chart-readouts", Static)
        if series is None or not len(series):
            plt.title("waiting for metrics…")
            readouts.update("waiting for metrics…")
            plot.refresh()
            return
        columns = max(plot.size.width - 10, 10)
        start = window(series.steps, ZOOM_STEPS if self.zoomed else None)
        banded = len(series) - start > 2 * columns  # downsample() then gives (min, max) pairs
        if self.smoothing != "none":
            xs, ys = downsample(series.steps, series.values, columns, start)
            plot_line(plt, xs, ys, banded, color="gray", label="raw")
        xs, ys = downsample(series.steps, series.smoothed(self.smoothing), columns, start)
        plot_line(plt, xs, ys, banded, color="cyan", label=self.smoothing if self.smoothing != "none" else None)
        plt.title(self.metric or "")
        plt.xlabel("step")
        ticks: list[float] = [*integer_ticks(xs[0], xs[-1])]  # plotext's stubs take floats; ints are floats
        plt.xticks(ticks)
        readouts.update(format_readouts(series.readouts(), self.smoothing, self.zoomed), layout=False)  # height 2
        self.redraws += 1
        plot.refresh()
