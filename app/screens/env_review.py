"""Step 2: review the .env secrets, masked, and edit them in place (docs/product.md#env-review).

Edits change the .env held in memory (``session.env``) and take effect for this session at
once; the file on disk changes only on ctrl+s, in a worker. Reading and saving files runs in
thread workers; a failure there becomes an error dialog (FlowScreen). Full secret values are
never put in the table, a notification or a message: only ``ResolvedKey.display``. A change
of the file on disk is watched for while the screen is open (``DiskWatch``, env_watch.py).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.message import Message
from textual.widgets import DataTable, Static

from app.core.env import envfile
from app.core.env.discovery import discover_env_files
from app.core.env.wording import env_path_problem, how_chosen
from app.core.errors import EnvFileError, SynthTuiError
from app.core.text import display_path, home_relative
from app.screens.commands import palette_tooltip
from app.screens.dialogs.env import AddKeyDialog, EditValueDialog, ReloadDialog, SaveBeforeContinueDialog
from app.screens.dialogs.path_prompt import PathPromptDialog
from app.screens.env_modal import MODAL_BINDINGS, ModalActions
from app.screens.env_watch import DiskWatch
from widgets.app_header import AppHeader
from widgets.env_table import MaskedEnvTable, describe
from widgets.steady_footer import SteadyFooter


class EnvReviewScreen(ModalActions, DiskWatch):
    AUTO_FOCUS = "MaskedEnvTable"
    TITLE = "Review the .env secrets"

    BINDINGS = [
        # Continue leads: at 80 columns the footer has room for only the first few keys.
        Binding("c,ctrl+n", "continue", "Continue", id="env.continue",
                tooltip=palette_tooltip("Continue to verification",
                                        "Check the backend and the task app with these keys")),
        Binding("enter,i", "edit", "Edit", id="env.edit", key_display="enter"),
        # The edit dialog's ctrl+r, from here too, so `?` names it (issue 37); off the footer.
        Binding("ctrl+r", "edit_revealed", "Edit with the value shown", id="env.edit_revealed", show=False),
        Binding("a", "add_key", "Add key", id="env.add",
                tooltip=palette_tooltip("Add a key to the .env",
                                        "Add a key and its value (kept in memory until you save)")),
        Binding("ctrl+s", "save", "Save", id="env.save",
                tooltip=palette_tooltip("Save the .env",
                                        "Write your edits to the .env file (atomic; every other line kept)")),
        Binding("e", "choose_env_file", "Other .env", id="env.choose",
                tooltip=palette_tooltip("Choose another .env…", "Pick a discovered .env file or type a path")),
        Binding("r,f5", "reload", "Reload", id="env.reload", key_display="r",
                tooltip=palette_tooltip("Reload the .env from disk",
                                        "Read it again; with unsaved edits, asks whether to keep them")),
        *MODAL_BINDINGS,
        Binding("escape", "back", "Back", id="env.back"),
    ]

    class EnvLoaded(Message):
        """A worker finished reading a .env (``path`` None: it failed, and its error reaches
        the worker failure path). The UI thread then makes it the session's (use_env)."""

        def __init__(self, path: Path | None = None, env: envfile.EnvFile | None = None, how: str = "chosen",
                     candidates: list[Path] | None = None) -> None:
            super().__init__()
            self.path, self.env, self.how, self.candidates = path, env, how, candidates

    class EnvSaved(Message):
        def __init__(self, env: envfile.EnvFile, then_continue: bool) -> None:
            super().__init__()
            self.env = env
            self.then_continue = then_continue

    class EnvReloaded(Message):
        """The .env read again from disk, with the edits that applied; ``conflicts``: edited
        keys that changed on disk too (their values, the user's, wait for an answer)."""

        def __init__(self, env: envfile.EnvFile, applied: set[str], conflicts: dict[str, str]) -> None:
            super().__init__()
            self.env, self.applied, self.conflicts = env, applied, conflicts

    class SaveRefused(Message):
        """The file changed on disk since it was read: the save was refused, nothing written."""

    def __init__(self) -> None:
        super().__init__()
        self.edited: set[str] = set()  # keys changed since the last load or save
        self.loading = False

    def compose(self) -> ComposeResult:
        yield AppHeader()
        yield Static(id="env-header", classes="flow-header")
        yield Static(id="env-status")
        yield Static(id="env-disk")
        yield MaskedEnvTable(id="env-table")
        yield Static(id="env-detail", markup=False)
        yield Static(id="env-warnings")
        yield SteadyFooter()

    def on_mount(self) -> None:
        super().on_mount()
        self.cwd = self.session.options.cwd.resolve()
        if self.session.env is None:
            self.loading = True
            self.run_worker(self._open_initial_env, name="Reading the .env file", group="env-open",
                            thread=True, exclusive=True, exit_on_error=False)
        else:
            self.session.resolve()
        self._refresh()
        self.start_disk_watch()

    # -- reading -------------------------------------------------------------------------------

    def _open_initial_env(self) -> None:
        loaded = self.EnvLoaded()
        try:
            choice = self.session.initial_env_choice()
            # No .env anywhere: review an empty one at <cwd>/.env; ctrl+s creates it (0600).
            path = choice.path or (self.session.options.cwd / ".env").resolve()
            loaded = self.EnvLoaded(path, self.session.read_env(path), choice.how, list(choice.candidates))
        finally:
            self.post_message(loaded)

    def _open_env(self, path: Path) -> None:
        loaded = self.EnvLoaded()
        try:
            loaded = self.EnvLoaded(path, self.session.read_env(path))
        finally:
            self.post_message(loaded)

    def on_screen_resume(self) -> None:
        # Back from a later step: show the keys as they are now.
        if self.session.env is not None and not self.loading:
            self.session.resolve()
            self._refresh()

    def on_env_review_screen_env_loaded(self, message: EnvLoaded) -> None:
        self.loading = False
        if message.path is not None:
            try:
                self.session.use_env(message.env, message.path, message.how, message.candidates)
            except SynthTuiError as exc:  # the backend the .env names cannot be used
                self.flow_app.show_error("Reading the .env file failed", exc)
        self.edited.clear()
        self.disk_read_again()
        self._refresh()

    # -- what is shown -------------------------------------------------------------------------

    def file_label(self) -> str:
        env = self.session.env
        return display_path(env.path, self.cwd) if env is not None else ".env"

    def disk_state_shown(self) -> None:
        self.query_one("#env-status", Static).update(self._status())

    def _refresh(self, select: str | None = None) -> None:
        self.query_one("#env-header", Static).update(self._header())
        self.query_one("#env-status", Static).update(self._status())
        table = self.query_one(MaskedEnvTable)
        table.show(self.session.resolved, self.edited)
        if select:
            table.select_key(select)
        self._describe_selected()
        warnings = self.session.env.warnings if self.session.env is not None else []
        notes = self.query_one("#env-warnings", Static)
        notes.update(Content("\n").join(Content.styled(f"⚠ {warning}", "$text-warning") for warning in warnings))
        notes.set_class(not warnings, "-hidden")

    def _header(self) -> Content:
        step = ("Step 2 of 4 · ", "$text-muted")
        env, choice = self.session.env, self.session.env_choice
        if env is None:
            if self.loading:
                return Content.assemble(step, "Reading the .env file…")
            return Content.assemble(step, ("No .env loaded", "bold"), " — press e to choose one.")
        if not env.exists:
            header = Content.assemble(
                step, ("No .env found", "bold"), " — press a to add keys; ctrl+s creates ",
                (home_relative(env.path), "bold"), " with mode 0600",
            )
        else:
            how = how_chosen(choice.how) if choice else "chosen"
            others = len(choice.candidates) - 1 if choice else 0
            more = f" · {others} more found, e to switch" if others > 0 else " · e to switch"
            header = Content.assemble(step, "Env file ", (self.file_label(), "bold"),
                                      (f"  ({how}{more})", "$text-muted"))
        if env.dirty:
            header = Content.assemble(header, ("   ● unsaved changes", "bold $text-warning"))
        return header

    def _status(self) -> Content:
        if self.session.env is None and self.loading:
            return Content("")
        missing = self.session.missing_keys()
        if missing:
            return Content.assemble(("✗ Missing: ", "bold $text-error"), (", ".join(missing), "bold"),
                                    " — select its row: enter sets it, m takes it from Modal (a adds any key).")
        with_credentials = self.session.urls_with_credentials()
        if with_credentials:
            return Content.assemble(("✗ A user name or password in ", "bold $text-error"),
                                    (", ".join(with_credentials), "bold"),
                                    " — verification refuses it: enter on its row sets the URL without user:pass@.")
        unsendable = self.session.unsendable_keys()
        if unsendable:
            return Content.assemble(("✗ Cannot be sent: ", "bold $text-error"), ("; ".join(unsendable), "bold"),
                                    " — enter on its row sets it again (API keys are plain ASCII, no spaces).")
        if self.disk_changed:  # c waits for the reload (the notice above says so)
            return Content.assemble(("✓ Every required key has a value", "$text-success"),
                                    " as read — r reloads the changed file first.")
        return Content.assemble(("✓ Every required key has a value", "$text-success"),
                                " — c continues to verification.")

    # -- editing (in memory) -------------------------------------------------------------------

    def apply_value(self, name: str, value: str) -> None:
        """Set a key in the in-memory .env; raises EnvFileError for the dialog to show."""
        env = self.session.env
        if env is None:
            raise EnvFileError("No .env file is loaded", hint="Press e to choose one.")
        from_preview = any(k.name == name and k.source == "preview" for k in self.session.resolved)
        env.set(name, value)
        if from_preview:  # the latest choice wins: the .env's value, or over --task-url the override
            self.session.override(task_url=value if self.session.options.task_url else None)  # docs/product.md
        self.session.resolve()
        self.edited.add(name)
        self._refresh(select=name)

    def _editable(self) -> envfile.EnvFile | None:
        if self.session.env is None:
            self.notify("Press e to choose a .env file first." if not self.loading else "Still reading the .env file…",
                        title="No .env loaded", severity="warning")
        return self.session.env

    @on(DataTable.RowHighlighted, "#env-table")
    def _describe_selected(self) -> None:
        name = self.query_one(MaskedEnvTable).selected_key
        key = next((k for k in self.session.resolved if k.name == name), None)
        self.query_one("#env-detail", Static).update(
            describe(key, self.file_label(), edited=key.name in self.edited) if key else "")

    @on(DataTable.RowSelected, "#env-table")
    def _row_chosen(self) -> None:
        self.action_edit()

    def action_edit_revealed(self) -> None:
        self.action_edit(revealed=True)

    def action_edit(self, revealed: bool = False) -> None:
        env = self._editable()
        name = self.query_one(MaskedEnvTable).selected_key
        if env is None or name is None:
            return
        key = next((k for k in self.session.resolved if k.name == name), None)
        if key is None:
            return
        self.app.push_screen(EditValueDialog(key, file_value=env.get(name), file_label=self.file_label(),
                                            apply=self.apply_value, revealed=revealed))

    def action_add_key(self) -> None:
        if self._editable() is None:
            return
        missing = self.session.missing_keys()
        selected = self.query_one(MaskedEnvTable).selected_key
        suggested = selected if selected in missing else (missing[0] if missing else "")
        self.app.push_screen(AddKeyDialog(suggested_name=suggested, file_label=self.file_label(),
                                         apply=self.apply_value))

    # -- saving ---------------------------------------------------------------------------------

    def action_save(self) -> None:
        self._save(then_continue=False)

    def _save(self, *, then_continue: bool) -> None:
        env = self._editable()
        if env is None:
            return
        if not env.dirty:
            self.notify(f"{self.file_label()} has no unsaved changes.", title="Nothing to save", markup=False)
            return
        self.run_worker(lambda: self._write(env, then_continue), name=f"Saving {self.file_label()}",
                        group="env-save", thread=True, exclusive=True, exit_on_error=False)

    def _write(self, env: envfile.EnvFile, then_continue: bool) -> None:
        try:
            env.save()  # atomic; keeps every other byte; a new file gets 0600
        except envfile.EnvFileChangedOnDisk:
            self.post_message(self.SaveRefused())
            return
        self.post_message(self.EnvSaved(env, then_continue))

    def on_env_review_screen_save_refused(self, message: SaveRefused) -> None:
        self.disk_changed = True
        self.flow_app.confirm(
            f"{self.file_label()} changed on disk since it was read, so nothing was saved. Reload it?",
            self._reload, label="Reload",
            detail="Your edits are applied again on top of what the file holds now; an edited key that "
                   "changed on disk too is asked about. Then ctrl+s saves.")

    # -- reload ---------------------------------------------------------------------------------

    def action_reload(self) -> None:
        env = self._editable()
        if env is None:
            return
        if self.edited and env.dirty:  # never drop unsaved edits without asking
            self.app.push_screen(ReloadDialog(self.file_label(), sorted(self.edited)), self._after_reload_question)
        else:
            self._reload()

    def _after_reload_question(self, answer: str | None) -> None:
        if answer is not None:
            self._reload(keep_edits=answer == "keep")

    def _reload(self, *, keep_edits: bool = True) -> None:
        env = self._editable()
        if env is None:
            return
        edits = {key: value for key in self.edited if (value := env.get(key)) is not None} if keep_edits else {}
        self.run_worker(lambda: self._reread(env, edits), name=f"Reloading {self.file_label()}",
                        group="env-open", thread=True, exclusive=True, exit_on_error=False)

    def _reread(self, env: envfile.EnvFile, edits: dict[str, str]) -> None:
        fresh, conflicts = env.reload(edits)
        applied = {key for key in edits if key not in conflicts}
        self.post_message(self.EnvReloaded(fresh, applied, {key: edits[key] for key in conflicts}))

    def on_env_review_screen_env_reloaded(self, message: EnvReloaded) -> None:
        current = self.session.env
        if current is None or current.path != message.env.path:
            return  # the user switched files meanwhile
        self.session.replace_env(message.env)
        self.edited = {key for key in message.applied if message.env.dirty}
        self.disk_read_again()
        self._refresh()
        conflicts = message.conflicts
        if not conflicts:
            kept = f"; your edits to {', '.join(sorted(message.applied))} are applied" if message.applied else ""
            self.notify(f"Read {self.file_label()} again from disk{kept}.", title="Reloaded", markup=False)
            return
        names = ", ".join(sorted(conflicts))
        self.flow_app.confirm(
            f"{names} changed on disk too. Keep your values?", lambda: self._keep_mine(conflicts), label="Keep mine",
            detail="Yes puts your values back (unsaved until ctrl+s); No keeps what the file holds now.")

    def _keep_mine(self, values: dict[str, str]) -> None:
        for key, value in values.items():
            self.apply_value(key, value)

    def on_env_review_screen_env_saved(self, message: EnvSaved) -> None:
        if message.env is not self.session.env:
            return  # the user switched files while it was saving
        self.edited.clear()
        choice = self.session.env_choice
        if choice is not None and choice.how == "none":  # the file now exists: this save created it
            self.session.env_choice = replace(choice, how="created")
        self.disk_read_again()
        self._refresh()
        self.notify(f"Saved {self.file_label()}.", title="Saved", markup=False)
        if message.then_continue:
            self.flow_app.go_to_verification()

    # -- another .env ---------------------------------------------------------------------------

    def action_choose_env_file(self) -> None:
        cwd = self.cwd
        current = self.session.env.path if self.session.env is not None else None
        self.app.push_screen(
            PathPromptDialog(
                "Choose a .env file",
                cwd=cwd,
                check=lambda path: env_path_problem(path, cwd),
                detail=f"Pick one found in the project, or type a path (relative to {home_relative(cwd)}).",
                placeholder="path/to/.env",
                find_candidates=self._env_candidates,
                current=current,
            ),
            self._switch_to,
        )

    def _env_candidates(self) -> list[Path]:
        """The first choice's candidates, then a fresh search. Blocking: runs in the dialog's worker."""
        choice = self.session.env_choice
        known = list(choice.candidates) if choice else []
        found = discover_env_files(self.session.options.cwd, config_path=self.session.config_path)
        return list(dict.fromkeys([*known, *found]))

    def _switch_to(self, path: Path | None) -> None:
        env = self.session.env
        if path is None:
            return
        if env is not None and path == env.path:
            self.notify(f"{self.file_label()} is already in use.", markup=False)
            return
        if env is not None and env.dirty:
            self.flow_app.confirm(
                f"Switch to {display_path(path, self.cwd)} and drop the unsaved changes to {self.file_label()}?",
                lambda: self._load(path),
                detail="Press n and then ctrl+s to save them first.",
                label="Switch",
            )
        else:
            self._load(path)

    def _load(self, path: Path) -> None:
        self.loading = True
        self.run_worker(lambda: self._open_env(path), name=f"Reading {display_path(path, self.cwd)}",
                        group="env-open", thread=True, exclusive=True, exit_on_error=False)

    # -- leaving --------------------------------------------------------------------------------

    def holds_key(self, key: str) -> bool:
        return self.loading  # c, e, a typed while the .env is read act on what it holds

    def action_continue(self) -> None:
        if self.loading:
            self.notify("Still reading the .env file…")
            return
        if self._changed_since_read():
            return
        missing = self.session.missing_keys()
        if missing:
            tip = " TASK_APP_URL can also be given with --task-url." if "TASK_APP_URL" in missing else ""
            self.notify(
                f"Missing {', '.join(missing)}. Select the row and press enter to set a value, "
                f"or press a to add a key.{tip}",
                title="Cannot continue yet", severity="error",
            )
            return
        unsendable = self.session.unsendable_keys()
        if unsendable:  # the payload would fail on it at the next step: say it here
            self.notify(f"{'; '.join(unsendable)}. Select the row and press enter to set it again "
                        "(API keys are plain ASCII with no spaces).", title="Cannot continue yet", severity="error")
            return
        env = self.session.env
        if env is not None and env.dirty:
            self.app.push_screen(SaveBeforeContinueDialog(self.file_label()), self._after_save_question)
        else:
            self.flow_app.go_to_verification()

    def _after_save_question(self, answer: str | None) -> None:
        if answer == "save":
            self._save(then_continue=True)  # a save refuses a file changed on disk
        elif answer == "continue" and not self._changed_since_read():
            self.flow_app.go_to_verification()

    def _changed_since_read(self) -> bool:
        """The .env on disk is not what is shown: say so and stay (a read, not just a stat)."""
        if not self.check_disk(thorough=True):
            return False
        self.notify(f"{self.file_label()} changed on disk since it was read. Press r to reload it, "
                    "then c to continue with what it holds now.", title="Cannot continue yet",
                    severity="error", markup=False)
        return True

    def action_back(self) -> None:
        env = self.session.env
        if env is not None and env.dirty:
            self.flow_app.confirm(
                f"Go back with unsaved changes to {self.file_label()}?",
                lambda: self.flow_app.go_back("env"),
                detail="Your edits stay in memory for this session and show here again; "
                "they reach the disk only when you press ctrl+s.",
                label="Go back",
            )
        else:
            self.flow_app.go_back("env")
