"""The metrics grid: every metric the job emits at once, one small chart per measure.

train and eval of a measure share a chart (``app.core.runs.series.chart_panels``; each chart is
a ``MetricChart``, widgets/metric_chart.py); the legend sits in the chart's border, outside the
data. One chart has focus (``m`` moves it, Tab too); ``f`` shows it full size. When the grid is
too short for plots (80x24), each chart becomes a few text rows: a sparkline and the numbers per
series. Earlier runs are overlaid as dimmed lines (docs/product.md#compare-runs).

The grid arranges the charts, keeps the view they share (smoothing, zoom, overlays, pause) and
schedules their redraws: a chart redraws only when what it shows changed, new data at most every
``data_interval`` seconds, so its cost does not grow with the run (docs/product.md#metrics-grid).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.events import Resize
from textual.markup import escape as escape_markup
from textual.reactive import reactive
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import Static

from app.core.runs.compare import ComparedRun, run_labels
from app.core.runs.series import (
    SMOOTHING_MODES,
    ChartPanel,
    MetricStore,
    chart_panels,
)
from widgets.metric_chart import ZOOM_STEPS, MetricChart

# A plot needs this many rows inside its border to say anything; below it, text rows.
MIN_PLOT_ROWS = 9
TEXT_ROW_RULE = 1  # a chart as text rows: its title rule, then a row per line


def plotted_count(lines: Sequence[int], columns: int, height: int) -> int:
    """How many charts, in order, get a plot (at least MIN_PLOT_ROWS, plus a readouts row per
    extra line) in ``height`` rows when the charts after them take a text row each (a title
    rule and a row per line): all of them when they fit, none when even one plot does not."""
    for plots in range(len(lines), 0, -1):
        room = height - sum(TEXT_ROW_RULE + count for count in lines[plots:])
        if room // math.ceil(plots / columns) >= MIN_PLOT_ROWS + max(lines[:plots]) - 1:
            return plots
    return 0


@dataclass(frozen=True)
class ChartView:
    """What the chart keys set on a grid (m, f, s, z): a rerun's dashboard opens with it
    (app/screens/chart_keys.py, docs/product.md#keys)."""

    focused_panel: str | None
    smoothing: str
    zoomed: bool
    full: bool


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
        # Rows the screen keeps under a stacked grid (the dashboard's log at 80 columns): as text
        # rows the grid takes what its whole charts need, up to the rest of its parent's height.
        self.rows_kept_below = 0
        # A name for the live run's lines in the legend, where several runs are compared.
        self.live_label: str | None = None
        # The live run's id: the overlays' labels are made to differ from it too.
        self.live_job_id: str | None = None
        # The steps the live run is to train (its config's), when known: the x axis goes on
        # to there, so a run covers only the part of the chart it has reached.
        self.planned_steps: int | None = None
        self._run_labels: dict[str, str] = {}
        # NO_COLOR is set (Textual's app then paints in greys): lines differ by glyph. Read
        # from the app on mount.
        self.no_color = False
        self.store = store
        self.preferred_metric = preferred_metric
        self.data_interval = data_interval
        self._due: float | None = None  # when the scheduled data redraw runs (monotonic)
        self._due_timer: Timer | None = None
        self.overlays: list[ComparedRun] = []
        self.overlays_version = 0
        self.panels: list[ChartPanel] = []
        self._charts: list[MetricChart] = []  # in the order mounted; a chart is never removed
        # "step 1: 4/16 rollouts done" while a step is under way (app.core.runs.events.rollout_progress).
        self.rollout_progress = ""

    def compose(self) -> ComposeResult:
        yield Static("waiting for metrics…", id="grid-status", markup=True)
        yield Vertical(id="grid-cells")

    def on_mount(self) -> None:
        self.no_color = self.app.no_color


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


    def run_label(self, job_id: str) -> str:
        return self._run_labels.get(job_id) or job_id

    def x_span(self, first: float, last: float) -> tuple[float, float]:
        """The chart's x axis for lines from ``first`` to ``last``: on to the live run's
        planned steps when known (not when zoomed to the last steps)."""
        if self.planned_steps and not self.zoomed:
            last = max(last, float(self.planned_steps))
        return first, last

    def set_rollout_progress(self, words: str) -> None:
        """Say how far the step under way is, beside the focused chart's name ("" clears it)."""
        if words != self.rollout_progress:
            self.rollout_progress = words
            self._show_status()

    def set_planned_steps(self, steps: int | None) -> None:
        if steps != self.planned_steps:
            self.planned_steps = steps
            self.overlays_version += 1  # the view changed: every chart redraws at once
            self.redraw_if_changed()

    def set_overlays(self, runs: Sequence[ComparedRun]) -> None:
        self.overlays = list(runs)
        ids = [run.job_id for run in self.overlays]
        self._run_labels = run_labels([self.live_job_id, *ids] if self.live_job_id else ids)
        self.overlays_version += 1
        self.data_changed()
        self._show_status()

    def redraw_if_changed(self, *, force: bool = False) -> None:
        """Redraw the charts whose view changed; a data redraw not yet due is scheduled for
        the moment it is due, so the chart follows the log then, without polling."""
        if self.paused:
            return
        now = time.monotonic()
        waits = [wait for chart in self.charts if not chart.has_class("-hidden")
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

    def view(self) -> ChartView:
        return ChartView(self.focused_panel, self.smoothing, self.zoomed, self.full)

    def apply_view(self, view: ChartView) -> None:
        """Set what the chart keys had set on another grid; a chart not here yet gets the focus
        when it comes (focus_next_chart and the layout accept a key without a chart)."""
        self.focused_panel = view.focused_panel
        self.smoothing, self.zoomed, self.full = view.smoothing, view.zoomed, view.full

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
        focused = self.chart(self.focused_panel)
        if self.full or (focused is not None and focused.has_class("-hidden")):  # text rows had no room for it
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
        self._show_status()  # the hints fitted to the new width (arrange_charts waits for charts)

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
            chart.set_class(chart not in shown, "-hidden")
        columns = 2 if width >= 90 and len(shown) > 1 else 1
        # Each line of a chart has a readouts row under its plot: more lines, more rows needed;
        # as a text row it takes a title rule and a row per line.
        lines = [max(len(chart.lines()), 1) for chart in shown]
        plots = len(shown) if self.full else plotted_count(lines, columns, height)
        compact = plots == 0
        cells.set_class(compact, "-compact")
        self.set_class(compact, "-compact")
        text_rows = shown[plots:]
        for chart in charts:
            chart.set_class(chart in text_rows, "-compact")
        if compact:
            cells.styles.layout = "vertical"
            self._whole_text_rows(shown)
        else:
            self.styles.max_height = None  # plots share the height the CSS gives
            self._grid_layout(cells, shown, plots, columns)
        self._show_status()
        self.redraw_if_changed(force=True)

    def _whole_text_rows(self, shown: list[MetricChart]) -> None:
        """Stacked over the log (rows_kept_below), the text rows take what they need up to the
        room left: the charts in order while each fits whole (the first always, cut if need be),
        the ones after the first that does not fit hidden; a focused chart not among them shows
        instead, the others filling what it leaves. Never a title rule without its rows (the walk
        at 80x24: the loss chart lost its data row), never the focus on a chart not shown (`m`
        with earlier runs overlaid)."""
        if not self.rows_kept_below or not isinstance(self.parent, Widget):
            self.styles.max_height = None
            return
        room = max(self.parent.size.height - self.rows_kept_below, 1)
        self.styles.max_height = room

        def rows(chart: MetricChart) -> int:
            return TEXT_ROW_RULE + max(len(chart.lines()), 1)

        def fitting(charts: list[MetricChart], used: int, first_always: bool) -> list[MetricChart]:
            out: list[MetricChart] = []
            for chart in charts:
                used += rows(chart)
                if used > room and not (first_always and not out):
                    break  # the charts after one that does not fit are hidden too
                out.append(chart)
            return out

        visible = fitting(shown, 1, True)  # after the status line; the first shows, cut if need be
        focused = next((chart for chart in shown if chart.panel.key == self.focused_panel), None)
        if focused is not None and focused not in visible:
            visible = [focused, *fitting([chart for chart in shown if chart is not focused], 1 + rows(focused), False)]
        for chart in shown:
            chart.set_class(chart not in visible, "-hidden")

    @staticmethod
    def _grid_layout(cells: Widget, shown: list[MetricChart], plots: int, columns: int) -> None:
        """The first ``plots`` charts as plots (rows sharing the height), the others under them
        as text rows across the grid, each as tall as its lines (issue 37: at 160x45, 9 charts
        all went to text rows and left a third of the grid empty)."""
        plot_rows = math.ceil(plots / columns)
        text_rows = [str(TEXT_ROW_RULE + max(len(chart.lines()), 1)) for chart in shown[plots:]]
        cells.styles.layout = "grid"
        cells.styles.grid_size_columns = columns
        cells.styles.grid_size_rows = plot_rows + len(text_rows)
        cells.styles.grid_rows = " ".join(["1fr"] * plot_rows + text_rows)
        for index, chart in enumerate(shown):  # an odd last plot spans its row; a text row the grid's
            last_odd = index == plots - 1 and plots % columns
            chart.styles.column_span = columns if last_odd or index >= plots else 1

    def _show_status(self) -> None:
        if not self.is_mounted:
            return
        focused = next((p for p in self.panels if p.key == self.focused_panel), None)
        view = f"last {ZOOM_STEPS} steps" if self.zoomed else "all steps"
        overlays = f"{len(self.overlays)} overlaid" if self.overlays else ""
        if self.overlay_key:
            overlays = f"o overlays: {len(self.overlays)}" if self.overlays else "o overlay"
        parts = [f"[b]{focused.title}[/b]" if focused else "waiting for metrics…",
                 escape_markup(self.rollout_progress),
                 "m chart", f"f {'grid' if self.full else 'full size'}", f"s {self.smoothing}", f"z {view}", overlays]
        status = self.query_one("#grid-status", Static)
        width = self.content_size.width - status.styles.padding.width
        status.update(" · ".join(fitted_hints([part for part in parts if part], width)), layout=False)


def fitted_hints(parts: list[str], width: int) -> list[str]:
    """The status line's parts (markup) that fit ``width`` cells joined by " · ": whole hints
    dropped from the end (o, then z, s…), never a word cut, as the footer drops its keys
    (widgets/flow_footer.py); the first part (the chart or "waiting for metrics…") always
    stays. Before the first layout (no width yet) every part is shown."""
    shown = list(parts)
    while len(shown) > 1 and 0 < width < Content.from_markup(" · ".join(shown)).cell_length:
        shown.pop()
    return shown
