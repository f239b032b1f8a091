"""The run history: every job launched from this machine; attach to one or rerun it."""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Static

from app.core.history import RunHistory, RunRecord
from app.core.series import default_metric
from app.screens.base import FlowScreen


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

    @work(thread=True, exclusive=True, exit_on_error=False, name="Load history")
    def action_reload(self) -> None:
        records = RunHistory().list()
        self.app.call_from_thread(self._show, records)

    def _show(self, records: list[RunRecord]) -> None:
        self.records = records
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

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        self.action_attach()

    def action_attach(self) -> None:
        from app.screens.dashboard import DashboardScreen, JobContext

        record = self._selected()
        if record is None:
            return
        self.session.backend_base = record.backend
        model = ((record.payload or {}).get("data") or {})
        self.app.push_screen(DashboardScreen(JobContext(record.job_id, record.payload, record.config_path,
                                                        model.get("base_model") or model.get("model"))))

    def action_rerun(self) -> None:
        from app.screens.dashboard import DashboardScreen, JobContext

        record = self._selected()
        if record is None:
            return
        if record.payload is None:
            self.notify("This job was attached, not launched here: its payload is unknown.", severity="error")
            return
        self.session.backend_base = record.backend
        screen = DashboardScreen(JobContext(record.job_id, record.payload, record.config_path))
        self.app.push_screen(screen, lambda _: None)
        screen.call_after_refresh(screen.action_rerun)
