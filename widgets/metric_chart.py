"""One chart of the metrics grid (widgets/metrics_grid.py): a measure's lines, the live run's
and earlier runs' (dimmed), with the legend in its top border and a readouts row; as a few text
rows (a sparkline and the numbers per line) when the grid is too short for plots.

It redraws only when what it shows changed (its data, size, overlays, smoothing or zoom), new
data at most every ``data_interval`` seconds of its grid, from a copy downsampled to two points
per column. plotext draws the plot; ``PlotCanvas`` (widgets/plot_canvas.py) paints it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.cells import cell_len
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.widgets import Static

from app.core.runs.series import (
    SPLITS,
    ChartPanel,
    MetricSeries,
    Readouts,
    axis_ticks,
    downsample,
    shown_number,
    small_axis,
    sparkline,
    split_label,
    split_slot,
    window,
)
from widgets.plot_canvas import PlotCanvas

if TYPE_CHECKING:
    from widgets.metrics_grid import MetricsGrid

ZOOM_STEPS = 50  # the steps a zoomed chart shows


# The live series' colours by split (plotext names) and their legend equivalents (Rich).
LIVE_COLORS = ("cyan", "orange", "green", "magenta")
LEGEND_COLORS = {"cyan": "cyan", "orange": "darkorange", "green": "green", "magenta": "magenta",
                 "gray": "gray"}  # names Textual's markup parses (not Rich's dark_orange, grey50)
# Earlier runs: dim, distinct greys, so the live run stands out.
OVERLAY_COLORS = ((120, 120, 150), (150, 120, 120), (120, 150, 120), (140, 140, 140))
# A line's plotext marker and the glyph its legend shows. An earlier run's train and eval
# share its grey, so its second line onwards is dotted (docs/product.md#compare-runs).
SOLID = ("braille", "━")
DOTTED = ("•", "┅")
# Without colour (NO_COLOR), every line of a chart has its own glyph, the live run's train
# solid; a series keeps its glyph on every chart of a view, as it is chosen by the series'
# run and split, not its place in one chart (series_mark). The raw line behind a smoothed one
# is small dots (docs/product.md#metrics-grid).
NO_COLOR_LINES = (SOLID, ("•", "•"), ("x", "x"), ("+", "+"), ("o", "o"), ("*", "*"), ("#", "#"), ("=", "="),
                  ("%", "%"), ("@", "@"))
RAW_NO_COLOR = ("·", "·")


def series_mark(run_index: int, slot: int) -> tuple[str, str]:
    """The (marker, glyph) of a series without colour: by its run (0 the live one) and its
    split (``split_slot``), so the live eval is the same mark in every chart, and an earlier
    run's train never takes it where the live run has no eval."""
    return NO_COLOR_LINES[(run_index * len(SPLITS) + slot) % len(NO_COLOR_LINES)]


@dataclass(frozen=True)
class Line:
    """One line of a chart: a series and how it is drawn and named."""

    series: MetricSeries
    color: object
    run: str  # its run's short label ("" for the live run of a dashboard)
    split: str  # "train", "eval", or the series' name when it has no split
    overlay: bool
    marker: str  # plotext's
    glyph: str  # its legend mark

    @property
    def label(self) -> str:
        return f"{self.run} {self.split}" if self.run else self.split

    def short_run(self, run_chars: int | None) -> str:
        """The run's label cut to ``run_chars`` characters (None: whole; 0: left out)."""
        if run_chars is None or not self.run:
            return self.run
        bare = self.run.removesuffix("…")
        return "" if run_chars <= 0 else self.run if len(bare) <= run_chars else bare[:run_chars] + "…"

    def short_label(self, run_chars: int | None) -> str:
        """The label with the run's id cut to ``run_chars`` characters (0: left out), never
        the split: a legend that must shrink loses the ids' tails first."""
        run = self.short_run(run_chars)
        return f"{run} {self.split}" if run else self.split


# A legend too long for its chart's top border tries these in turn, rather than let the border
# cut it at its end: an entry per line ("lines": the live run's splits, each earlier run's
# id and split) or, for the earlier runs, one per run ("runs": its lines' marks, then its id
# once: ━┅ c9d75d…, the dotted one its eval); the runs' ids cut to so many characters (None:
# as run_labels made them; 0: the glyph and the split alone, the readouts rows below name
# every run); two spaces between entries, then one. Every run keeps its whole short id
# before any id is cut (two or three earlier runs at 80 columns: the "runs" form).
LEGEND_FITS = (("lines", None, "  "), ("lines", 6, "  "), ("lines", None, " "), ("lines", 6, " "),
               ("runs", None, "  "), ("runs", None, " "), ("lines", 4, " "), ("runs", 4, " "), ("lines", 2, " "),
               ("lines", 0, " "))
LEGEND_LAST_RUN_CHARS = 2  # the ids in a legend that names only its first lines
LEGEND_BORDER_CELLS = 4  # the border's corners and the rule either side of the title


def number(value: float | None) -> str:
    if value is None:
        return "—"
    return shown_number(value)


def best_text(readouts: Readouts) -> str:
    """A score's best, any other measure's min (``Readouts.best_label``)."""
    return f"{readouts.best_label} {number(readouts.best)}"


def format_readouts(readouts: Readouts, *, full: bool) -> str:
    """A chart's numbers: last, best (min for a measure that is not a score) and step always;
    min, max and the rate when there is room."""
    step = readouts.step if readouts.step is not None else "—"
    text = f"last {readouts.last_text}  {best_text(readouts)}  step {step}"
    if full:
        rate = "—" if readouts.steps_per_minute is None else f"{readouts.steps_per_minute:.1f} steps/min"
        low = f"  min {number(readouts.minimum)}" if readouts.best_label == "best" else ""
        text += f"{low}  max {number(readouts.maximum)}  rate {rate}"
    return text


def integer_ticks(first: float, last: float, count: int = 6) -> list[int]:
    """Steps are whole numbers: label the x axis with integers, not 1.50. The first and the
    last step are labelled (the walk: a 16-step run's axis ended at 15); a label between them
    closer to the last than half a stride gives way to it."""
    first, last = int(first), int(last)
    if last <= first:
        return [first]
    stride = max(1, round((last - first) / (count - 1)))
    ticks = [tick for tick in range(first, last, stride) if tick == first or 2 * (last - tick) >= stride]
    return [*ticks, last]


def plot_line(plt, xs: list[float], ys: list[float], banded: bool, *, color: object,
              marker: str = "braille") -> None:
    """A downsampled series is drawn as two lines, its per-column lows and highs: one zigzag
    through both would stroke every column from min to max, and plotext's cost grows with
    the sub-pixels drawn (profiled: 40-56 ms a frame zigzag, about 20 ms as two lines)."""
    if banded:
        plt.plot(xs[0::2], ys[0::2], marker=marker, color=color)
        plt.plot(xs[1::2], ys[1::2], marker=marker, color=color)
    else:
        plt.plot(xs, ys, marker=marker, color=color)


def rich_color(color: object) -> str:
    """A plotext colour (a name or an RGB tuple) as markup names it."""
    if isinstance(color, tuple):
        return f"rgb({color[0]},{color[1]},{color[2]})"
    return LEGEND_COLORS.get(str(color), str(color))


def legend_mark(color: object, glyph: str = "━") -> str:
    return f"[{rich_color(color)}]{glyph}[/]"


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
        self._legend_width = 0  # the width it was made for

    def compose(self) -> ComposeResult:
        yield PlotCanvas(classes="chart-plot")
        yield Static("", classes="chart-lines", markup=True)
        yield Static("waiting for metrics…", classes="chart-readouts", markup=False)

    def on_mount(self) -> None:
        self._plot = self.query_one(PlotCanvas)
        self.show_legend()
        self.grid.call_after_refresh(self.grid.arrange_charts)  # a new chart: the grid gains a cell

    # -- what it shows -------------------------------------------------------------------

    def lines(self, *, with_empty: bool = False) -> list[Line]:
        """Every line of the chart, the live run's first, then each earlier run's train and
        eval (its every series of this measure), in legend order; ``with_empty``: the live
        run's series that have no points yet too (the legend names them from the start)."""
        no_color = self.grid.no_color
        live_label = self.grid.live_label or ""
        found = []
        for name in self.panel.series:
            series = self.grid.store.get(name)
            if series is None or not len(series):
                if not with_empty:
                    continue
                series = MetricSeries(name)
            slot = split_slot(name)
            marker, glyph = series_mark(0, slot) if no_color else SOLID
            found.append(Line(series, LIVE_COLORS[slot % len(LIVE_COLORS)], live_label, split_label(name),
                              False, marker, glyph))
        for run_index, run in enumerate(self.grid.overlays):
            color = OVERLAY_COLORS[run_index % len(OVERLAY_COLORS)]
            label = self.grid.run_label(run.job_id)
            for name in self.panel.series:
                series = run.store.get(name)
                if series is None or not len(series):
                    continue
                slot = split_slot(name)
                if no_color:
                    marker, glyph = series_mark(run_index + 1, slot)
                else:
                    marker, glyph = SOLID if slot == 0 else DOTTED
                found.append(Line(series, color, label, split_label(name), True, marker, glyph))
        return found

    def live_series(self) -> list[tuple[MetricSeries, str]]:
        """(series, colour) of the live run, in legend order."""
        return [(line.series, str(line.color)) for line in self.lines() if not line.overlay]

    def overlay_series(self) -> list[tuple[MetricSeries, object, str]]:
        """(series, colour, label) of the earlier runs: their every series of this measure."""
        return [(line.series, line.color, line.label) for line in self.lines() if line.overlay]

    def steps_text(self) -> str:
        """The latest step of each run on the chart, the live run first: `step 8`, or `steps 8, 40`
        when an earlier run went further or less far (issue 37: compare said `step 8` while the
        other job ran 40)."""
        by_run: dict[tuple[bool, str], int] = {}  # the live run first: lines() lists it first
        for line in self.lines():
            step = line.series.readouts().step
            if step is not None:
                key = (line.overlay, line.run)
                by_run[key] = max(step, by_run.get(key, step))
        latest = list(dict.fromkeys(by_run.values()))
        return "steps " + ", ".join(map(str, latest)) if len(latest) > 1 else f"step {latest[0] if latest else '-'}"

    def legend(self) -> str:
        """The chart's title and a mark and name per line, made to fit the top border: the
        runs' ids are shortened first, never the splits (a border cuts its title at the end,
        which lost "train"/"eval" and put a second "…" after an id's own)."""
        focus = "▶ " if self.has_focus or self.grid.focused_panel == self.panel.key else ""
        lines = self.lines(with_empty=True)
        live = self.live_series()
        # no readouts row: the step goes here
        step = [self.steps_text()] if live and self.has_class("-compact") else []
        room = self.size.width - LEGEND_BORDER_CELLS

        def entries(run_chars: int | None) -> list[str]:
            return [f"[b]{focus}{self.panel.title}[/b]"] + [
                f"{legend_mark(line.color, line.glyph)} [dim]{line.short_label(run_chars)}[/]" if line.overlay
                else f"{legend_mark(line.color, line.glyph)} {line.short_label(run_chars)}" for line in lines]

        def run_entries(run_chars: int | None) -> list[str]:
            """The live run's lines as in `entries`; each earlier run once, its lines' marks first."""
            runs: dict[str, list[Line]] = {}
            for line in lines:
                if line.overlay:
                    runs.setdefault(line.run, []).append(line)
            head = entries(run_chars)[:1 + sum(not line.overlay for line in lines)]
            return head + ["".join(legend_mark(line.color, line.glyph) for line in group)
                           + f" [dim]{group[0].short_run(run_chars)}[/]" for group in runs.values()]

        def fits(legend: str) -> bool:
            return cell_len(Content.from_markup(legend).plain) <= room

        for form, run_chars, gap in LEGEND_FITS:
            legend = gap.join((entries if form == "lines" else run_entries)(run_chars) + step)
            if not self.size.width or fits(legend):
                return legend
        # Still too long: whole entries from the end give way to "+N" (the readouts rows name
        # every line); those kept still name their run.
        parts = entries(LEGEND_LAST_RUN_CHARS)
        while len(parts) > 1:
            parts.pop()
            legend = " ".join([*parts, f"+{len(lines) - (len(parts) - 1)}", *step])
            if fits(legend):
                break
        return legend

    def _view_key(self) -> tuple:
        """What the chart shows; checked ten times a second, so it queries no widget."""
        versions = tuple(s.version for s, _ in self.live_series())
        # The chart's own size too: text rows are sized to it. The plot's size sets its ticks,
        # and counts only while it is shown (text rows hide it, and resize it as they come).
        compact = self.has_class("-compact")
        plot_size = self._plot.size if self._plot is not None and not compact else None
        return (versions, self.grid.overlays_version, self.grid.smoothing, self.grid.zoomed, plot_size,
                self.content_size, compact, self.grid.full)

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

    @property
    def shows_current_view(self) -> bool:
        """Its last redraw, and its legend, were made for what it shows now: its size, data
        and overlays (a resize is laid out before its message redraws the chart)."""
        return (self._drawn_key is not None and self._drawn_key == self._view_key()
                and self._legend_width == self.size.width)

    def on_resize(self) -> None:
        self.show_legend()  # made for the width: a redraw may not come (the view seen before)
        self.grid.redraw_if_changed()

    def on_plot_canvas_resized(self, message: PlotCanvas.Resized) -> None:
        message.stop()
        self.grid.redraw_if_changed()

    def redraw(self) -> None:
        self.show_legend()
        if self.has_class("-compact"):
            self._draw_lines()
        else:
            self._draw_plot()
        self.redraws += 1

    def _readouts(self) -> str:
        """One row per line (labelled when the chart has several), the live run's first: all
        its numbers when the row fits, else fewer; an earlier run's row is its last, best and
        step."""
        lines = self.lines()
        if not lines:
            return "waiting for metrics…"
        # Live and earlier runs' labels are aligned among themselves: a long run id does not
        # push the live run's numbers out of its row.
        widths = {kind: max((len(line.label) for line in lines if line.overlay == kind), default=0)
                  for kind in (False, True)}
        room = self.content_size.width
        rows = []
        for line in lines:
            # A lone line is the live run's, unnamed; an earlier run's is always named.
            name = f"{line.label:<{widths[line.overlay]}}  " if len(lines) > 1 or line.overlay else ""
            readouts = line.series.readouts()
            short = f"{name}{readouts.last_text}  {best_text(readouts)}"
            # An earlier run's row: last, best and step, as the live run's short row (not its rate).
            choices = [name + format_readouts(readouts, full=False), short] if line.overlay else [
                name + format_readouts(readouts, full=True), name + format_readouts(readouts, full=False), short]
            rows.append(next((row for row in choices if len(row) <= room), choices[-1]))
        return "\n".join(rows)

    def _draw_lines(self) -> None:
        """Too short for a plot: a sparkline and the numbers per line, one row each, placed
        by step and scaled together so they compare at a glance (overlays dimmed)."""
        views = []
        for line in self.lines():
            start = window(line.series.steps, ZOOM_STEPS if self.grid.zoomed else None)
            steps, values = line.series.steps[start:], line.series.smoothed(self.grid.smoothing)[start:]
            if len(steps):
                views.append((line, steps, values))
        if not views:
            self.query_one(".chart-lines", Static).update("waiting for metrics…")
            return
        span = self.grid.x_span(min(v[1][0] for v in views), max(v[1][-1] for v in views))
        scale = (min(min(v[2]) for v in views), max(max(v[2]) for v in views))
        label_width = max(6, *(len(v[0].label[:24]) for v in views))
        width = max(self.content_size.width, 24)
        rows = []
        for line, steps, values in views:
            readouts = line.series.readouts()
            name = f"{line.label[:24]:<{label_width}}"
            numbers = f"{readouts.last_text}  {best_text(readouts)}"
            spark_width = max(4, width - 2 - len(name) - 2 - len(numbers))
            spark = sparkline(steps, values, spark_width, span=span, scale=scale)
            style = rich_color(line.color)
            shown = f"[dim]{name}[/]" if line.overlay else name
            rows.append(f"{legend_mark(line.color, line.glyph)} {shown} [{style}]{spark}[/] {numbers}")
        self.query_one(".chart-lines", Static).update("\n".join(rows))

    def _draw_plot(self) -> None:
        plot = self.query_one(PlotCanvas)
        plt = plot.plt
        plt.clear_data()
        plt.clear_figure()
        readouts = self.query_one(".chart-readouts", Static)
        lines = self.lines()
        if not lines:  # the waiting note only where no run has data (a rerun's overlays draw at once)
            plt.title("waiting for metrics…")
            readouts.update("waiting for metrics…")
            plot.figure_changed()
            return
        columns = max(plot.size.width - 10, 10)
        smoothing = self.grid.smoothing
        first = last = None
        drawn: list[tuple[list[float], list[float]]] = []
        overlays, live = [line for line in lines if line.overlay], [line for line in lines if not line.overlay]
        for line in overlays:
            drawn.append(self._line(plt, line.series, columns, color=line.color, smoothing=smoothing,
                                    marker=line.marker))
        for index, line in enumerate(live):
            if smoothing != "none" and index == 0:
                raw = RAW_NO_COLOR[0] if self.grid.no_color else "braille"
                self._line(plt, line.series, columns, color="gray", smoothing="none", marker=raw)
            drawn.append(self._line(plt, line.series, columns, color=line.color, smoothing=smoothing,
                                    marker=line.marker))
        for xs, _ in drawn:  # the axis spans every line drawn, overlays included
            if xs:
                first = xs[0] if first is None else min(first, xs[0])
                last = xs[-1] if last is None else max(last, xs[-1])
        if first is not None and last is not None:
            first, last = self.grid.x_span(first, last)
            if last > first:  # a line ends at its last step; the axis goes on to the planned end
                plt.xlim(first, last)
            ticks: list[float] = [*integer_ticks(first, last)]  # plotext's stubs take floats
            plt.xticks(ticks)
        self._value_axis(plt, [y for _, ys in drawn for y in ys], plot.size.height)
        text = self._readouts()
        # A new row count (an overlay added or removed) needs a layout pass; same rows do not.
        readouts.update(text, layout=text.count("\n") != str(readouts.content).count("\n"))
        plot.figure_changed()

    def _line(self, plt, series: MetricSeries, columns: int, *, color: object, smoothing: str,
              marker: str) -> tuple[list[float], list[float]]:
        start = window(series.steps, ZOOM_STEPS if self.grid.zoomed else None)
        banded = len(series) - start > 2 * columns  # downsample() then gives (min, max) pairs
        xs, ys = downsample(series.steps, series.smoothed(smoothing), columns, start)
        if xs:
            plot_line(plt, xs, ys, banded, color=color, marker=marker)
        return xs, ys

    @staticmethod
    def _value_axis(plt, ys: list[float], rows: int) -> None:
        """Tiny values (an lm job's loss near -2e-08) labelled as the readouts write them,
        "-2.24e-08", not plotext's "-0.00000002240", and a single value centred on a range of
        its own; other axes keep plotext's own labels."""
        finite = [y for y in ys if math.isfinite(y)]
        if not finite:
            return
        low, high = min(finite), max(finite)
        if low == high:
            # One value (a first point, a constant like a clip ratio of 0): plotext's own range
            # around it is upside down for a negative value (-1.70 above -0.57) and its labels
            # fall between rows; the value sits in the middle of a range of its own, labelled.
            half = abs(low) / 2 or 1.0
            ticks = [low - half, low, low + half]
            plt.ylim(ticks[0], ticks[-1])
        elif small_axis(low, high):
            ticks = axis_ticks(low, high, max(2, min(5, rows // 3)))
        else:
            return
        plt.yticks(ticks, [shown_number(tick) for tick in ticks])

    def on_focus(self) -> None:
        self.grid.focused_panel = self.panel.key

    def on_blur(self) -> None:
        self.show_legend()

    def show_legend(self) -> None:
        legend = self.legend()
        self._legend_width = self.size.width
        if legend != self._legend:  # setting the title repaints the frame, even to the same text
            self._legend = legend
            self.border_title = legend
