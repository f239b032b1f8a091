"""JSON for people: highlighted, scrollable and copyable.

``json_highlighted`` highlights a document for a read-only pane; ``JsonReportModal`` shows a long
report in a scrollable, selectable TextArea and copies it to the clipboard with ``y``.
"""

from __future__ import annotations

import importlib.util

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.highlight import highlight
from textual.screen import ModalScreen
from textual.widgets import Button, Static, TextArea

from widgets.build_guard import BuildGuard


def json_highlighted(text: str) -> Content:
    """JSON highlighted with the same Pygments lexer rich's Syntax uses, but styled with the
    theme's variables: rich's ``Syntax`` paints its own background bands, which clash with
    every theme but one."""
    return highlight(text, language="json")


def text_area_language(language: str) -> str | None:
    """TextArea highlights only with tree-sitter (an extra dependency); plain text otherwise."""
    return language if importlib.util.find_spec("tree_sitter") is not None else None


class JsonReportModal(ModalScreen[None], BuildGuard):
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
        super().__init__(classes="modal json-report-modal")
        self.title_text = title
        self.text = text
        self.copied_message = copied_message

    def compose(self) -> ComposeResult:
        with Vertical(id="modal-body"):
            yield Static(self.title_text, id="modal-title", markup=False)
            yield TextArea(self.text, read_only=True, language=text_area_language("json"), show_line_numbers=True,
                           soft_wrap=False, id="report-text")
            with Horizontal(id="modal-buttons"):
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
