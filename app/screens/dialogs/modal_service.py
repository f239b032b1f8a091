"""The env review's Modal dialogs: choose a secret to read ENVIRONMENT_API_KEY from, wait for
the container that reads it (esc cancels), choose a deployed app's web endpoint for
TASK_APP_URL, and name the secret to send the key to (docs/modal.md, docs/product.md#env-review);
and the env review's notice when --modal-secret / --modal-app gave nothing.

No dialog ever shows a secret's value: a read value goes straight to the .env in memory, as
an unsaved, masked edit.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, LoadingIndicator, OptionList, Static
from textual.widgets.option_list import Option

from app.core.redact import printable
from widgets.build_guard import BuildGuard

READ_COST = ("Reading a value starts a short Modal container with the secret mounted: it takes a few "
             "seconds to tens of seconds and uses a little compute on your Modal account. Modal has no "
             "other way to read a secret.")


class ModalFailureNotice(Static):
    """Why --modal-secret / --modal-app gave nothing before the first screen, and the fix."""

    def __init__(self, message: str, hint: str | None) -> None:
        text = Content.assemble(("⚠ Modal: ", "bold $text-error"), printable(message))
        if hint:
            text = Content.assemble(text, "\n", ("What to do: ", "bold"), printable(hint))
        text = Content.assemble(text, "\n", ("Or select ENVIRONMENT_API_KEY or TASK_APP_URL and press m to take it "
                                              "from Modal here, or enter to set it yourself.", "$text-muted"))
        super().__init__(text, id="env-modal-problem")


class ModalSecretPicker(ModalScreen[str | None], BuildGuard):
    """Which secret to read the key from (names holding "env" first); returns its name."""

    AUTO_FOCUS = "OptionList"

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="modal_secret.cancel")]

    def __init__(self, names: list[str], key: str) -> None:
        super().__init__(classes="dialog")
        self.names = names
        self.key = key

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog-body"):
            yield Static(f"Read {self.key} from a Modal secret", id="dialog-title")
            yield Static(READ_COST, id="dialog-detail")
            yield OptionList(*(Option(printable(name), id=name) for name in self.names), id="modal-secrets")
            yield Static("enter reads the highlighted secret · esc cancels · the value arrives masked and "
                         "unsaved (ctrl+s saves it)", classes="dialog-note")
            with Horizontal(id="dialog-buttons"):
                yield Button("Read (enter)", variant="primary", id="modal-secret-read")
                yield Button("Cancel (esc)", id="modal-secret-cancel")

    @on(OptionList.OptionSelected, "#modal-secrets")
    @on(Button.Pressed, "#modal-secret-read")
    def action_read(self) -> None:
        options = self.query_one(OptionList)
        if options.highlighted is None:
            return
        self.dismiss(options.get_option_at_index(options.highlighted).id)

    @on(Button.Pressed, "#modal-secret-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


class ModalWait(ModalScreen[None], BuildGuard):
    """A Modal call in progress; esc sets ``cancel`` (the caller's worker stops the process)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="modal_wait.cancel")]

    def __init__(self, what: str, cancel: threading.Event) -> None:
        super().__init__(classes="dialog")
        self.what = what
        self.cancel = cancel

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog-body"):
            yield Static(self.what, id="dialog-title")
            yield LoadingIndicator(id="modal-wait-indicator")
            with Horizontal(id="dialog-buttons"):
                yield Button("Cancel (esc)", id="modal-wait-cancel")

    @on(Button.Pressed, "#modal-wait-cancel")
    def action_cancel(self) -> None:
        self.cancel.set()
        self.dismiss(None)


class ModalEndpointPicker(ModalScreen[str | None], BuildGuard):
    """A deployed app's web endpoint for TASK_APP_URL; returns its URL (not a secret)."""

    AUTO_FOCUS = "OptionList"

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="modal_endpoint.cancel")]

    def __init__(self, endpoints: Sequence[tuple[str, str, str]]) -> None:
        """``endpoints``: (app, function, url), in the order to show."""
        super().__init__(classes="dialog")
        self.endpoints = endpoints

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog-body"):
            yield Static("TASK_APP_URL from a deployed Modal app", id="dialog-title")
            yield OptionList(*(Option(f"{printable(app)} · {printable(function)}\n  {printable(url)}", id=url)
                               for app, function, url in self.endpoints), id="modal-endpoints")
            with Horizontal(id="dialog-buttons"):
                yield Button("Use it (enter)", variant="primary", id="modal-endpoint-use")
                yield Button("Cancel (esc)", id="modal-endpoint-cancel")

    @on(OptionList.OptionSelected, "#modal-endpoints")
    @on(Button.Pressed, "#modal-endpoint-use")
    def action_use(self) -> None:
        options = self.query_one(OptionList)
        if options.highlighted is None:
            return
        self.dismiss(options.get_option_at_index(options.highlighted).id)

    @on(Button.Pressed, "#modal-endpoint-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


class SendToModalDialog(ModalScreen[str | None], BuildGuard):
    """The secret to write ENVIRONMENT_API_KEY into; returns its name."""

    AUTO_FOCUS = "Input"

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="modal_send.cancel")]

    def __init__(self, default_name: str) -> None:
        super().__init__(classes="dialog")
        self.default_name = default_name

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog-body"):
            yield Static("Send ENVIRONMENT_API_KEY to a Modal secret", id="dialog-title")
            yield Static("A task app deployed on Modal with this secret then accepts the key the backend "
                         "sends. The secret is created, or REPLACED with this one key: any other key it "
                         "holds is removed. The value goes through a private temporary file, never a "
                         "command line.", id="dialog-detail")
            yield Input(self.default_name, placeholder="secret name", id="modal-send-name")
            with Horizontal(id="dialog-buttons"):
                yield Button("Send (enter)", variant="primary", id="modal-send-go")
                yield Button("Cancel (esc)", id="modal-send-cancel")

    @on(Input.Submitted, "#modal-send-name")
    @on(Button.Pressed, "#modal-send-go")
    def action_send(self) -> None:
        name = self.query_one(Input).value.strip()
        if name:
            self.dismiss(name)

    @on(Button.Pressed, "#modal-send-cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
