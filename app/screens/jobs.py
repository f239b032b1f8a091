"""The jobs view (docs/product.md#jobs-view): every job the backend lists, live; attach, cancel,
rerun. The list, its sorting, filtering and scores are ``app.core.runs.job_list``'s."""

from __future__ import annotations

import asyncio
from typing import Any

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Input, Static

from app.core.api.job_paging import JOB_PAGE_SIZE, MAX_LISTED_JOBS
from app.core.errors import SynthTuiError
from app.core.redact import redact
from app.core.runs.job_list import (
    NO_VALUE,
    JobListing,
    JobRow,
    ScoreBook,
    filter_rows,
    fit_columns,
    merge_scores,
    next_sort,
    probe_jobs_backend,
    read_jobs,
    short_model,
    shown_created,
    shown_score,
    sort_rows,
)
from app.core.runs.jobs import JobContext, read_history
from app.core.text import counted
from app.screens import job_actions
from app.screens.base import FlowScreen
from app.screens.commands import palette_tooltip
from app.screens.dashboard import DashboardScreen
from widgets.app_header import AppHeader
from widgets.cells import cell
from widgets.job_header import STATUS_CLASSES, shown_text
from widgets.steady_footer import SteadyFooter
from widgets.table_keys import highlighted_key

# Column widths: (job, status, model, created, score) below NARROW_BELOW and from it up; below
# 80 columns fit_columns leaves out the model, then the created time, so the score stays.
NARROW_BELOW = 110
SCROLLBAR_ROOM = 2  # the table's vertical scrollbar, when the rows outgrow it
# The status column also holds a job's place in an embedded backend's queue: "queued #12"
# (narrow), "queued #123" (wide).
NARROW_WIDTHS = (28, 10, 12, 11, 5)
WIDE_WIDTHS = (34, 11, 40, 16, 10)
# The score column's heading says which score it is, the last one (docs/product.md#jobs-view): in
# one line where the column is wide enough, else in two, "Last" over "score" (the walk: "Score").
SCORE_HEADING = "Last score"
STATUS_STYLES = {"ok": "green", "bad": "red", "warn": "yellow"}


def _cell(value: str, style: str, width: int) -> Text:
    """A cell's text, cut with … to its column (never markup: the backend's words). Cut here,
    not only when drawn, so the row holds what is shown (the filter and the tests read it)."""
    return cell(value if len(value) <= width else value[: width - 1] + "…", style)


class JobsScreen(FlowScreen):
    TITLE = "Backend jobs"
    BINDINGS = [
        # A priority key, so the footer shows it over the table's own enter (check_action lets the
        # filter field have it while typing).
        Binding("enter", "attach", "Attach", id="jobs.attach", priority=True,
                tooltip=palette_tooltip("Attach to the job", "Open the selected job's live dashboard")),
        Binding("c", "cancel_job", "Cancel", id="jobs.cancel",
                tooltip=palette_tooltip("Cancel the job", "Cancel the selected job on the backend, after asking")),
        Binding("r", "rerun", "Rerun", id="jobs.rerun",
                tooltip=palette_tooltip("Rerun the job",
                                        "Submit the selected job's payload again, from the run history")),
        Binding("s", "sort", "Sort", id="jobs.sort",
                tooltip=palette_tooltip("Sort the jobs", "By created, status, score or model")),
        # Priority too: a key typed right after / goes into the field, not to the table (a
        # non-priority / is handled after the keys behind it have already gone to the table).
        Binding("slash", "filter", "Filter", id="jobs.filter", key_display="/", priority=True,
                tooltip=palette_tooltip("Filter the jobs", "Only jobs whose id, status or model holds the text")),
        Binding("f5", "refresh", "Refresh", id="jobs.refresh",
                tooltip=palette_tooltip("Refresh the jobs", "Read the backend's job list now")),
        Binding("escape", "clear_filter", "Clear filter", id="jobs.clear_filter", show=False,
                tooltip=palette_tooltip("Clear the job filter", "Show every job again")),
        Binding("q", "app.quit", "Quit", id="jobs.quit"),
        Binding("ctrl+q", "app.quit", "Quit", id="jobs.app_quit", show=False),  # q is in the footer
    ]

    def __init__(self, *, status: str | None = None, max_jobs: int = MAX_LISTED_JOBS,
                 page_size: int = JOB_PAGE_SIZE, sort: str = "created", refresh_every: float | None = 5.0,
                 preset: JobListing | None = None) -> None:
        """``status``: only jobs the backend lists with it. ``preset``: fixed rows, no backend
        and no refresh (snapshots, README pictures)."""
        super().__init__()
        self.status_filter = status
        self.max_jobs = max_jobs
        self.page_size = page_size
        self.refresh_every = refresh_every
        self.preset = preset
        self.rows: list[JobRow] = list(preset.rows) if preset else []
        self.note = preset.note if preset else None
        self.scores = ScoreBook()
        self.sort_by = sort
        self.filter_text = ""
        self.error: str | None = None
        self.loads = 0  # completed reads of the list (tests wait on it)
        self.reading = False
        self._probed = False
        self._read_again = False
        self._columns: dict[str, int] | None = None

    def compose(self) -> ComposeResult:
        yield AppHeader()
        yield Static("", id="jobs-header", classes="flow-header", markup=True)
        yield DataTable(id="jobs-table", cursor_type="row", zebra_stripes=True)
        yield Input(placeholder="filter by id, status or model: applies as you type; enter keeps it, esc clears",
                    id="jobs-filter")
        yield SteadyFooter(compact=True)

    def on_mount(self) -> None:
        super().on_mount()
        self._show()
        if self.preset is None:
            self.action_refresh()
            if self.refresh_every:
                self.set_interval(self.refresh_every, self._tick, name="jobs-refresh")

    def on_resize(self, event: events.Resize) -> None:
        self._show()

    # -- reading the backend ----------------------------------------------------------------

    def on_screen_resume(self) -> None:
        # Back from a job's dashboard: what happened meanwhile shows at once.
        if self.loads:
            self.action_refresh()

    def _tick(self) -> None:
        # The live refresh; not while one runs, nor while the dashboard of a job is on top.
        if not self.reading and self.is_current:
            self.action_refresh()

    def action_refresh(self) -> None:
        # A read under way is not cut short: another follows it (a cancel may have come after
        # it asked).
        if self.preset is None:
            if self.reading:
                self._read_again = True
            else:
                self._load()

    @work(exclusive=True, group="jobs-refresh", exit_on_error=False, name="Job list")
    async def _load(self) -> None:
        self.reading = True
        try:
            async with self.session.client(retries=0) as client:
                if not self._probed:
                    await probe_jobs_backend(self.session, client)
                    self._probed = True
                listing = await read_jobs(client, status=self.status_filter, max_jobs=self.max_jobs,
                                          page_size=self.page_size)
                self.rows, self.note = listing.rows, listing.note
                self._show()
                # Scores for the rows shown, in their order: new metrics only, 4 jobs at a time.
                await self.scores.update(client, self.scores.wanted(self._shown()))
            self.error = None
        except SynthTuiError as exc:
            # Said once, in the header: a refresh every few seconds must not stack dialogs.
            first = self.error is None
            self.error = redact(exc.message, self.session.secret_values())
            if first:
                self.notify(self.error, title="Job list", severity="error")
        finally:
            self.reading = False
            self.loads += 1
            self._show()
            if self._read_again:
                self._read_again = False
                self.call_later(self.action_refresh)

    # -- showing --------------------------------------------------------------------------

    def _shown(self) -> list[JobRow]:
        rows = self.rows if self.preset is not None else merge_scores(self.rows, self.scores)
        return sort_rows(filter_rows(rows, self.filter_text), self.sort_by)

    def _show(self) -> None:
        table = self.query_one(DataTable)
        narrow = self.size.width < NARROW_BELOW
        columns = fit_columns(self.size.width - SCROLLBAR_ROOM, NARROW_WIDTHS if narrow else WIDE_WIDTHS,
                              padding=2 * table.cell_padding)
        if columns != self._columns:
            self._columns = columns
            table.clear(columns=True)
            two_lines = columns.get("Score", 0) < len(SCORE_HEADING)
            table.header_height = 2 if two_lines else 1
            for label, width in columns.items():
                heading = _cell(label, "", width)
                if label == "Score":
                    heading = Text(SCORE_HEADING.replace(" ", "\n") if two_lines else SCORE_HEADING, justify="right")
                table.add_column(heading, width=width, key=label.lower())
        selected = self.selected()
        table.clear()
        shown = self._shown()
        for row in shown:
            style = STATUS_STYLES.get(STATUS_CLASSES.get(row.status, ""), "cyan")
            values = {"Job": (row.job_id, ""), "Status": (row.shown_status, style),
                      "Model": (short_model(row.model) if narrow else row.model or NO_VALUE, ""),
                      "Created": (shown_created(row.created_at, short=narrow), "")}
            table.add_row(*(_cell(*values[label], width) if label in values else
                            Text(shown_score(row.score), justify="right") for label, width in columns.items()),
                          key=row.job_id)
        if selected is not None and any(r.job_id == selected.job_id for r in shown):
            table.move_cursor(row=table.get_row_index(selected.job_id))
        self._render_header(len(shown))

    def _render_header(self, shown: int) -> None:
        total = len(self.rows)
        running = sum(1 for r in self.rows if not r.terminal)
        count = counted(total, "job") if shown == total else f"{shown} of {counted(total, 'job')}"
        parts = [f"backend {shown_text(self.session.backend_base)}", f"[b]{count}[/b] ({running} active)",
                 f"sort: {self.sort_by}"]
        if self.status_filter:
            parts.append(f"status {shown_text(self.status_filter, 20)}")
        if self.filter_text:
            parts.append(f"[$warning]filter “{shown_text(self.filter_text, 30)}” (esc clears)[/]")
        if self.preset is None and self.loads == 0 and not self.error:
            parts.append("reading the job list…")
        lines = ["   ".join(parts)]
        if self.error:
            every = f"; trying again every {self.refresh_every:g} s" if self.refresh_every else ""
            lines.append(f"[$error]⚠ {shown_text(self.error.rstrip('.'), 300)}{every} (f5 now)[/]")
        elif self.note:
            lines.append(f"[$warning]{shown_text(self.note, 200)}[/]")
        elif self.loads and not self.rows:
            lines.append("The backend lists no jobs" + (f" with status {shown_text(self.status_filter, 20)}."
                                                        if self.status_filter else "."))
        self.query_one("#jobs-header", Static).update("\n".join(lines))

    def selected(self) -> JobRow | None:
        key = highlighted_key(self.query_one(DataTable))
        return next((r for r in self.rows if r.job_id == key), None) if key is not None else None

    # -- keys -----------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # In the filter field, enter keeps the filter and / is typed; elsewhere they attach and filter.
        return not (action in ("attach", "filter") and isinstance(self.focused, Input))

    def action_sort(self) -> None:
        self.sort_by = next_sort(self.sort_by)
        self._show()

    def action_filter(self) -> None:
        field = self.query_one("#jobs-filter", Input)
        self.add_class("-filtering")
        field.value = self.filter_text
        self.set_focus(field)  # at once: keys typed right after the slash go into the field

    def action_clear_filter(self) -> None:
        field = self.query_one("#jobs-filter", Input)
        field.value = ""
        self.remove_class("-filtering")
        self.filter_text = ""
        self.query_one(DataTable).focus()
        self._show()

    @on(Input.Changed, "#jobs-filter")
    def _filter_typed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self._show()

    @on(Input.Submitted, "#jobs-filter")
    def _filter_kept(self) -> None:
        self.remove_class("-filtering")
        self.query_one(DataTable).focus()

    @on(DataTable.RowSelected, "#jobs-table")
    def _row_chosen(self) -> None:
        self.action_attach()

    def action_attach(self) -> None:
        row = self.selected()
        if row is not None:
            self._open_job(row)

    @work(exclusive=True, group="jobs-open", exit_on_error=False, name="Attach")
    async def _open_job(self, row: JobRow) -> None:
        record = await asyncio.to_thread(read_history, row.job_id)
        self.flow_app.tell_history_repairs()
        job = JobContext.from_record(record) if record is not None else JobContext(row.job_id, model=row.model)
        # Esc on the dashboard comes back here.
        self.app.push_screen(DashboardScreen(job, back_to_history=True))

    def action_cancel_job(self) -> None:
        row = self.selected()
        if row is None:
            return
        if row.terminal:
            self.notify(f"Job {row.job_id} has already ended ({row.status}).", severity="warning")
            return
        job_actions.confirm_cancel(self, row.job_id, lambda: self._cancel(row.job_id))

    @work(exclusive=True, group="jobs-cancel", exit_on_error=False, name="Cancel")
    async def _cancel(self, job_id: str) -> None:
        self.notify(f"Cancel of {job_id} requested: {await job_actions.request_cancel(self, job_id)}")
        self.action_refresh()

    def action_rerun(self) -> None:
        row = self.selected()
        if row is not None:
            self._ask_rerun(row.job_id)

    @work(exclusive=True, group="jobs-open", exit_on_error=False, name="Rerun")
    async def _ask_rerun(self, job_id: str) -> None:
        record = await asyncio.to_thread(read_history, job_id)
        self.flow_app.tell_history_repairs()
        if record is None or record.payload is None:
            why = "was not launched from this machine" if record is None else "was attached to, not launched, here"
            self.notify(f"Job {job_id} {why}: its payload is unknown, so it cannot be rerun from here.",
                        title="Rerun", severity="error")
            return
        payload = record.payload
        self.flow_app.confirm(f"Rerun job {job_id}?", lambda: self._rerun(job_id, payload, record.config_path),
                              label="Rerun", detail="Its payload (from the run history) is submitted with a new "
                                                    "Idempotency-Key; the old job stays listed.")

    @work(exclusive=True, group="jobs-rerun", exit_on_error=False, name="Rerun")
    async def _rerun(self, job_id: str, payload: dict[str, Any], config_path: str | None) -> None:
        job = await job_actions.submit_rerun(self, payload, rerun_of=job_id, config_path=config_path,
                                             submitted=lambda new_id: f"Rerun of {job_id} submitted as {new_id}")
        if job is None:
            return
        self.action_refresh()
        # The run it repeats is read and drawn beside it, dimmed, as a rerun from a dashboard is.
        self.app.push_screen(DashboardScreen(job, back_to_history=True, overlay_ids=[job_id]))
