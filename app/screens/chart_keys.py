"""The metrics grid's keys, one definition for every screen that shows a grid (the dashboard,
compare): bindings, palette entries and actions (docs/product.md#metrics-grid)."""

from __future__ import annotations

from typing import TypeVar

from textual import events, on
from textual.binding import Binding
from textual.screen import Screen

from app.screens.commands import palette_tooltip
from widgets.metrics_grid import ChartView, MetricsGrid

CHART_BINDINGS = [
    Binding("m", "metric", "Chart", id="chart.next",
            tooltip=palette_tooltip("Next chart", "Focus the next chart of the grid")),
    Binding("M", "metric_back", "Previous chart", id="chart.previous", show=False,
            tooltip=palette_tooltip("Previous chart", "Focus the chart before")),
    Binding("f", "full", "Full size", id="chart.full",
            tooltip=palette_tooltip("Full size chart", "Show the focused chart alone, or the whole grid again")),
    Binding("s", "smoothing", "Smooth", id="chart.smoothing",
            tooltip=palette_tooltip("Smoothing", "None, EMA or moving average")),
    Binding("z", "zoom", "Zoom", id="chart.zoom",
            tooltip=palette_tooltip("Zoom", "The last 50 steps or all of them")),
]


class ChartKeys(Screen):
    """Actions on the screen's metrics grid (none yet: a key does nothing). Full size also
    sets ``-chart-full`` on the screen, so its stylesheet can give the chart the room."""

    # What the keys had set on the screen this one follows (a rerun's dashboard): applied once mounted.
    carried_view: ChartView | None = None
    # The view when a dialog last covered the screen (the rerun's question): the focus given
    # back when the dialog closes may move the chart focus (MetricChart.on_focus).
    view_when_covered: ChartView | None = None

    @on(events.ScreenSuspend)
    def _remember_view(self) -> None:
        if grid := self.metrics_grid():
            self.view_when_covered = grid.view()

    @on(events.Mount)
    def _apply_carried_view(self) -> None:
        if self.carried_view is not None and (grid := self.metrics_grid()):
            grid.apply_view(self.carried_view)
            self.set_class(grid.full, "-chart-full")

    def metrics_grid(self) -> MetricsGrid | None:
        grids = self.query(MetricsGrid)
        return grids.first() if grids else None

    def action_metric(self) -> None:
        if grid := self.metrics_grid():
            grid.focus_next_chart()

    def action_metric_back(self) -> None:
        if grid := self.metrics_grid():
            grid.focus_next_chart(-1)

    def action_full(self) -> None:
        if grid := self.metrics_grid():
            grid.toggle_full()
            self.set_class(grid.full, "-chart-full")

    def action_smoothing(self) -> None:
        if grid := self.metrics_grid():
            grid.cycle_smoothing()

    def action_zoom(self) -> None:
        if grid := self.metrics_grid():
            grid.toggle_zoom()


ScreenWithCharts = TypeVar("ScreenWithCharts", bound=ChartKeys)


def carry_chart_view(old: ChartKeys, new: ScreenWithCharts) -> ScreenWithCharts:
    """``new`` opening with what the chart keys set on ``old`` (the walk: a rerun reset them),
    as it was when the question before it was asked."""
    if grid := old.metrics_grid():
        new.carried_view = old.view_when_covered or grid.view()
    return new
