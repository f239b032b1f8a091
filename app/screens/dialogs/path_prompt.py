"""A dialog that asks for a file: pick one of the listed candidates or type a path."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, OptionList, Static
from textual.widgets.option_list import Option

from app.core.text import display_path
from widgets.build_guard import BuildGuard
from widgets.worker_errors import ReportsWorkerFailures

# Returns what is wrong with a path (shown under the input), or None when it can be used.
PathCheck = Callable[[Path], str | None]


class PathPromptDialog(ReportsWorkerFailures, ModalScreen[Path | None], BuildGuard):
    """Dismisses with the chosen path, resolved, or None on escape.

    Checking touches the disk (it may be slow on a network drive), so it runs in a worker; a
    problem shows inline and the dialog stays open for another try. Candidates, when given,
    are found in a worker too.
    """

    AUTO_FOCUS = "#path-input"

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="path_prompt.cancel")]

    def __init__(
        self,
        title: str,
        *,
        cwd: Path,
        check: PathCheck,
        detail: str = "",
        placeholder: str = "path/to/file",
        find_candidates: Callable[[], list[Path]] | None = None,
        current: Path | None = None,
    ) -> None:
        super().__init__(classes="dialog path-prompt")
        self.title_text = title
        self.cwd = cwd
        self.check = check
        self.detail = detail
        self.placeholder = placeholder
        self.find_candidates = find_candidates
        self.current = current
        self.candidates: list[Path] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog-body"):
            yield Static(self.title_text, id="dialog-title")
            if self.detail:
                yield Static(self.detail, id="dialog-detail", markup=False)
            if self.find_candidates is not None:
                yield OptionList(Option("Searching…", disabled=True), id="path-candidates")
            yield Input(placeholder=self.placeholder, id="path-input")
            yield Static("", id="path-error", markup=False)
            with Horizontal(id="dialog-buttons"):
                yield Button("Open (enter)", variant="primary", id="path-open")
                yield Button("Cancel (esc)", id="path-cancel")

    def on_mount(self) -> None:
        if self.find_candidates is not None:
            self._find(self.find_candidates)

    # -- candidates -------------------------------------------------------------------------

    @work(group="path-candidates", exit_on_error=False)
    async def _find(self, find: Callable[[], list[Path]]) -> None:
        try:
            found, problem = await asyncio.to_thread(find), ""
        except Exception as exc:  # noqa: BLE001 - a search failure must not end the app
            found, problem = [], f"Could not search: {exc}"
        self._show_candidates(found, problem)

    def _show_candidates(self, found: list[Path], problem: str) -> None:
        self.candidates = found
        options = self.query_one("#path-candidates", OptionList)
        if not found:
            options.set_options([Option(problem or "Nothing found; type a path below.", disabled=True)])
            return
        options.set_options(Option(self._candidate_prompt(path)) for path in found)
        options.highlighted = found.index(self.current) if self.current in found else 0
        options.focus()

    def _candidate_prompt(self, path: Path) -> Content:
        label = display_path(path, self.cwd)
        if path == self.current:
            return Content.assemble(label, ("  (in use)", "$text-muted"))
        return Content(label)

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if 0 <= event.option_index < len(self.candidates):
            self._check_path(self.candidates[event.option_index])

    # -- typed path ---------------------------------------------------------------------------

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self._submit_typed()

    @on(Button.Pressed, "#path-open")
    def _open_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self._submit_typed()

    @on(Button.Pressed, "#path-cancel")
    def _cancel_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(None)

    def _submit_typed(self) -> None:
        text = self.query_one("#path-input", Input).value.strip()
        if not text:
            self._show_problem("Type a path" + (", or pick one from the list." if self.candidates else "."))
            return
        # An absolute (or ~) path replaces cwd in the join; a relative one is read from cwd.
        self._check_path(self.cwd / Path(text).expanduser())

    @work(exclusive=True, group="path-check", exit_on_error=False)
    async def _check_path(self, path: Path) -> None:
        try:
            problem = await asyncio.to_thread(self.check, path)
            resolved = await asyncio.to_thread(path.resolve) if problem is None else None
        except Exception as exc:  # noqa: BLE001 - a failing check is shown, never raised
            problem, resolved = f"Cannot open {display_path(path, self.cwd)}: {exc}", None
        self._checked(resolved, problem)

    def _checked(self, resolved: Path | None, problem: str | None) -> None:
        if resolved is None:
            self._show_problem(problem or "Cannot open this path.")
        else:
            self.dismiss(resolved)

    def _show_problem(self, problem: str) -> None:
        self.query_one("#path-error", Static).update(problem)
        self.query_one("#path-error", Static).add_class("-visible")
        self.query_one("#path-input", Input).focus()

    def action_cancel(self) -> None:
        self.dismiss(None)
