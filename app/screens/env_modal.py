"""The env review's Modal actions (docs/product.md#env-review, docs/modal.md): ENVIRONMENT_API_KEY
from a Modal secret, TASK_APP_URL from a deployed app's web endpoint, and the key sent to a
Modal secret. Every Modal call is a blocking subprocess: it runs in a thread worker, with a
wait dialog whose esc stops it; a failure becomes the error dialog (FlowScreen).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TypeVar

from textual import events, on, work
from textual.binding import Binding

from app.core.modal import ModalCli, deployed_endpoints
from app.core.modal_errors import ModalCancelled
from app.core.modal_output import SecretSent
from app.screens.base import FlowScreen
from app.screens.commands import palette_tooltip
from app.screens.dialogs.modal_service import (
    ModalEndpointPicker,
    ModalFailureNotice,
    ModalSecretPicker,
    ModalWait,
    SendToModalDialog,
)
from widgets.env_table import MaskedEnvTable

T = TypeVar("T")

MODAL_BINDINGS = [
    Binding("m", "from_modal", "From Modal", id="env.from_modal",
            tooltip=palette_tooltip("ENVIRONMENT_API_KEY or TASK_APP_URL from Modal…",
                                    "Read the key from a Modal secret (starts a short container), "
                                    "or pick a deployed app's URL")),
    Binding("u", "send_to_modal", "Send to Modal", id="env.send_to_modal", show=False,
            tooltip=palette_tooltip("Send ENVIRONMENT_API_KEY to Modal…",
                                    "Write the key into a Modal secret for a task app deployed there")),
]
DEFAULT_SECRET = "synth-tui-env"


class ModalActions(FlowScreen):
    """Mixed into the env review, which provides ``apply_value(name, value)``."""

    # The secret ENVIRONMENT_API_KEY was read from in this session: Send to Modal offers it.
    modal_secret: str | None = None
    apply_value: Callable[[str, str], None]

    @on(events.Mount)
    def _show_modal_failure(self) -> None:
        """--modal-secret / --modal-app gave nothing before the first screen: say why and the
        fix here, above the keys, until a read from Modal succeeds (docs/modal.md#in-synth-tui)."""
        failure = self.session.modal_failure
        if failure is not None:
            self.mount(ModalFailureNotice(failure.message, failure.hint), after="#env-status")

    def _modal_read_succeeded(self) -> None:
        self.session.modal_failure = None
        for notice in self.query(ModalFailureNotice):
            notice.remove()

    def action_from_modal(self) -> None:
        name = self.query_one(MaskedEnvTable).selected_key
        if name == "ENVIRONMENT_API_KEY":
            self._key_from_modal()
        elif name == "TASK_APP_URL":
            self._url_from_modal()
        else:
            self.notify("Select ENVIRONMENT_API_KEY (read from a Modal secret) or TASK_APP_URL (a deployed "
                        "app's endpoint), then press m.", title="From Modal", severity="warning")

    async def _modal_call(self, what: str, call: Callable[[threading.Event], T]) -> T | None:
        """Run ``call(cancel)`` in a thread behind a wait dialog; None when the user cancelled."""
        cancel = threading.Event()
        wait = ModalWait(what, cancel)
        self.app.push_screen(wait)
        try:
            return await asyncio.to_thread(call, cancel)
        except ModalCancelled:
            return None
        finally:
            if wait.is_attached and not cancel.is_set():
                wait.dismiss(None)

    @work(exclusive=True, group="modal", exit_on_error=False, name="Modal")
    async def _key_from_modal(self) -> None:
        cli = ModalCli()
        secrets = await self._modal_call("Listing your Modal secrets…", lambda cancel: cli.list_secrets(cancel=cancel))
        if secrets is None:
            return
        if not secrets:
            self.notify("The active Modal environment has no secrets (`modal secret create`).", severity="warning")
            return
        chosen = await self.app.push_screen_wait(ModalSecretPicker([s.name for s in secrets], "ENVIRONMENT_API_KEY"))
        if chosen is None:
            return
        value = await self._modal_call(
            f"Starting a Modal container to read ENVIRONMENT_API_KEY from secret {chosen}… (esc cancels)",
            lambda cancel: cli.read_secret_value(chosen, "ENVIRONMENT_API_KEY", cancel=cancel, check_exists=False))
        if value is None:
            self.notify("Cancelled: nothing was read.")
            return
        self.apply_value("ENVIRONMENT_API_KEY", value)
        self.modal_secret = chosen
        self._modal_read_succeeded()
        self.notify(f"ENVIRONMENT_API_KEY read from Modal secret {chosen}: not saved yet (ctrl+s saves).",
                    title="From Modal")

    @work(exclusive=True, group="modal", exit_on_error=False, name="Modal")
    async def _url_from_modal(self) -> None:
        cli = ModalCli()
        endpoints = await self._modal_call("Reading your deployed Modal apps and their web endpoints…",
                                           lambda cancel: deployed_endpoints(cli, cancel=cancel))
        if endpoints is None:
            return
        if not endpoints:
            self.notify("No deployed Modal app has a web endpoint (`modal deploy` a task app first).",
                        severity="warning")
            return
        url = await self.app.push_screen_wait(ModalEndpointPicker(endpoints))
        if url:
            self.apply_value("TASK_APP_URL", url)
            self._modal_read_succeeded()
            self.notify(f"TASK_APP_URL set to {url}: not saved yet (ctrl+s saves).", title="From Modal")

    def action_send_to_modal(self) -> None:
        key = next((k for k in self.session.resolved if k.name == "ENVIRONMENT_API_KEY"), None)
        value = key.value if key is not None else None
        if not value:
            self.notify("There is no ENVIRONMENT_API_KEY to send: add one or read it from Modal first.",
                        severity="warning")
            return
        self._send_to_modal(value)

    @work(exclusive=True, group="modal", exit_on_error=False, name="Send to Modal")
    async def _send_to_modal(self, value: str) -> None:
        name = await self.app.push_screen_wait(SendToModalDialog(self.modal_secret or DEFAULT_SECRET))
        if name is None:
            return
        cli = ModalCli()
        sent: SecretSent | None = await self._modal_call(
            f"Writing ENVIRONMENT_API_KEY into Modal secret {name}, then checking that it landed…",
            lambda cancel: cli.send_secret(name, {"ENVIRONMENT_API_KEY": value}, cancel=cancel))
        if sent is None:
            self.notify("Cancelled: if the write had already started, `modal secret list` shows whether it landed.",
                        title="Send to Modal", severity="warning")
            return
        self.modal_secret = name
        if sent.confirmed:
            self.notify(f"ENVIRONMENT_API_KEY sent to Modal secret {name} and confirmed: {sent.detail}",
                        title="Send to Modal")
        else:
            self.notify(f"ENVIRONMENT_API_KEY sent to Modal secret {name}, but it could not be confirmed: "
                        f"{sent.detail} Check with `modal secret list`, or select ENVIRONMENT_API_KEY and press m "
                        "to read it back (starts a container).",
                        title="Send to Modal: not confirmed", severity="warning", timeout=30)
