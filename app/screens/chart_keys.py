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
    Binding("M", "metric_back", "Previous chart", id="chart.previous",
            tooltip=palette_tooltip("Previous chart", "Focus the chart before")),
    Binding("f", "full", "Full size", id="chart.full",
            tooltip=palette_tooltip("Full size chart", "Show the focused chart alone")),
    # f's other face while a chart is full size (ChartKeys.check_action shows the one that applies).
    Binding("f", "grid", "Grid", id="chart.grid",
            tooltip=palette_tooltip("Whole grid", "Show every chart again")),
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

    @on(events.Mount)
    def _apply_carried_view(self) -> None:
        if self.carried_view is not None and (grid := self.metrics_grid()):
            grid.apply_view(self.carried_view)
            self._show_full(grid)

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
            self._show_full(grid)

    def action_grid(self) -> None:
        self.action_full()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """f says Full size, or Grid while a chart is full size (the screen's -chart-full)."""
        if action == "full":
            return not self.has_class("-chart-full")
        if action == "grid":
            return self.has_class("-chart-full")
        return super().check_action(action, parameters)

    def _show_full(self, grid: MetricsGrid) -> None:
        """The screen laid out for the grid's full size. Full size hides what had the focus (the
        log): the focus goes to the chart shown, else nothing has it, and when a dialog closes
        Textual gives it to the first chart, whose on_focus takes the chart focus."""
        self.set_class(grid.full, "-chart-full")
        self.refresh_bindings()  # f says Full size or Grid (check_action)
        if grid.full:
            self.call_after_refresh(self._focus_shown_chart, grid)

    def _focus_shown_chart(self, grid: MetricsGrid) -> None:
        chart = grid.chart(grid.focused_panel)
        if grid.full and chart is not None and self.focused is None:
            chart.focus()

    def action_smoothing(self) -> None:
        if grid := self.metrics_grid():
            grid.cycle_smoothing()

    def action_zoom(self) -> None:
        if grid := self.metrics_grid():
            grid.toggle_zoom()


ScreenWithCharts = TypeVar("ScreenWithCharts", bound=ChartKeys)


def carry_chart_view(old: ChartKeys, new: ScreenWithCharts) -> ScreenWithCharts:
    """``new`` opening with what the chart keys set on ``old`` (the walk: a rerun reset them)."""
    if grid := old.metrics_grid():
        new.carried_view = grid.view()
    return new
