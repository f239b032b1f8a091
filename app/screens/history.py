"""The run history: every job launched from this machine; attach to one or rerun it.

Opening it (and f5) lists the history at once, then asks each unfinished job's backend for its
status in a worker (``core/runs/history_refresh.py``) and updates the rows as answers arrive. A job
opens with the backend and .env it was launched with (``LaunchSession.use_history_record``).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Static

from app.core.api.wire import SUCCESS_STATUSES, is_terminal_status
from app.core.errors import SynthTuiError
from app.core.redact import printable, redact_url
from app.core.runs.history import RunHistory, RunRecord, take_repair_notes
from app.core.runs.history_refresh import StatusAnswer, needs_refresh, problem_notes, refresh_statuses
from app.core.runs.series import default_metric
from app.core.text import counted
from app.screens.base import FlowScreen
from app.screens.dashboard import DashboardScreen
from widgets.app_header import AppHeader
from widgets.cells import cell
from widgets.steady_footer import SteadyFooter

if TYPE_CHECKING:
    from app.core.runs.saved_run import SavedRun

INTRO = "Jobs launched from this machine, newest first."
# Below this width the table keeps job, status, created and config; the detail line under it
# shows the highlighted job's metrics and backend in full.
WIDE_COLUMNS_FROM = 120
# The table's vertical scrollbar and a cell to spare.
TABLE_MARGIN_CELLS = 3


def headline_metrics(metrics: dict[str, float], count: int = 2) -> list[tuple[str, float]]:
    """The mean score first (the chart's default series), then the others by name."""
    first = default_metric(metrics)
    ordered = sorted(metrics, key=lambda name: (name != first, name))
    return [(name, metrics[name]) for name in ordered[:count]]


def metrics_text(metrics: dict[str, float], count: int) -> str:
    return ", ".join(f"{name}={value:.3f}" for name, value in headline_metrics(metrics, count))


def fitted_metrics(metrics: dict[str, float], room: int) -> str:
    """Two headline metrics, else one, else the first cut with "…", to fit ``room`` cells."""
    for count in (2, 1):
        text = printable(metrics_text(metrics, count))
        if len(text) <= room:
            return text or "—"
    text = printable(metrics_text(metrics, 1))
    return text[:max(room - 1, 0)] + "…" if room > 1 else "…"


def local_time(created_at: str) -> str:
    """The record's UTC timestamp in local time, to the minute."""
    try:
        return datetime.fromisoformat(created_at).astimezone().strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return created_at[:16]


def short_backend(url: str) -> str:
    """host:port of a backend URL, for the table (the full URL is in the detail line)."""
    parts = urlsplit(url)
    return parts.netloc.rpartition("@")[2] or url


@dataclass(frozen=True)
class Row:
    """One job as listed: its record, and whether the .env it was launched with is still there
    (read in the loading worker, so the UI thread touches no file)."""

    record: RunRecord
    env_present: bool | None  # None: no .env remembered (an older record)


def config_name(path: str | None) -> str:
    """The config's file name without .toml (the full path is in the detail line)."""
    if not path:
        return "—"
    name = Path(path).name
    return name.removesuffix(".toml") or name


class HistoryTable(DataTable[Text]):
    """The history's table. Textual's DataTable binds home/end to the horizontal scroll, so with
    a row cursor End left the cursor on the first row and Enter opened that job: here they
    move the cursor to the first and last job. Its enter is shown in the footer as the
    screen's would be (the focused table's binding hides the screen's)."""

    BINDINGS = [
        Binding("enter", "select_cursor", "Attach", key_display="enter"),
        Binding("home", "scroll_top", "First job", show=False),
        Binding("end", "scroll_bottom", "Last job", show=False),
    ]


class HistoryScreen(FlowScreen):
    TITLE = "Run history"
    BINDINGS = [
        Binding("enter", "attach", "Attach", id="history.attach"),
        Binding("r", "rerun", "Rerun", id="history.rerun"),
        Binding("f5", "reload", "Check statuses", id="history.reload"),
        Binding("q,escape", "app.quit", "Quit", id="history.quit"),
        Binding("ctrl+q", "app.quit", "Quit", id="history.app_quit", show=False),  # q is in the footer
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, Row] = {}  # by job id, the table's row keys
        # Job id -> what the last check said: a status, or None when it got no answer.
        self.checked: dict[str, str | None] = {}
        self.notes: list[str] = []
        # Damaged history files moved aside while this screen read the history: told in the
        # header for as long as the screen is open, and never again after.
        self.repaired: list[str] = []
        self.checking = False
        self.wide: bool | None = None  # the columns shown: all (wide) or the narrow set
        self.opened_job = False  # a dashboard was opened from here: list and check again on return

    def compose(self) -> ComposeResult:
        yield AppHeader()
        yield Static(INTRO, id="history-header", classes="flow-header", markup=False)
        yield HistoryTable(id="history-table", cursor_type="row", zebra_stripes=True)
        yield Static("", id="history-detail", classes="flow-header", markup=False)
        yield SteadyFooter()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one(HistoryTable).styles.height = "1fr"
        self.action_reload()

    def on_screen_resume(self) -> None:
        """Back from a job's dashboard: its status (and others') may have changed meanwhile."""
        if self.opened_job:
            self.opened_job = False
            self.action_reload()

    def on_resize(self) -> None:
        if self.wide is not None and self.wide != (self.size.width >= WIDE_COLUMNS_FROM):
            self._show(list(self.rows.values()))

    # -- loading and checking ---------------------------------------------------------------

    @work(exclusive=True, group="history", exit_on_error=False, name="Load history")
    async def action_reload(self) -> None:
        """List the history, then ask the backends about every job that has not ended."""
        rows, repaired = await asyncio.to_thread(_read_rows)
        self.checked = {}
        self.notes = []
        self.repaired = [*self.repaired, *repaired]
        for note in repaired:
            self.notify(note, title="Run history", severity="warning", markup=False, timeout=30)
        self._show(rows)
        stale = [row.record for row in rows if needs_refresh(row.record)]
        if not stale:
            self._render_header()
            return
        self.checking = True
        backends = len({record.backend for record in stale})
        self._render_header(f"Checking {counted(len(stale), 'unfinished job')} "
                            f"with {counted(backends, 'backend')}…")
        answers: list[StatusAnswer] = []
        try:
            async for answer in refresh_statuses(self.session, stale):
                answers.append(answer)
                self._answered(answer)
        finally:
            self.checking = False
        self.notes = problem_notes(answers)
        for warning in dict.fromkeys(a.warning for a in answers if a.warning):
            self.flow_app.warn_history(warning)
        self._render_header()

    def _answered(self, answer: StatusAnswer) -> None:
        self.checked[answer.job_id] = answer.status
        row = self.rows.get(answer.job_id)
        if row is None:
            return
        self.query_one(HistoryTable).update_cell(answer.job_id, "status", self._status_cell(row.record))

    def _render_header(self, checking: str | None = None) -> None:
        lines = [INTRO, *(f"⚠ {note}" for note in self.repaired)]
        if checking:
            lines.append(checking)
        elif self.notes:
            lines += [f"⚠ {note}" for note in self.notes]
        elif self.checked:
            lines.append(f"Statuses checked with the backends at {datetime.now():%H:%M:%S}.")
        header = self.query_one("#history-header", Static)
        header.update("\n".join(printable(line) for line in lines))
        header.set_class(bool(self.notes or self.repaired) and not checking, "warn")

    def _show(self, rows: list[Row]) -> None:
        table = self.query_one(HistoryTable)
        selected = self._selected()
        table.clear(columns=True)
        self.wide = self.size.width >= WIDE_COLUMNS_FROM
        columns = [("Job", "job"), ("Status", "status"), ("Created", "created"), ("Config", "config")]
        if self.wide:
            # The backend before the metrics: host:port is short and must be whole; the metrics
            # take the room left (issue 37: the last column was cut mid-port).
            columns += [("Backend", "backend"), ("Last metrics", "metrics")]
        for label, key in columns:
            table.add_column(label, key=key)
        self.rows = {row.record.job_id: row for row in rows}
        all_cells = [self._fixed_cells(row.record) for row in rows]
        room = self._metrics_room(all_cells, len(columns)) if self.wide else 0
        for row, cells in zip(rows, all_cells, strict=True):
            if self.wide:
                cells.append(cell(fitted_metrics(row.record.last_metrics, room)))
            table.add_row(*cells, key=row.record.job_id)
        if selected is not None and selected.job_id in self.rows:  # f5 keeps the cursor on its job
            table.move_cursor(row=table.get_row_index(selected.job_id))
        if not rows:
            self.notify("No jobs yet: runs appear here once submitted from this machine.")
        self._show_detail()

    def _fixed_cells(self, record: RunRecord) -> list[Text]:
        """A row's cells but the metrics (the backend's too when the table is wide)."""
        cells = [cell(printable(record.job_id)), self._status_cell(record), cell(local_time(record.created_at)),
                 cell(printable(config_name(record.config_path)))]
        if self.wide:
            cells.append(cell(printable(short_backend(record.backend))))
        return cells

    def _metrics_room(self, all_cells: list[list[Text]], columns: int) -> int:
        """The cells the metrics column has left: the screen less the other columns (at their
        widest, heading included) and each column's padding."""
        headings = (len("Job"), len("Status"), len("Created"), len("Config"), len("Backend"))
        widths = [max([heading, *(c[i].cell_len for c in all_cells)]) for i, heading in enumerate(headings)]
        return self.size.width - sum(widths) - 2 * columns - TABLE_MARGIN_CELLS

    def _status_cell(self, record: RunRecord) -> Text:
        """The status the backend gave in this check, else the one last seen; marked "?" when
        the check got no answer for it."""
        status = self.checked.get(record.job_id) or record.status
        unanswered = record.job_id in self.checked and self.checked[record.job_id] is None
        colour = ("success" if status in SUCCESS_STATUSES else "error" if is_terminal_status(status)
                  else "warning" if unanswered else "accent")
        theme = self.app.theme_variables
        return Text.assemble(("● ", theme.get(colour, "")), printable(status) + ("?" if unanswered else ""))

    # -- the selected job -----------------------------------------------------------------

    def _selected(self) -> RunRecord | None:
        table = self.query_one(HistoryTable)
        if not self.rows or table.row_count == 0:
            return None
        row_key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        row = self.rows.get(str(row_key.value))
        return row.record if row is not None else None

    @on(DataTable.RowHighlighted, "#history-table")
    def _row_highlighted(self) -> None:
        self._show_detail()

    def _show_detail(self) -> None:
        """Where the highlighted job ran, and with which .env (and whether that file is gone)."""
        record = self._selected()
        detail = self.query_one("#history-detail", Static)
        if record is None:
            detail.update("")
            return
        row = self.rows[record.job_id]
        env = ("--env-file " + str(self.session.options.env_files[0]) if self.session.options.env_files
               else record.env_path or "not remembered (launched before the history kept it)")
        if row.env_present is False and not self.session.options.env_files:
            env += " (missing: pass --env-file PATH)"
        lines = [f"{record.job_id} on {redact_url(record.backend)}", f".env {env}",
                 f"config {record.config_path or '— (attached, not launched here)'}"]
        if record.last_metrics:
            lines.append(f"last metrics {metrics_text(record.last_metrics, 4)}")
        if record.end_note:
            lines.append(f"{record.status}: {record.end_note}")
        if record.model_path:
            lines.append(f"model {record.model_path}")
        detail.update("\n".join(printable(line) for line in lines))

    @on(DataTable.RowSelected, "#history-table")
    def _row_chosen(self, event: DataTable.RowSelected) -> None:
        """Enter (or a click) on a row: that row's job, by its key, whatever the cursor says."""
        row = self.rows.get(str(event.row_key.value))
        if row is not None:
            self._open(row.record)

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
        self._open(record, rerun=True)

    @work(exclusive=True, group="open", exit_on_error=False, name="Open the job")
    async def _open(self, record: RunRecord, *, rerun: bool = False) -> None:
        """The job's dashboard, on the backend it ran on with the .env it was launched with
        (LaunchSession.use_history_record); Esc comes back here. A backend that is gone:
        read-only, from the events this machine saved (docs/product.md#run-history)."""
        # Here, not at the top: the history's first frame needs neither the client nor the feed.
        from app.core.api.errors import BackendTimeout, BackendUnreachable
        from app.core.runs.saved_run import read_saved_run

        read_only: str | None = None
        try:
            job = await asyncio.to_thread(self.session.use_history_record, record)
            # Its backend first, in a few seconds: a demo's backend stopped with the demo, and
            # the dashboard would wait out its retries before saying so.
            try:
                async with self.session.client(retries=0, timeout=OPEN_PROBE_TIMEOUT_S) as client:
                    await self.session.probe_for_attach(client)
            except (BackendUnreachable, BackendTimeout):
                # The events this machine saved are shown instead, read-only; a rerun needs it.
                saved = None if rerun else await asyncio.to_thread(read_saved_run, record.job_id)
                if saved is None:
                    raise
                job = replace(job, replay=saved.batch)
                read_only = read_only_notice(self.session.backend_base, saved)
        except SynthTuiError as exc:  # its .env is gone or has no key; a dead backend; a history edited by hand
            self.flow_app.show_error(f"Cannot open job {record.job_id}", exc)
            return
        screen = DashboardScreen(job, back_to_history=True, read_only=read_only)
        if read_only is not None:
            screen.status = record.status
        self.opened_job = True
        self.app.push_screen(screen)
        if rerun:
            screen.call_after_refresh(screen.action_rerun)


# Seconds the job's backend has to answer before its dashboard opens.
OPEN_PROBE_TIMEOUT_S = 5.0


def read_only_notice(backend: str, saved: SavedRun) -> str:
    """What a read-only dashboard says, in its end panel: why, from where, and the metrics."""
    metrics = ("Metrics: rebuilt from the saved step summaries." if saved.metrics_kept
               else "Metrics: not kept on this machine (only the events are saved), so no chart.")
    return (f"Read-only: the backend at {backend} is gone; showing the events saved on this machine "
            f"({saved.path}).\n{metrics} Cancel, rerun, overlays and rollouts need the backend.")


def _read_rows() -> tuple[list[Row], list[str]]:
    """The history's rows, and the notes of a damaged history moved aside while reading it
    (docs/product.md#damaged-state); a history that cannot be used raises StateFileError."""
    rows = []
    for record in RunHistory().list():
        present = os.path.isfile(record.env_path) if record.env_path else None
        rows.append(Row(record, present))
    return rows, take_repair_notes()
