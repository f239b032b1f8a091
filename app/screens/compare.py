"""``synth-tui compare JOB_A JOB_B…``: several jobs of one backend on one metrics grid, the
first in the live colours, the others as dimmed overlays (docs/product.md#compare-runs)."""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from app.core.runs.compare import ComparedRun, read_runs, run_labels
from app.screens.base import FlowScreen
from app.screens.chart_keys import CHART_BINDINGS, ChartKeys
from app.screens.commands import palette_tooltip
from widgets.app_header import AppHeader
from widgets.job_header import shown_text
from widgets.metrics_grid import MetricsGrid
from widgets.steady_footer import SteadyFooter


class CompareScreen(ChartKeys, FlowScreen):
    TITLE = "Compare runs"
    BINDINGS = [
        Binding("q", "app.quit", "Quit", id="compare.quit"),
        *CHART_BINDINGS,
        Binding("f5", "reload", "Reload", id="compare.reload",
                tooltip=palette_tooltip("Reload the runs", "Read every run's metrics again")),
        Binding("ctrl+q", "app.quit", "Quit", id="compare.app_quit", show=False),  # q is in the footer
    ]

    # Below 110 columns M would cost the footer a row: the help lists it (widgets/steady_footer.py).
    NARROW_FOOTER_LEAVES = frozenset({"metric_back"})

    def __init__(self, job_ids: list[str], *, runs: list[ComparedRun] | None = None) -> None:
        """``runs``: already read (snapshots, README pictures); f5 reads them again."""
        super().__init__()
        self.job_ids = job_ids
        self.runs = runs

    def compose(self) -> ComposeResult:
        yield AppHeader()
        yield Static("", id="compare-header", classes="flow-header", markup=True)
        yield Static("Reading the runs' metrics…", id="compare-waiting", markup=False)
        yield SteadyFooter(compact=True)

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#compare-header", Static).update(
            f"[b]{shown_text(self.job_ids[0])}[/b] against "
            + ", ".join(shown_text(job_id) for job_id in self.job_ids[1:])
            + f"   backend {shown_text(self.session.backend_base)}")
        if self.runs is not None:
            self.call_later(self._show, self.runs)
        else:
            self.action_reload()

    @work(exclusive=True, group="compare", exit_on_error=False, name="Reading the runs")
    async def action_reload(self) -> None:
        async with self.session.client() as client:
            await self.session.probe_for_attach(client)
            runs = await read_runs(client, self.job_ids)
        await self._show(runs)

    async def _show(self, runs: list[ComparedRun]) -> None:
        self.runs = runs
        first, *others = runs
        for grid in self.query(MetricsGrid):
            await grid.remove()
        grid = MetricsGrid(first.store, preferred_metric=self.session.options.metric, overlay_key=False,
                           id="compare-grid")
        grid.live_job_id = first.job_id
        grid.live_label = run_labels([run.job_id for run in runs])[first.job_id]
        await self.mount(grid, after="#compare-header")
        self.query_one("#compare-waiting").add_class("-hidden")
        grid.set_overlays(others)
        grid.data_changed()
        empty = [run.job_id for run in runs if not run.store.names()]
        if empty:
            self.notify(f"No metrics yet: {', '.join(empty)}", severity="warning")
        if any(run.truncated for run in runs):
            self.notify("A run has more points than are read: its start is shown.", severity="warning")
