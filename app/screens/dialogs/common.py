"""Dialogs shared by every step: confirm, error, help."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Static

from app.core.redact import printable
from widgets.build_guard import BuildGuard


class ConfirmDialog(ModalScreen[bool], BuildGuard):
    """Ask before something that cannot be undone; y/enter confirms, n/escape cancels. A quit
    question (``interruptible``) also takes Ctrl+C: the second Ctrl+C of an interrupt is its
    answer (``interrupted`` says so; docs/product.md#keys)."""

    AUTO_FOCUS = "#confirm-yes"

    BINDINGS = [
        Binding("y", "confirm", "Yes", id="confirm.yes"),
        Binding("n,escape", "cancel", "No", id="confirm.no"),
    ]

    def __init__(self, question: str, *, confirm_label: str = "Yes", detail: str = "",
                 interruptible: bool = False) -> None:
        super().__init__(classes="dialog")
        self.question = question
        self.confirm_label = confirm_label
        self.detail = detail
        self.interruptible = interruptible
        self.interrupted = False  # answered by Ctrl+C

    def action_copy_or_interrupt(self) -> None:
        """Ctrl+C: a quit question's answer; any other question leaves it to the app (which
        asks whether to quit, over this one)."""
        if not self.interruptible:
            super().action_copy_or_interrupt()
            return
        self.interrupted = True
        self.dismiss(True)

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog-body"):
            yield Static(self.question, id="dialog-title")
            if self.detail:
                yield Static(self.detail, id="dialog-detail")
            with Horizontal(id="dialog-buttons"):
                yield Button(f"{self.confirm_label} (y)", variant="primary", id="confirm-yes")
                yield Button("No (n)", id="confirm-no")

    @on(Button.Pressed, "#confirm-yes")
    def action_confirm(self) -> None:
        self.dismiss(True)

    @on(Button.Pressed, "#confirm-no")
    def action_cancel(self) -> None:
        self.dismiss(False)



class ErrorDialog(ModalScreen[None], BuildGuard):
    """What went wrong and what to do about it. Never a traceback."""

    AUTO_FOCUS = "#error-close"

    BINDINGS = [Binding("escape,enter,q", "close", "Close", id="error.close")]

    def __init__(self, title: str, message: str, hint: str | None = None) -> None:
        super().__init__(classes="dialog error-dialog")
        self.title_text = title
        self.message = message
        self.hint = hint

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog-body"):
            yield Static(self.title_text, id="dialog-title")
            with VerticalScroll(id="dialog-scroll"):
                yield Static(printable(self.message), id="dialog-message", markup=False)
                if self.hint:
                    yield Static(printable(f"What to do: {self.hint}"), id="dialog-hint", markup=False)
            with Horizontal(id="dialog-buttons"):
                yield Button("Close (esc)", variant="error", id="error-close")

    @on(Button.Pressed, "#error-close")
    def action_close(self) -> None:
        self.dismiss(None)


# The help dialog's rows besides its table: border 2, padding 2, title 2, hint 2.
HELP_CHROME_ROWS = 8
HELP_MAX_ROWS = 24


class HelpDialog(ModalScreen[None], BuildGuard):
    """Every binding of the screen the user was on, with what it does."""

    AUTO_FOCUS = "#help-table"

    BINDINGS = [Binding("escape,q,question_mark,f1", "close", "Close", id="help.close")]

    def __init__(self, screen_title: str, rows: list[tuple[str, str]], *, note: str | None = None) -> None:
        """``note`` is said under the rows, before the closing hint (what a row's mark means)."""
        super().__init__(classes="dialog help-dialog")
        self.screen_title = screen_title
        self.rows = rows
        self.note = note

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog-body"):
            yield Static(f"Keys: {self.screen_title}", id="dialog-title")
            yield DataTable(id="help-table", cursor_type="row", zebra_stripes=True)
            hint = "Ctrl+P opens the command palette. Esc closes this help."
            yield Static(f"{self.note}\n{hint}" if self.note else hint, id="dialog-detail", markup=False)

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("Key", "Action")
        for key, description in self.rows:
            table.add_row(key, description)
        self._fit_table()

    def on_resize(self) -> None:
        self._fit_table()

    def _fit_table(self) -> None:
        """The table scrolls inside the dialog: it gets what the dialog's 90% of the screen
        leaves after its border, padding, title and hint (at 80x24 a fixed cap let the last rows
        fall below the screen, where no scrolling reached them)."""
        room = int(self.size.height * 0.9) - HELP_CHROME_ROWS - (self.note is not None)  # the note's line
        self.query_one(DataTable).styles.max_height = max(3, min(HELP_MAX_ROWS, room))

    def action_close(self) -> None:
        self.dismiss(None)
