"""The metrics grid: every metric the job emits at once, one small chart per measure.

train and eval of a measure share a chart (``app.core.series.chart_panels``); the legend
sits in the chart's border, outside the data. One chart has focus (``m`` moves it, Tab too);
``f`` shows it full size. When the grid is too short for plots (80x24), each chart becomes
a few text rows: a sparkline and the numbers per series. Earlier runs are overlaid as dimmed
lines (docs/product.md#compare-runs).

Each chart redraws only when what it shows changed (no polling: new data, a key, a resize
ask), new data at most every ``data_interval`` seconds, from a copy downsampled to two points per column, so its cost
does not grow with the run (docs/product.md#metrics-grid). plotext draws each plot; a
``PlotCanvas`` (widgets/plot_canvas.py) paints plotext's matrix straight into Textual's lines.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.events import Resize
from textual.reactive import reactive
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Static

from app.core.compare import ComparedRun
from app.core.series import (
    SMOOTHING_MODES,
    ChartPanel,
    MetricSeries,
    MetricStore,
    Readouts,
    chart_panels,
    downsample,
    shown_number,
    sparkline,
    split_label,
    window,
)
from widgets.plot_canvas import PlotCanvas

ZOOM_STEPS = 50
# A plot needs this many rows inside its border to say anything; below it, text rows.
MIN_PLOT_ROWS = 9
# The live series' colours by split (plotext names) and their legend equivalents (Rich).
LIVE_COLORS = ("cyan", "orange", "green", "magenta")
LEGEND_COLORS = {"cyan": "cyan", "orange": "darkorange", "green": "green", "magenta": "magenta",
                 "gray": "gray"}  # names Textual's markup parses (not Rich's dark_orange, grey50)
# Earlier runs: dim, distinct greys, so the live run stands out.
OVERLAY_COLORS = ((120, 120, 150), (150, 120, 120), (120, 150, 120), (140, 140, 140))


def number(value: float | None) -> str:
    if value is None:
        return "—"
    return shown_number(value)


def format_readouts(readouts: Readouts, *, full: bool) -> str:
    """A chart's numbers: last, best and step always; min, max and rate when there is room."""
    step = readouts.step if readouts.step is not None else "—"
    text = f"last {number(readouts.last)}  best {number(readouts.best)}  step {step}"
    if full:
        rate = "—" if readouts.steps_per_minute is None else f"{readouts.steps_per_minute:.1f}/min"
        text += f"  min {number(readouts.minimum)}  max {number(readouts.maximum)}  rate {rate}"
    return text


def integer_ticks(first: float, last: float, count: int = 6) -> list[int]:
    """Steps are whole numbers: label the x axis with integers, not 1.50."""
    first, last = int(first), int(last)
    if last <= first:
        return [first]
    stride = max(1, round((last - first) / (count - 1)))
    return list(range(first, last + 1, stride))


def plot_line(plt, xs: list[float], ys: list[float], banded: bool, *, color: object) -> None:
    """A downsampled series is drawn as two lines, its per-column lows and highs: one zigzag
    through both would stroke every column from min to max, and plotext's cost grows with
    the sub-pixels drawn (profiled: 40-56 ms a frame zigzag, about 20 ms as two lines)."""
    if banded:
        plt.plot(xs[0::2], ys[0::2], marker="braille", color=color)
        plt.plot(xs[1::2], ys[1::2], marker="braille", color=color)
    else:
        plt.plot(xs, ys, marker="braille", color=color)


def rich_color(color: object) -> str:
    """A plotext colour (a name or an RGB tuple) as markup names it."""
    if isinstance(color, tuple):
        return f"rgb({color[0]},{color[1]},{color[2]})"
    return LEGEND_COLORS.get(str(color), str(color))


def legend_mark(color: object) -> str:
    return f"[{rich_color(color)}]━[/]"


class MetricChart(Vertical):
    """One panel of the grid: its measure's live series and the overlays' lines of it."""

    can_focus = True

    def __init__(self, panel: ChartPanel, grid: MetricsGrid) -> None:
        super().__init__(classes="metric-chart")
        self.panel = panel
        self.grid = grid
        self.redraws = 0
        self._plot: PlotCanvas | None = None  # set on mount
        self._drawn_key: tuple | None = None
        self._drawn_at = 0.0
        self._legend: str | None = None  # the title redraw set last

    def compose(self) -> ComposeResult:
        yield PlotCanvas(classes="chart-plot")
        yield Static("", classes="chart-lines", markup=True)
        yield Static("waiting for metrics…", classes="chart-readouts", markup=False)

    def on_mount(self) -> None:
        self._plot = self.query_one(PlotCanvas)
        self.show_legend()
        self.grid.call_after_refresh(self.grid.arrange_charts)  # a new chart: the grid gains a cell

    # -- what it shows -------------------------------------------------------------------

    def live_series(self) -> list[tuple[MetricSeries, str]]:
        """(series, colour) of the live run, in legend order."""
        found = []
        for index, name in enumerate(self.panel.series):
            series = self.grid.store.get(name)
            if series is not None and len(series):
                found.append((series, LIVE_COLORS[index % len(LIVE_COLORS)]))
        return found

    def overlay_series(self) -> list[tuple[MetricSeries, tuple[int, int, int], str]]:
        """(series, colour, label) of the earlier runs: their lead series of this measure."""
        found = []
        for index, run in enumerate(self.grid.overlays):
            for name in self.panel.series:
                series = run.store.get(name)
                if series is not None and len(series):
                    found.append((series, OVERLAY_COLORS[index % len(OVERLAY_COLORS)],
                                  f"{run.label} {split_label(name)}"))
                    break
        return found

    def legend(self) -> str:
        focus = "▶ " if self.has_focus or self.grid.focused_panel == self.panel.key else ""
        live_label = f"{self.grid.live_label} " if self.grid.live_label else ""
        parts = [f"[b]{focus}{self.panel.title}[/b]"]
        parts += [f"{legend_mark(LIVE_COLORS[i % len(LIVE_COLORS)])} {live_label}{split_label(name)}"
                  for i, name in enumerate(self.panel.series)]
        parts += [f"{legend_mark(color)} [dim]{label}[/]" for _, color, label in self.overlay_series()]
        live = self.live_series()
        if live and self.has_class("-compact"):  # no readouts row: the step goes here
            parts.append(f"step {live[0][0].readouts().step}")
        return "  ".join(parts)

    def _view_key(self) -> tuple:
        """What the chart shows; checked ten times a second, so it queries no widget."""
        versions = tuple(s.version for s, _ in self.live_series())
        # The chart's own size too: text rows are sized to it, and the plot is hidden then.
        plot_size = self._plot.size if self._plot is not None else None
        return (versions, self.grid.overlays_version, self.grid.smoothing, self.grid.zoomed, plot_size,
                self.content_size, self.has_class("-compact"), self.grid.full)

    # -- drawing -------------------------------------------------------------------------

    def redraw_if_changed(self, *, now: float, force: bool = False) -> float | None:
        """Redraw when the view changed (smoothing, zoom, size, overlays: at once) or its
        data did (at most every ``data_interval`` seconds: a figure costs tens of ms).
        Returns the seconds until a held-back data redraw is due, else None."""
        if self._plot is None or not self.content_size.width:
            return None  # not mounted or not laid out yet (its resize comes back here)
        key = self._view_key()
        if key == self._drawn_key:
            return None
        only_data = self._drawn_key is not None and key[1:] == self._drawn_key[1:]
        wait = self.grid.data_interval - (now - self._drawn_at)
        if only_data and not force and wait > 0:
            return wait
        self._drawn_key = key
        self._drawn_at = now
        self.redraw()
        return None

    def on_resize(self) -> None:
        self.grid.redraw_if_changed()

    def redraw(self) -> None:
        self.show_legend()
        if self.has_class("-compact"):
            self._draw_lines()
        else:
            self._draw_plot()
        self.redraws += 1

    def _labelled(self) -> list[tuple[MetricSeries, object, str, bool]]:
        """(series, colour, legend label, is an overlay) of every line of the chart."""
        live_label = f"{self.grid.live_label} " if self.grid.live_label else ""
        rows: list[tuple[MetricSeries, object, str, bool]] = [
            (series, color, f"{live_label}{split_label(series.name)}", False) for series, color in self.live_series()]
        rows += [(series, color, label, True) for series, color, label in self.overlay_series()]
        return rows

    def _readouts(self) -> str:
        """One row per line (labelled when the chart has several), the live run's first: all
        its numbers when the row fits, else fewer; an earlier run's row is its last and best."""
        lines = self._labelled()
        if not lines:
            return "waiting for metrics…"
        # Live and earlier runs' labels are aligned among themselves: a long run id does not
        # push the live run's numbers out of its row.
        widths = {kind: max((len(label) for *_, label, overlay in lines if overlay == kind), default=0)
                  for kind in (False, True)}
        room = self.content_size.width
        rows = []
        for series, _, label, overlay in lines:
            name = f"{label:<{widths[overlay]}}  " if len(lines) > 1 else ""
            readouts = series.readouts()
            short = f"{name}{number(readouts.last)}  best {number(readouts.best)}"
            choices = [short] if overlay else [name + format_readouts(readouts, full=True),
                                               name + format_readouts(readouts, full=False), short]
            rows.append(next((row for row in choices if len(row) <= room), choices[-1]))
        return "\n".join(rows)

    def _draw_lines(self) -> None:
        """Too short for a plot: a sparkline and the numbers per line, one row each, placed
        by step and scaled together so they compare at a glance (overlays dimmed)."""
        views = []
        for series, color, label, overlay in self._labelled():
            start = window(series.steps, ZOOM_STEPS if self.grid.zoomed else None)
            steps, values = series.steps[start:], series.smoothed(self.grid.smoothing)[start:]
            if len(steps):
                views.append((series, color, label, overlay, steps, values))
        if not views:
            self.query_one(".chart-lines", Static).update("waiting for metrics…")
            return
        span = (min(v[4][0] for v in views), max(v[4][-1] for v in views))
        scale = (min(min(v[5]) for v in views), max(max(v[5]) for v in views))
        label_width = max(6, *(len(v[2][:24]) for v in views))
        width = max(self.content_size.width, 24)
        rows = []
        for series, color, label, overlay, steps, values in views:
            readouts = series.readouts()
            name = f"{label[:24]:<{label_width}}"
            numbers = f"{number(readouts.last)}  best {number(readouts.best)}"
            spark_width = max(4, width - 2 - len(name) - 2 - len(numbers))
            line = sparkline(steps, values, spark_width, span=span, scale=scale)
            style = rich_color(color)
            shown = f"[dim]{name}[/]" if overlay else name
            rows.append(f"{legend_mark(color)} {shown} [{style}]{line}[/] {numbers}")
        self.query_one(".chart-lines", Static).update("\n".join(rows))

    def _draw_plot(self) -> None:
        plot = self.query_one(PlotCanvas)
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        readouts = self.query_one(".chart-readouts", Static)
        live = self.live_series()
        if not live:
            plt.title("waiting for metrics…")
            readouts.update("waiting for metrics…")
            plot.figure_changed()
            return
        columns = max(plot.size.width - 10, 10)
        smoothing = self.grid.smoothing
        first = last = None
        drawn = [self._line(plt, earlier, columns, color=dim, smoothing=smoothing)
                 for earlier, dim, _ in self.overlay_series()]
        for index, (series, color) in enumerate(live):
            if smoothing != "none" and index == 0:
                self._line(plt, series, columns, color="gray", smoothing="none")
            drawn.append(self._line(plt, series, columns, color=color, smoothing=smoothing))
        for xs in drawn:  # the axis spans every line drawn, overlays included
            if xs:
                first = xs[0] if first is None else min(first, xs[0])
                last = xs[-1] if last is None else max(last, xs[-1])
        if first is not None and last is not None:
            ticks: list[float] = [*integer_ticks(first, last)]  # plotext's stubs take floats
            plt.xticks(ticks)
        text = self._readouts()
        # A new row count (an overlay added or removed) needs a layout pass; same rows do not.
        readouts.update(text, layout=text.count("\n") != str(readouts.content).count("\n"))
        plot.figure_changed()

    def _line(self, plt, series: MetricSeries, columns: int, *, color: object, smoothing: str) -> list[float]:
        start = window(series.steps, ZOOM_STEPS if self.grid.zoomed else None)
        banded = len(series) - start > 2 * columns  # downsample() then gives (min, max) pairs
        xs, ys = downsample(series.steps, series.smoothed(smoothing), columns, start)
        if xs:
            plot_line(plt, xs, ys, banded, color=color)
        return xs

    def on_focus(self) -> None:
        self.grid.focused_panel = self.panel.key

    def on_blur(self) -> None:
        self.show_legend()

    def show_legend(self) -> None:
        legend = self.legend()
        if legend != self._legend:  # setting the title repaints the frame, even to the same text
            self._legend = legend
            self.border_title = legend


class MetricsGrid(Vertical):
    """The charts of one job's metrics, with earlier runs' lines overlaid."""

    focused_panel: reactive[str | None] = reactive(None)
    smoothing: reactive[str] = reactive("none")
    zoomed: reactive[bool] = reactive(False)
    paused: reactive[bool] = reactive(False)
    full: reactive[bool] = reactive(False)

    def __init__(self, store: MetricStore, *, preferred_metric: str | None = None, data_interval: float = 2.0,
                 overlay_key: bool = True, id: str | None = None) -> None:
        """``overlay_key``: the screen binds o to choose overlays (the status line says so)."""
        super().__init__(id=id)
        self.overlay_key = overlay_key
        # The share of its parent's height the grid may take (the dashboard's narrow layout
        # stacks it over the log): whether plots fit is judged on that, not on the grid's
        # own height, which shrinks to its text rows when they are shown.
        self.height_share = 1.0
        # A name for the live run's lines in the legend, where several runs are compared.
        self.live_label: str | None = None
        self.store = store
        self.preferred_metric = preferred_metric
        self.data_interval = data_interval
        self._due: float | None = None  # when the scheduled data redraw runs (monotonic)
        self._due_timer: Timer | None = None
        self.overlays: list[ComparedRun] = []
        self.overlays_version = 0
        self.panels: list[ChartPanel] = []
        self._charts: list[MetricChart] = []  # in the order mounted; a chart is never removed

    def compose(self) -> ComposeResult:
        yield Static("waiting for metrics…", id="grid-status", markup=True)
        yield Vertical(id="grid-cells")


    # -- the charts ------------------------------------------------------------------------

    @property
    def charts(self) -> list[MetricChart]:
        return self._charts

    def chart(self, key: str | None) -> MetricChart | None:
        return next((c for c in self.charts if c.panel.key == key), None)

    @property
    def redraws(self) -> int:
        return sum(chart.redraws for chart in self.charts)

    def data_changed(self) -> None:
        """New points arrived: new measures get a chart; what changed is redrawn, or when due."""
        names = self.store.names() + [n for run in self.overlays for n in run.store.names()
                                      if n not in self.store.series]
        panels = chart_panels(names, self.preferred_metric)
        if [p.key for p in panels] == [p.key for p in self.panels] and \
                all(a.series == b.series for a, b in zip(panels, self.panels, strict=True)):
            self.redraw_if_changed()
            return
        self.panels = panels
        cells = self.query_one("#grid-cells")
        by_key = {chart.panel.key: chart for chart in self.charts}
        for panel in panels:
            chart = by_key.get(panel.key)
            if chart is None:
                chart = MetricChart(panel, self)
                self._charts.append(chart)
                cells.mount(chart)
            else:
                chart.panel = panel
                chart._drawn_key = None
        if self.focused_panel is None and panels:
            self.focused_panel = panels[0].key
        self.call_after_refresh(self.arrange_charts)

    def set_overlays(self, runs: Sequence[ComparedRun]) -> None:
        self.overlays = list(runs)
        self.overlays_version += 1
        self.data_changed()
        self._show_status()

    def redraw_if_changed(self, *, force: bool = False) -> None:
        """Redraw the charts whose view changed; a data redraw not yet due is scheduled for
        the moment it is due, so the chart follows the log then, without polling."""
        if self.paused:
            return
        now = time.monotonic()
        waits = [wait for chart in self.charts if chart.display
                 and (wait := chart.redraw_if_changed(now=now, force=force)) is not None]
        if waits and (self._due is None or self._due > now + min(waits)):
            if self._due_timer is not None:
                self._due_timer.stop()
            self._due = now + min(waits)
            self._due_timer = self.set_timer(min(waits), self._redraw_due, name="grid-redraw-due")

    def _redraw_due(self) -> None:
        self._due, self._due_timer = None, None
        self.redraw_if_changed()

    def flush(self) -> None:
        """Draw what arrived now, throttle or not (the job ended: the final picture)."""
        self.redraw_if_changed(force=True)

    # -- keys ------------------------------------------------------------------------------

    def focus_next_chart(self, step: int = 1) -> None:
        keys = [p.key for p in self.panels]
        if not keys:
            return
        index = keys.index(self.focused_panel) + step if self.focused_panel in keys else 0
        self.focused_panel = keys[index % len(keys)]
        chart = self.chart(self.focused_panel)
        if chart is not None and (self.screen.focused is None or isinstance(self.screen.focused, MetricChart)):
            chart.focus()

    def cycle_smoothing(self) -> None:
        self.smoothing = SMOOTHING_MODES[(SMOOTHING_MODES.index(self.smoothing) + 1) % len(SMOOTHING_MODES)]

    def toggle_zoom(self) -> None:
        self.zoomed = not self.zoomed

    def toggle_full(self) -> None:
        self.full = not self.full

    def watch_focused_panel(self) -> None:
        for chart in self.charts:
            chart.show_legend()
            chart.set_class(chart.panel.key == self.focused_panel, "-focused")
        if self.full:
            self.arrange_charts()
        self._show_status()

    def watch_smoothing(self) -> None:
        self._show_status()
        self.redraw_if_changed()

    def watch_zoomed(self) -> None:
        self._show_status()
        self.redraw_if_changed()

    def watch_full(self) -> None:
        self.arrange_charts()

    def watch_paused(self, paused: bool) -> None:
        if not paused:
            self.redraw_if_changed()

    # -- layout ----------------------------------------------------------------------------

    def on_resize(self, event: Resize) -> None:
        self.arrange_charts()

    def arrange_charts(self) -> None:
        """Two columns when wide, plots when tall enough, else text rows; full size shows
        the focused chart alone."""
        charts = self.charts
        cells = self.query_one("#grid-cells")
        if not charts:
            return
        width = cells.size.width or self.size.width
        if self.height_share < 1.0 and isinstance(self.parent, Widget):
            height = max(int(self.parent.size.height * self.height_share) - 1, 1)  # less the status line
        else:
            height = max(cells.size.height or self.size.height - 1, 1)
        shown = [c for c in charts if not self.full or c.panel.key == self.focused_panel] or charts[:1]
        for chart in charts:
            chart.display = chart in shown
        columns = 2 if width >= 90 and len(shown) > 1 else 1
        rows = math.ceil(len(shown) / columns)
        # Each line of a chart has a readouts row under its plot: more lines, more rows needed.
        lines = max((len(chart._labelled()) for chart in shown), default=1)
        compact = not self.full and height // rows < MIN_PLOT_ROWS + max(lines, 1) - 1
        cells.set_class(compact, "-compact")
        self.set_class(compact, "-compact")
        for chart in charts:
            chart.set_class(compact, "-compact")
        if compact:
            cells.styles.layout = "vertical"
        else:
            cells.styles.layout = "grid"
            cells.styles.grid_size_columns = columns
            cells.styles.grid_size_rows = rows
        for index, chart in enumerate(shown):  # an odd last chart spans the row, not half of it
            chart.styles.column_span = columns if index == len(shown) - 1 and len(shown) % columns else 1
        self._show_status()
        self.redraw_if_changed(force=True)

    def _show_status(self) -> None:
        if not self.is_mounted:
            return
        focused = next((p for p in self.panels if p.key == self.focused_panel), None)
        view = f"last {ZOOM_STEPS} steps" if self.zoomed else "all steps"
        overlays = f"{len(self.overlays)} overlaid" if self.overlays else ""
        if self.overlay_key:
            overlays = f"o overlays: {len(self.overlays)}" if self.overlays else "o overlay"
        parts = [f"[b]{focused.title}[/b]" if focused else "waiting for metrics…",
                 "m chart", f"f {'grid' if self.full else 'full size'}", f"s {self.smoothing}", f"z {view}", overlays]
        parts = [part for part in parts if part]
        self.query_one("#grid-status", Static).update(" · ".join(parts), layout=False)
