"""Figure 1: one chart's frame at 160x45 as the run grows (1k to 1M points).

Measured on the real path: a headless Textual app (``App.run_test(size=(160, 45))``) holding
a MetricsGrid on a MetricStore holding one metric, so one chart the grid's width. One sample
is one frame as the app makes it when data arrives: a point is added to the series (so no
frame repeats the last one and nothing cached for the view can answer it), the chart redraws
(``chart.redraw()``: downsample, the plotext calls), and Textual asks the plot for its lines
(``PlotCanvas.render_lines`` over its whole region: Textual's line cache calls
``render_line``, which has plotext fill its matrix and turns the rows into strips). Both are
called directly because ``refresh()`` only schedules the paint; the compositor's own pass
over the strips and the terminal write are not timed. The chart sits in the dashboard's own
layout and stylesheet (plot area about 94x38 at 160x45), and the data is a noisy rising
reward: with min/max downsampling, noise makes each column's stroke taller as more points
fall in it, and plotext's cost follows the strokes' height.
The notes split a frame into redraw (downsample + plotext calls) / plotext filling its
matrix / strips and Textual's lines (the rest), say how many of the plot's rows changed a
frame (only those become new strips: on a long run one more point moves few of them, on a
short one about half), and give the frame as it was before the
canvas: the same figure through textual-plotext's ANSI round trip (plotext's ANSI string,
``Text.from_ansi``, Textual turning the Text into lines), timed in the same run.

Baseline, same run, same widget: the naive chart that hands plotext every point (no
downsampling) and shows it the stock textual-plotext way (the ANSI round trip). It is timed
at 1k/10k/100k only: at 1M one build takes tens of seconds.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from functools import partial

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.geometry import Region
from textual.strip import Strip
from textual.visual import Visual, visualize
from textual.widget import Widget
from textual.widgets import Footer, Header, Static
from textual_plotext import PlotextPlot

from app.core.runs.series import MetricSeries, MetricStore
from app.screens.stylesheet import stylesheet_path
from benchmarks.common import Figure, below, child_main, median, say, time_calls
from widgets.compat.textual_plotext_compat import plotext_theme_name
from widgets.event_log import EventLog
from widgets.metric_chart import MetricChart
from widgets.metrics_grid import MetricsGrid
from widgets.plot_canvas import PlotCanvas

METRIC = "train.mean_score"
SIZE = (160, 45)


class DashboardLikeApp(App):
    """The dashboard's layout with the app's own stylesheet (same ids, so the same CSS
    rules): header, status line, the chart (3fr) beside the event log (2fr), footer. At
    160x45 the plot gets about 94x38 cells, as in the real dashboard. No feed: the
    benchmarks feed the widgets themselves. ``k`` is a no-op key that records when it ran."""

    CSS_PATH = str(stylesheet_path())
    BINDINGS = [Binding("k", "ping", "Ping")]

    def __init__(self, store: MetricStore, *, log_widget: Widget | None = None) -> None:
        super().__init__()
        self.store = store
        self.log_widget = log_widget
        self.pings: list[float] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("job_bench   running", id="dash-header", classes="flow-header")
        with Horizontal(id="dash-body"):
            yield MetricsGrid(self.store, id="dash-chart")
            yield self.log_widget if self.log_widget is not None else EventLog(id="dash-log")
        yield Footer()

    def action_ping(self) -> None:
        self.pings.append(time.perf_counter())


def make_series(count: int, seed: int = 7) -> MetricSeries:
    """``count`` points of a noisy rising reward, the same curve at every size (only the
    density changes), added one by one through the series' own ``add``."""
    rng = random.Random(seed)
    series = MetricSeries(METRIC)
    for step in range(count):
        series.add(float(step), 0.2 + 0.6 * (1 - math.exp(-4 * step / count)) + rng.gauss(0, 0.05), now=0.0)
    return series


def next_point(series: MetricSeries, rng: random.Random) -> None:
    """Data arrives: one more point of the same noisy curve, near its plateau."""
    series.add(float(len(series)), 0.8 + rng.gauss(0, 0.05), now=0.0)


def round_trip_lines(plot: PlotCanvas) -> list[Strip]:
    """The figure's lines the stock textual-plotext way: plotext's ANSI string (``build``),
    ``Text.from_ansi`` (``PlotextPlot.render``), and Textual turning that Text into lines, as
    a widget whose ``render`` returns Text gets them (``Widget._render_content``)."""
    width, height = plot.size
    text = PlotextPlot.render(plot)
    return Visual.to_strips(plot, visualize(plot, text), width, height, plot.visual_style)


def naive_frame(plot: PlotCanvas, series: MetricSeries, rng: random.Random) -> None:
    """What a chart without downsampling does: every point goes to plotext, shown the stock
    textual-plotext way."""
    next_point(series, rng)
    plt = plot.plt
    plt.clear_data()
    plt.clear_figure()
    plt.plot(list(series.steps), list(series.values), marker="braille")
    plt.title(METRIC)
    plt.xlabel("step")
    round_trip_lines(plot)


async def measure(quick: bool) -> list[Figure]:
    sizes = [1_000, 10_000] if quick else [1_000, 10_000, 100_000, 1_000_000]
    naive_sizes = {1_000, 10_000} if quick else {1_000, 10_000, 100_000}
    repeat = 4 if quick else 15
    store = MetricStore()
    store.series[METRIC] = make_series(10)
    figures: list[Figure] = []
    app = DashboardLikeApp(store)
    async with app.run_test(size=SIZE) as pilot:
        grid = app.query_one(MetricsGrid)
        grid.paused = True  # our samples only: the grid's own timer stays out of the timing
        grid.data_changed()
        while not grid.charts or not grid.charts[0].is_mounted:
            await pilot.pause()
        await pilot.pause()
        chart: MetricChart = grid.charts[0]
        plot = chart.query_one(PlotCanvas)
        width, height = plot.size
        say(f"chart: plot area {width}x{height}")
        rng = random.Random(11)

        def frame() -> None:
            next_point(series, rng)
            chart.redraw()
            plot.render_lines(Region(0, 0, width, height))

        def redraw_only() -> None:
            next_point(series, rng)
            chart.redraw()

        def matrix_only() -> None:
            # plotext filling its matrix for the figure just drawn (the canvas's first step).
            plot._fill_matrix(width, height, plotext_theme_name(plot, app.theme))

        def round_trip_frame() -> None:
            next_point(series, rng)
            chart.redraw()
            round_trip_lines(plot)

        for count in sizes:
            series = store.series[METRIC] = make_series(count)
            await pilot.pause()
            rows_before, builds_before = plot.rows_built, plot.builds
            samples = time_calls(frame, repeat)
            value = median(samples) or 0.0
            # Rows whose cells changed are made into strips anew; the others are reused
            # (on a long run one more point moves few of them).
            rows_per_frame = (plot.rows_built - rows_before) / max(plot.builds - builds_before, 1)
            redraw = median(time_calls(redraw_only, repeat)) or 0.0
            matrix = median(time_calls(matrix_only, repeat)) or 0.0
            round_trip = median(time_calls(round_trip_frame, repeat)) or 0.0
            rest = max(value - redraw - matrix, 0.0)
            breakdown = (f"redraw {redraw:.1f} ms, plotext matrix {matrix:.1f} ms, strips + Textual lines "
                         f"{rest:.1f} ms (the rest; {rows_per_frame:.0f} of {height} rows changed a frame); "
                         f"before the canvas (ANSI round trip, same figure) {round_trip:.1f} ms")
            base_samples: list[float] = []
            if count in naive_sizes:
                # Fewer repetitions where one build takes seconds; still a median.
                base_repeat = repeat if count < 10_000 else 3
                base_samples = time_calls(partial(naive_frame, plot, series, rng), base_repeat, warmup=0)
            base = median(base_samples)
            say(f"chart: {count:>9,} points  frame {value:.1f} ms ({breakdown})"
                + (f"  naive {base:.1f} ms (median of {len(base_samples)})" if base is not None else ""))
            label = f"{count // 1000:,}k" if count < 1_000_000 else f"{count // 1_000_000}M"
            figures.append(Figure(
                f"chart frame (data → redraw → lines), {label} points (median of {repeat})", value, "ms",
                baseline=base, baseline_label="naive: every point, ANSI round trip" if base is not None else "",
                goal="< 20 ms", met=below(value, 20.0), samples=samples,
                note=breakdown + ("" if base is not None else
                                  "; naive baseline skipped at 1M (one build takes tens of seconds)")))
            chart.redraw()  # leave the real view drawn between sizes

        # redraw_if_changed (what the grid's timer calls): unchanged data must not redraw;
        # one new point must, once the grid's data_interval has passed.
        grid.paused = False
        grid.redraw_if_changed()
        before = chart.redraws
        for _ in range(100):
            grid.redraw_if_changed()
        idle = chart.redraws - before
        series = store.series[METRIC]
        series.add(float(len(series)), 0.5, now=0.0)
        added = time.monotonic()
        limit = grid.data_interval + 1.0
        while chart.redraws == before + idle and time.monotonic() - added < limit:
            grid.redraw_if_changed()
            await asyncio.sleep(0.05)
        after_change, delay = chart.redraws - before - idle, time.monotonic() - added
        say(f"chart: redraws on 100 unchanged ticks {idle}; after one new point {after_change} ({delay:.2f} s later)")
        figures.append(Figure("chart redraws on 100 ticks with unchanged data", idle, "",
                              goal="0 (and 1 after a new point)", met=idle == 0 and after_change == 1,
                              note=f"redraws after one new point: {after_change}, {delay:.2f} s after it arrived "
                                   f"(the grid's data_interval: {grid.data_interval} s)"))
    # "Flat": the largest run against the smallest, same run (ratio column).
    small, large = figures[0], figures[len(sizes) - 1]
    if small.value and large.value:
        say(f"chart: {sizes[-1]:,}-point frame costs {large.value / small.value:.2f}x the 1k one")
        figures.insert(len(sizes), Figure(
            f"chart flatness: {large.name.split(', ')[1].split(' (')[0]} vs 1k points", large.value, "ms",
            baseline=small.value, baseline_label="1k points", goal="flat (ratio < 1.5x)",
            met=large.value / small.value < 1.5))
    return figures


def run(quick: bool) -> list[Figure]:
    return asyncio.run(measure(quick))


if __name__ == "__main__":
    child_main("bench_chart", run)
