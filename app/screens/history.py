"""The run history: every job launched from this machine; attach to one or rerun it."""

from __future__ import annotations

import asyncio

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Static

from app.core.errors import SynthTuiError
from app.core.history import RunHistory, RunRecord
from app.core.jobs import JobContext
from app.core.series import default_metric
from app.screens.base import FlowScreen
from app.screens.dashboard import DashboardScreen


def headline_metrics(metrics: dict[str, float], count: int = 2) -> list[tuple[str, float]]:
    """The mean score first (the chart's default series), then the others by name."""
    first = default_metric(metrics)
    ordered = sorted(metrics, key=lambda name: (name != first, name))
    return [(name, metrics[name]) for name in ordered[:count]]


class HistoryScreen(FlowScreen):
    TITLE = "Run history"
    BINDINGS = [
        Binding("enter", "attach", "Attach", id="history.attach"),
        Binding("r", "rerun", "Rerun", id="history.rerun"),
        Binding("f5", "reload", "Reload", id="history.reload"),
        Binding("q,escape", "app.quit", "Quit", id="history.quit"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.records: list[RunRecord] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("Jobs launched from this machine (newest first). Enter attaches, r reruns.",
                     classes="flow-header", markup=False)
        yield DataTable(id="history-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        super().on_mount()
        table = self.query_one(DataTable)
        table.add_columns("Job", "Status", "Created", "Backend", "Config", "Last metrics")
        self.action_reload()

    @work(exclusive=True, exit_on_error=False, name="Load history")
    async def action_reload(self) -> None:
        self.records = await asyncio.to_thread(RunHistory().list)
        self._show(self.records)

    def _show(self, records: list[RunRecord]) -> None:
        table = self.query_one(DataTable)
        table.clear()
        for record in records:
            metrics = ", ".join(f"{k}={v:.3f}" for k, v in headline_metrics(record.last_metrics))
            table.add_row(record.job_id, record.status, record.created_at.replace("T", " ")[:19], record.backend,
                          record.config_path or "—", metrics or "—", key=record.job_id)
        if not records:
            self.notify("No jobs yet: runs appear here once submitted from this machine.")

    def _selected(self) -> RunRecord | None:
        table = self.query_one(DataTable)
        if not self.records or table.cursor_row is None:
            return None
        return self.records[table.cursor_row]

    @on(DataTable.RowSelected, "#history-table")
    def _row_chosen(self) -> None:
        self.action_attach()

    def _open(self, record: RunRecord) -> DashboardScreen | None:
        """The job's dashboard, on the backend it ran on; Esc comes back here."""
        try:
            self.session.use_backend(record.backend, "the job history")
        except SynthTuiError as exc:  # a history file edited by hand
            self.flow_app.show_error("Cannot open this job", exc)
            return None
        screen = DashboardScreen(JobContext.from_record(record), back_to_history=True)
        self.app.push_screen(screen)
        return screen

    def action_attach(self) -> None:
        record = self._selected()
        if record is not None:
            self._open(record)

    def action_rerun(self) -> None:
        record = self._selected()
        if record is None:
            return
        if record.payload is None:
            self.notify("This job was attached, not launched here: its payload is unknown.", severity="error")
            return
        screen = self._open(record)
        if screen is not None:
            screen.call_after_refresh(screen.action_rerun)
