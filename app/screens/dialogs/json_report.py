"""A long JSON report in a dialog: scrollable, selectable, copied to the clipboard with ``y``."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static, TextArea

from widgets.build_guard import BuildGuard
from widgets.json_view import text_area_language


class JsonReportDialog(ModalScreen[None], BuildGuard):
    """A long JSON report, read-only: arrows/page keys scroll, ``y`` copies, Esc closes."""

    AUTO_FOCUS = "#report-text"

    BINDINGS = [
        Binding("y", "copy", "Copy", id="report.copy"),
        # Priority, so ctrl+c copies here instead of asking to quit; a selection is copied
        # as itself, nothing selected copies the whole report.
        Binding("ctrl+c", "copy", "Copy", id="report.copy_ctrl_c", show=False, priority=True),
        Binding("escape,q", "close", "Close", id="report.close"),
    ]

    def __init__(self, title: str, text: str, *, copied_message: str = "Copied") -> None:
        super().__init__(classes="dialog json-report-dialog")
        self.title_text = title
        self.text = text
        self.copied_message = copied_message

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog-body"):
            yield Static(self.title_text, id="dialog-title", markup=False)
            yield TextArea(self.text, read_only=True, language=text_area_language("json"), show_line_numbers=True,
                           soft_wrap=False, id="report-text")
            with Horizontal(id="dialog-buttons"):
                yield Button("Copy (y)", variant="primary", id="report-copy")
                yield Button("Close (esc)", id="report-close")

    @on(Button.Pressed, "#report-copy")
    def action_copy(self) -> None:
        selected = self.query_one("#report-text", TextArea).selected_text
        self.app.copy_to_clipboard(selected or self.text)
        self.notify("Selection copied" if selected else self.copied_message, timeout=3)

    @on(Button.Pressed, "#report-close")
    def action_close(self) -> None:
        self.dismiss(None)
