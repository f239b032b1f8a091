"""Choose the earlier runs the dashboard overlays: runs of the same config from the history,
and any job ids typed in (docs/product.md#compare-runs)."""

from __future__ import annotations

import re

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, SelectionList, Static
from textual.widgets.selection_list import Selection

from app.core.history import RunRecord
from app.core.redact import printable
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


class OverlayPickerModal(ModalScreen[list[str] | None], BuildGuard):
    """Returns the job ids to overlay (an empty list removes the overlays), or None."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="overlay.cancel")]

    def __init__(self, earlier: list[RunRecord], chosen: list[str]) -> None:
        super().__init__(classes="modal")
        self.earlier = earlier
        self.chosen = chosen

    def compose(self) -> ComposeResult:
        known = {record.job_id for record in self.earlier}
        with Vertical(id="modal-body"):
            yield Static(f"Overlay earlier runs (at most {MAX_OVERLAYS})", id="modal-title")
            if self.earlier:
                yield Static("Runs of this config from the history (space toggles):", classes="modal-note")
                yield SelectionList[str](*(
                    Selection(f"{printable(r.job_id)}  {r.status:<10} {r.created_at.replace('T', ' ')[:16]}",
                              r.job_id, r.job_id in self.chosen) for r in self.earlier), id="overlay-runs")
            else:
                yield Static("No earlier run of this config is in the history.", classes="modal-note")
            yield Input(" ".join(j for j in self.chosen if j not in known),
                        placeholder="other job ids on this backend, separated by spaces", id="overlay-ids")
            with Horizontal(id="modal-buttons"):
                yield Button("Overlay", variant="primary", id="overlay-apply")
                yield Button("Cancel (esc)", id="overlay-cancel")

    def on_mount(self) -> None:
        target = "#overlay-runs" if self.earlier else "#overlay-ids"
        self.query_one(target).focus()

    def _chosen(self) -> list[str]:
        ids: list[str] = []
        if self.earlier:
            ids.extend(self.query_one("#overlay-runs", SelectionList).selected)
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
