"""The env review's dialogs: edit a value, add a key, "save before continuing?" and "reload?".

Values are typed into password inputs; ctrl+r reveals them. That input is the only place a
full secret is ever drawn. Inline errors never repeat what was typed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from app.core.env.keys import is_secret_key, secret_parts
from app.core.env.resolve import ResolvedKey
from app.core.errors import EnvFileError
from widgets.build_guard import BuildGuard
from widgets.env_table import source_label

# Applies a value to the in-memory .env; raises EnvFileError when it cannot.
ApplyValue = Callable[[str, str], None]

_KEY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
KEY_NAME_RULE = "Key names use letters, digits and underscores, and do not start with a digit."
EDIT_HELP = "enter applies · ctrl+r shows or hides the value · esc cancels · nothing is written to disk until ctrl+s"


def _problem_text(error: EnvFileError) -> str:
    return f"{error.message}. {error.hint}" if error.hint else error.message


class _ValueDialog(ModalScreen[bool], BuildGuard):
    """Shared by edit and add: a password input with reveal, an inline error, apply/cancel."""

    BINDINGS = [
        # priority: the focused Input must not swallow these.
        Binding("ctrl+r", "toggle_reveal", "Show/hide value", id="env_value.reveal", priority=True),
        Binding("escape", "cancel", "Cancel", id="env_value.cancel"),
    ]

    def __init__(self, apply: ApplyValue) -> None:
        super().__init__(classes="dialog env-value-dialog")
        self.apply = apply

    def value_input(self) -> Input:
        return self.query_one("#env-value", Input)

    def buttons(self) -> ComposeResult:
        with Horizontal(id="dialog-buttons"):
            yield Button("Show (ctrl+r)", id="env-reveal")
            yield Button("Apply (enter)", variant="primary", id="env-apply")
            yield Button("Cancel (esc)", id="env-cancel")

    def action_toggle_reveal(self) -> None:
        value = self.value_input()
        value.password = not value.password
        self.query_one("#env-reveal", Button).label = "Show (ctrl+r)" if value.password else "Hide (ctrl+r)"

    def action_cancel(self) -> None:
        self.dismiss(False)

    @on(Button.Pressed, "#env-reveal")
    def _reveal_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_toggle_reveal()

    @on(Button.Pressed, "#env-apply")
    def _apply_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.submit()

    @on(Button.Pressed, "#env-cancel")
    def _cancel_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(False)

    def show_problem(self, text: str) -> None:
        error = self.query_one("#env-error", Static)
        error.update(text)
        error.add_class("-visible")

    def try_apply(self, name: str, value: str) -> None:
        # Surrounding whitespace in a pasted key is never meant, and breaks auth quietly.
        value = value.strip()
        if not value:
            self.show_problem("Enter a value, or press esc to leave the key as it is.")
            self.value_input().focus()
            return
        try:
            self.apply(name, value)
        except EnvFileError as error:
            self.show_problem(_problem_text(error))
            return
        self.dismiss(True)

    def submit(self) -> None:
        raise NotImplementedError


class EditValueDialog(_ValueDialog):
    """Edit one key's value in the .env held in memory."""

    AUTO_FOCUS = "#env-value"

    def __init__(self, key: ResolvedKey, *, file_value: str | None, file_label: str, apply: ApplyValue,
                 revealed: bool = False) -> None:
        """``revealed``: open with the value shown (the env review's ctrl+r), as ctrl+r here would."""
        super().__init__(apply)
        self.key = key
        self.file_value = file_value or ""
        self.file_label = file_label
        self.revealed = revealed

    def compose(self) -> ComposeResult:
        key = self.key
        with Vertical(id="dialog-body"):
            yield Static(f"Edit {key.name}", id="dialog-title", markup=False)
            in_use = f"In use now: {key.display}  (source: {source_label(key)})" if key.value else "Not set yet."
            yield Static(in_use, id="env-in-use", markup=False)
            if key.source == "preview":
                yield Static(
                    f"⚠ {key.name} is the override typed in the payload preview. What you enter here replaces "
                    f"it for this session (your latest choice wins) and changes {self.file_label} too.",
                    id="env-preview-note", markup=False,
                )
            if key.source in ("shell", "flag"):
                where = "your shell" if key.source == "shell" else f"the {key.origin} flag"
                yield Static(
                    f"⚠ {key.name} is set in {where}, and that value still wins for this session. "
                    f"What you enter here changes {self.file_label} only.",
                    id="env-shell-warning", markup=False,
                )
            hidden = not self.revealed and (is_secret_key(key.name) or bool(secret_parts(key.name, self.file_value)))
            yield Input(value=self.file_value, password=hidden, id="env-value", placeholder=f"value for {key.name}")
            yield Static("", id="env-error", markup=False)
            yield Static(EDIT_HELP, id="dialog-detail")
            yield from self.buttons()

    def on_mount(self) -> None:
        if not self.value_input().password:
            self.query_one("#env-reveal", Button).label = "Hide (ctrl+r)"

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.submit()

    def submit(self) -> None:
        self.try_apply(self.key.name, self.value_input().value)


class AddKeyDialog(_ValueDialog):
    """Add a key (or set one the file does not have yet): a name and a value."""

    def __init__(self, *, suggested_name: str = "", file_label: str, apply: ApplyValue) -> None:
        super().__init__(apply)
        self.suggested_name = suggested_name
        self.file_label = file_label

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog-body"):
            yield Static(f"Add a key to {self.file_label}", id="dialog-title", markup=False)
            yield Input(value=self.suggested_name, placeholder="KEY_NAME", id="env-name")
            yield Input(password=True, placeholder="value", id="env-value")
            yield Static("", id="env-error", markup=False)
            yield Static(EDIT_HELP, id="dialog-detail")
            yield from self.buttons()

    def on_mount(self) -> None:
        # With a suggested name the value is what is left to type.
        (self.value_input() if self.suggested_name else self.query_one("#env-name", Input)).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        if event.input.id == "env-name" and not self.value_input().value:
            self.value_input().focus()
        else:
            self.submit()

    def submit(self) -> None:
        name = self.query_one("#env-name", Input).value.strip()
        if not _KEY_NAME.match(name):
            # The name is not repeated back: a secret pasted into the wrong field stays hidden.
            self.show_problem(KEY_NAME_RULE if name else "Enter a key name, e.g. SYNTH_API_KEY.")
            self.query_one("#env-name", Input).focus()
            return
        self.try_apply(name, self.value_input().value)


class _ChoiceDialog(ModalScreen[str | None], BuildGuard):
    """Buttons and keys that answer with their id: one of ANSWERS, or None (esc, "stay")."""

    ANSWERS: ClassVar[tuple[str, ...]] = ()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_answer(event.button.id or "stay")

    def action_answer(self, answer: str) -> None:
        self.dismiss(answer if answer in self.ANSWERS else None)


class SaveBeforeContinueDialog(_ChoiceDialog):
    """Unsaved edits and the user continues: "save", "continue" (without saving) or None."""

    AUTO_FOCUS = "#save"
    ANSWERS = ("save", "continue")

    BINDINGS = [
        Binding("s", "answer('save')", "Save and continue", id="env_continue.save"),
        Binding("c", "answer('continue')", "Continue without saving", id="env_continue.skip"),
        Binding("escape", "answer('stay')", "Stay here", id="env_continue.stay"),
    ]

    def __init__(self, file_label: str) -> None:
        super().__init__(classes="dialog")
        self.file_label = file_label

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog-body"):
            yield Static(f"Save your changes to {self.file_label} first?", id="dialog-title", markup=False)
            yield Static(
                "This session uses the values shown either way. Saving also keeps them for next time.",
                id="dialog-detail",
            )
            with Horizontal(id="dialog-buttons"):
                # Short enough for three buttons in the dialog at 80 columns; the keys' longer
                # words are in the footer and the help.
                yield Button("Save (s)", variant="primary", id="save")
                yield Button("Don't save (c)", id="continue")
                yield Button("Stay (esc)", id="stay")



class ReloadDialog(_ChoiceDialog):
    """Reload the .env with unsaved edits: "keep" (applied again on top), "drop", or None."""

    AUTO_FOCUS = "#keep"
    ANSWERS = ("keep", "drop")

    BINDINGS = [
        Binding("k", "answer('keep')", "Reload, keep my edits", id="env_reload.keep"),
        Binding("d", "answer('drop')", "Reload, drop my edits", id="env_reload.drop"),
        Binding("escape", "answer('stay')", "Cancel", id="env_reload.stay"),
    ]

    def __init__(self, file_label: str, edited: list[str]) -> None:
        super().__init__(classes="dialog")
        self.file_label = file_label
        self.edited = edited

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog-body"):
            yield Static(f"Reload {self.file_label} from disk?", id="dialog-title", markup=False)
            yield Static(
                f"You have unsaved edits to {', '.join(self.edited)}. Keep: they are applied again on top of "
                "what the file holds now (a key changed on disk too is asked about). Drop: the file as it is.",
                id="dialog-detail", markup=False,
            )
            with Horizontal(id="dialog-buttons"):
                yield Button("Keep edits (k)", variant="primary", id="keep")  # short: 80 columns
                yield Button("Drop edits (d)", variant="warning", id="drop")
                yield Button("Cancel (esc)", id="stay")
