"""Choose the earlier runs the dashboard overlays: runs of the same config from the history,
and any job ids typed in (docs/product.md#compare-runs)."""

from __future__ import annotations

import re

from rich.segment import Segment
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.strip import Strip
from textual.widgets import Button, Input, SelectionList, Static
from textual.widgets.option_list import OptionDoesNotExist
from textual.widgets.selection_list import Selection

from app.core.redact import printable
from app.core.runs.history import RunRecord
from widgets.build_guard import BuildGuard

MAX_OVERLAYS = 4
_SEPARATORS = re.compile(r"[\s,]+")


def typed_job_ids(text: str) -> list[str]:
    """Job ids typed into the field: separated by spaces or commas, each once, in order."""
    ids: list[str] = []
    for part in _SEPARATORS.split(text.strip()):
        if part and part not in ids:
            ids.append(part)
    return ids


class RunChecklist(SelectionList[str]):
    """A SelectionList whose rows say chosen or not in characters when there is no colour:
    Textual's toggle (``▐X▌``) differs only by colour, which NO_COLOR takes away, so there each
    row starts ``[x]`` or ``[ ]`` instead (as wide as the toggle it replaces)."""

    def render_line(self, y: int) -> Strip:
        line = super().render_line(y)
        if not self.app.no_color:
            return line
        segments = list(line)
        try:
            selection = self.get_option_at_index(self.scroll_offset.y + y)
        except OptionDoesNotExist:  # below the last row: nothing to mark
            return line
        mark = "[x]" if selection.value in self._selected else "[ ]"
        style = segments[1].style
        return Strip([Segment(mark, style), *segments[3:]])


class OverlayPickerDialog(ModalScreen[list[str] | None], BuildGuard):
    """Returns the job ids to overlay (an empty list removes the overlays), or None."""

    AUTO_FOCUS = "#overlay-runs, #overlay-ids"

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="overlay.cancel")]

    def __init__(self, earlier: list[RunRecord], chosen: list[str]) -> None:
        super().__init__(classes="dialog")
        self.earlier = earlier
        self.chosen = chosen
        # The statuses the backend gave since the dialog opened (show_status), by job id.
        self.answered: dict[str, str] = {}

    def status_of(self, record: RunRecord) -> str:
        """The status the backend gave for it while the dialog was open, else the one the history
        last recorded: as is when final, marked "?" when the job had not ended then (the backend
        may since have moved it on), nothing when the history has none."""
        if record.job_id in self.answered:
            return self.answered[record.job_id]
        if record.final_status:
            return record.final_status
        return f"{record.last_status}?" if record.last_status else ""

    def _prompt(self, record: RunRecord) -> str:
        return f"{printable(record.job_id)}  {printable(self.status_of(record)):<11} " \
               f"{record.created_at.replace('T', ' ')[:16]}"

    def show_status(self, job_id: str, status: str) -> None:
        """The backend's answer for one listed job (the dashboard asks once the dialog opens)."""
        record = next((r for r in self.earlier if r.job_id == job_id), None)
        if record is None or not self.is_attached:
            return
        self.answered[job_id] = status
        self.query_one("#overlay-runs", RunChecklist).replace_option_prompt(job_id, self._prompt(record))

    def compose(self) -> ComposeResult:
        known = {record.job_id for record in self.earlier}
        with Vertical(id="dialog-body"):
            yield Static(f"Overlay earlier runs (at most {MAX_OVERLAYS})", id="dialog-title")
            if self.earlier:
                yield Static("Runs of this config from the history (space toggles):", classes="dialog-note")
                yield RunChecklist(*(Selection(self._prompt(r), r.job_id, r.job_id in self.chosen, id=r.job_id)
                                     for r in self.earlier), id="overlay-runs")
            else:
                yield Static("No earlier run of this config is in the history.", classes="dialog-note")
            yield Input(" ".join(j for j in self.chosen if j not in known),
                        placeholder="other job ids on this backend, separated by spaces", id="overlay-ids")
            with Horizontal(id="dialog-buttons"):
                yield Button("Overlay", variant="primary", id="overlay-apply")
                yield Button("Cancel (esc)", id="overlay-cancel")

    def _chosen(self) -> list[str]:
        ids: list[str] = []
        if self.earlier:
            ids.extend(self.query_one("#overlay-runs", RunChecklist).selected)
        ids.extend(j for j in typed_job_ids(self.query_one("#overlay-ids", Input).value) if j not in ids)
        return ids

    @on(Input.Submitted, "#overlay-ids")
    @on(Button.Pressed, "#overlay-apply")
    def action_apply(self) -> None:
        ids = self._chosen()
        if len(ids) > MAX_OVERLAYS:
            self.notify(f"{len(ids)} runs chosen: at most {MAX_OVERLAYS} can be overlaid.", severity="error")
            return
        self.dismiss(ids)

    @on(Button.Pressed, "#overlay-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
