"""The job's dashboard. A plain placeholder until the live dashboard (issue 5) lands."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Header, Static

from app.screens.base import FlowScreen


class DashboardScreen(FlowScreen):
    TITLE = "Job"
    BINDINGS = [Binding("q", "app.quit", "Quit", id="dashboard.quit")]

    def __init__(self, job_id: str) -> None:
        super().__init__()
        self.job_id = job_id

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"Job {self.job_id} submitted.\n\nWatch it with:\n  synth-tui train --no-tui … "
                     f"or the live dashboard (coming next).", id="dashboard-placeholder", markup=False)
        yield Footer()
