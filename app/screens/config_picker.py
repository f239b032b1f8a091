"""Step 1: choose the RL config (docs/product.md#config-picker).

Discovery and validation read files, so they run in a thread worker that reports back with a
message; the screen only arranges what it is told. Keys: with the list focused, letters are
commands (o, r); ``/`` moves to the filter, where typing filters, ``down`` returns to the list
and ``enter`` chooses the highlighted config. A click previews a config, a second click (or
enter) chooses it. The file work itself lives in app.core.config.picker.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.content import Content
from textual.css.query import NoMatches
from textual.message import Message
from textual.widgets import Input, OptionList, Static
from textual.worker import Worker, WorkerState, get_current_worker

from app.core.config import roots
from app.core.text import counted, home_relative
from app.screens.base import FlowScreen
from app.screens.commands import palette_tooltip
from widgets.app_header import AppHeader
from widgets.config_list import ConfigList
from widgets.config_preview import ConfigPreview
from widgets.hollow import HollowHorizontal, HollowVertical
from widgets.steady_footer import SteadyFooter

# What reads configs (TOML, .env) is imported in the workers that read them: the first frame
# waits for none of it (docs/performance.md#first-paint).
if TYPE_CHECKING:
    from app.core.config.picker import ConfigEntry

# --------------------------------------------------------------------------- the screen


class ConfigPickerScreen(FlowScreen):
    AUTO_FOCUS = "ConfigList"
    TITLE = "Choose an RL config"
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]
    CHANGE_CHECK_SECONDS = 2.0

    BINDINGS = [
        Binding("enter", "choose", "Choose", id="picker.choose"),
        # The first step's q quits, as on the other first screens (ctrl+q is in the footer).
        Binding("q", "quit_picker", "Quit", id="picker.quit", show=False),
        Binding("slash", "focus_filter", "Filter", id="picker.filter", key_display="/"),
        Binding("o", "open_path", "Open path", id="picker.open",
                tooltip=palette_tooltip("Open config file…", "Open any TOML config by its path")),
        Binding("r", "reload", "Reload", id="picker.reload",
                tooltip=palette_tooltip("Reload configs", "Search for configs again and re-validate every one")),
        Binding("escape", "clear_filter", "Clear filter", id="picker.clear_filter", show=False),
        Binding("down", "focus_list", "Back to the list", id="picker.to_list", show=False),
    ]

    class ConfigsFound(Message):
        def __init__(self, entries: list[ConfigEntry]) -> None:
            super().__init__()
            self.entries = entries

    class EntryRefreshed(Message):
        """One config was (re)read: opened by path, changed on disk, or re-checked on choose."""

        def __init__(self, entry: ConfigEntry, *, select: bool = False) -> None:
            super().__init__()
            self.entry = entry
            self.select = select

    class ConfigChosen(Message):
        """A config read again, valid and remembered: the UI thread makes it the session's."""

        def __init__(self, entry: ConfigEntry) -> None:
            super().__init__()
            self.entry = entry

    class ChoiceRefused(Message):
        """The config changed since it was listed and is no longer usable (entry), or the check
        itself failed (None: the error reaches FlowScreen's handler)."""

        def __init__(self, entry: ConfigEntry | None) -> None:
            super().__init__()
            self.entry = entry

    def __init__(self) -> None:
        super().__init__()
        self.entries: list[ConfigEntry] = []
        self.searched = False
        self.opened: list[Path] = []  # files opened with `o` stay listed across reloads
        self._choosing = False
        self._looking = False  # a search is under way (its result will replace the list)

    def compose(self) -> ComposeResult:
        yield AppHeader()
        yield Static(id="picker-header", classes="flow-header")
        yield Input(placeholder="/ filter configs by path", id="picker-filter", compact=True)
        with HollowHorizontal(id="picker-body"):
            with HollowVertical(id="picker-list-pane", classes="pane"):
                yield ConfigList(id="picker-list")
                # The message under the list is mounted when it first has words (_message).
            yield ConfigPreview(id="picker-preview", classes="pane")
        yield SteadyFooter()

    def on_mount(self) -> None:
        super().on_mount()
        try:
            self._set_up()
        except NoMatches:  # the app quit while this screen mounted (a tab closed at once)
            return
        self.set_interval(self.CHANGE_CHECK_SECONDS, self.check_highlighted_for_changes)

    def _set_up(self) -> None:
        where = home_relative(self.session.options.cwd)
        # synth-tui's own example configs are listed too
        if roots.project_config_roots(self.session.options.cwd):
            where += " and synth-tui's examples"
        self.query_one("#picker-header", Static).update(
            Content.assemble(("Step 1 of 4 · ", "$text-muted"), ("Choose an RL config", "bold"),
                             (f" · found under {where}", "$text-muted"))
        )
        self.watch(self.flow_app, "preparing", self._preparation_changed, init=False)
        # The search (and the config schema's import, in its thread) starts once this screen
        # has been drawn, so the first frame does not share the interpreter with it; what a
        # preparation awaits is shown then too, so the first frame lays out and draws no
        # message (docs/performance.md#first-paint).
        self.call_after_refresh(self._after_first_frame)

    def _after_first_frame(self) -> None:
        if self.flow_app.preparing:
            self._show_message(self.flow_app.preparing)
        else:
            self.action_reload()

    def on_screen_resume(self) -> None:
        self._choosing = False

    # -- discovery ----------------------------------------------------------------------------

    def _preparation_changed(self, waiting: str) -> None:
        """The demo's servers are ready (""): search now, with the demo's config first."""
        if waiting:
            self._show_message(waiting)
        else:
            self.action_reload()

    def _show_message(self, text: str) -> None:
        self._message(Content(text))

    def _message(self, words: Content) -> None:
        """Show `words` under the list, or hide the message when there are none. It is mounted
        when it first has words: the first frame styles and lays out no hidden widget
        (docs/performance.md#first-paint)."""
        try:
            message = self.query_one("#picker-message", Static)
        except NoMatches:
            pane = self.query_one("#picker-list-pane")
            if not words or not pane.is_attached:  # nothing to say, or the screen closes as it opens
                return
            message = Static(id="picker-message")
            pane.mount(message)
        message.update(words)
        message.set_class(not words, "-hidden")

    def action_reload(self) -> None:
        if self.flow_app.preparing:  # the options the search needs are not known yet
            return
        self._show_message(f"Looking for RL configs under {home_relative(self.session.options.cwd)}…")
        self._looking = True
        self._discover()

    @work(thread=True, exclusive=True, group="picker-discover", exit_on_error=False, name="Looking for configs")
    def _discover(self) -> None:
        from app.core.config.picker import find_config_entries

        entries = find_config_entries(self.session, list(self.opened))
        if not get_current_worker().is_cancelled:  # a newer reload replaced this one
            self.post_message(self.ConfigsFound(entries))

    def on_config_picker_screen_configs_found(self, message: ConfigsFound) -> None:
        self.entries = message.entries
        self.searched = True
        self._looking = False
        self._show_entries()

    def on_config_picker_screen_entry_refreshed(self, message: EntryRefreshed) -> None:
        entry = message.entry
        paths = [e.path for e in self.entries]
        if entry.path in paths:
            self.entries[paths.index(entry.path)] = entry
        else:
            self.entries.append(entry)
        if message.select:
            self.query_one("#picker-filter", Input).value = ""  # the opened file must be visible
        self._show_entries(keep=entry.path if message.select else None)

    def check_highlighted_for_changes(self) -> None:
        """Re-read the highlighted config when its file changed on disk (runs every ~2 s)."""
        entry = self.query_one(ConfigList).highlighted_entry
        if entry is not None:
            self._recheck(entry)

    @work(thread=True, exclusive=True, group="picker-recheck", exit_on_error=False, name="Re-reading a config")
    def _recheck(self, entry: ConfigEntry) -> None:
        from app.core.config.picker import disk_stamp, load_config_entry

        if disk_stamp(entry.path) != entry.disk_stamp:
            fresh = load_config_entry(self.session, entry.path, last_used=entry.last_used, explicit=entry.explicit)
            self.post_message(self.EntryRefreshed(fresh))

    # -- the list and the preview ---------------------------------------------------------------

    def _show_entries(self, keep: Path | None = None) -> None:
        config_list = self.query_one(ConfigList)
        if keep is None and config_list.highlighted_entry is not None:
            keep = config_list.highlighted_entry.path
        query = self.query_one("#picker-filter", Input).value.strip()
        visible = [e for e in self.entries if e.matches(query)]
        config_list.show(visible, keep=keep)
        pane = self.query_one("#picker-list-pane")
        total = len(self.entries)
        pane.border_title = f"Configs {len(visible)} of {total}" if query else f"Configs ({total})"
        self._message(self._list_message(query, visible))
        self.set_class(self.searched and not self.entries, "-empty")
        self.query_one(ConfigPreview).show(config_list.highlighted_entry)

    def _list_message(self, query: str, visible: list[ConfigEntry]) -> Content:
        if not self.entries:
            where = home_relative(self.session.options.cwd)
            return Content.assemble(
                ("No RL config was found", "bold"), f" under {where} or in the project's configs/ folder.\n\n",
                "Press ", ("o", "bold $text-accent"), " to open a config file by its path, or ",
                ("r", "bold $text-accent"), " to search again after adding one.\n\n",
                ("An RL config is a TOML file with an [algorithm] table: type = \"online\", "
                 "method = \"policy_gradient\", variety = \"gspo\".", "$text-muted"),
            )
        if not visible:
            return Content.assemble(f"No config matches “{query}”. ", ("esc", "bold $text-accent"),
                                    " clears the filter.")
        return Content("")

    @on(OptionList.OptionHighlighted, "#picker-list")
    def _preview_highlighted(self) -> None:
        self.query_one(ConfigPreview).show(self.query_one(ConfigList).highlighted_entry)

    @on(OptionList.OptionSelected, "#picker-list")
    def _choose_selected(self) -> None:
        self.action_choose()

    @on(Input.Changed, "#picker-filter")
    def _filter_changed(self) -> None:
        self._show_entries()

    @on(Input.Submitted, "#picker-filter")
    def _filter_submitted(self) -> None:
        self.action_choose()

    def action_focus_filter(self) -> None:
        self.query_one("#picker-filter", Input).focus()

    def action_focus_list(self) -> None:
        self.query_one(ConfigList).focus()

    def action_clear_filter(self) -> None:
        self.query_one("#picker-filter", Input).value = ""
        self.query_one(ConfigList).focus()

    # -- open by path ---------------------------------------------------------------------------

    def action_open_path(self) -> None:
        from app.core.config.picker import config_path_problem
        from app.screens.dialogs.path_prompt import PathPromptDialog

        cwd = self.session.options.cwd
        self.app.push_screen(
            PathPromptDialog(
                "Open a config file",
                cwd=cwd,
                check=lambda path: config_path_problem(path, cwd),
                detail=f"A path relative to {home_relative(cwd)}, or an absolute one.",
                placeholder="configs/rl/my_config.toml",
            ),
            self._open_chosen_path,
        )

    def _open_chosen_path(self, path: Path | None) -> None:
        if path is None:
            return
        if path not in self.opened:
            self.opened.append(path)
        listed = next((e for e in self.entries if e.path == path), None)
        self._load_opened(path, last_used=bool(listed and listed.last_used), explicit=bool(listed and listed.explicit))

    @work(thread=True, group="picker-open", exit_on_error=False, name="Opening the config")
    def _load_opened(self, path: Path, *, last_used: bool, explicit: bool) -> None:
        from app.core.config.picker import load_config_entry

        entry = load_config_entry(self.session, path, last_used=last_used, explicit=explicit)
        self.post_message(self.EntryRefreshed(entry, select=True))

    def action_quit_picker(self) -> None:
        self.leave()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.worker.group == "picker-discover" and event.state is WorkerState.ERROR:
            self._looking = False  # the error is shown (FlowScreen); keys typed meanwhile go on

    # -- choose ----------------------------------------------------------------------------------

    def holds_key(self, key: str) -> bool:
        # Keys typed while the demo's servers start or the configs are being found act once the
        # list is there (`Enter` chooses the config listed first); while choosing, the env
        # review comes next, or the picker again if refused.
        return self._choosing or self.flow_app.preparation_running or self._looking

    def action_choose(self) -> None:
        if self.flow_app.preparing:
            self.notify(self.flow_app.preparing, title="One moment", markup=False)
            return
        entry = self.query_one(ConfigList).highlighted_entry
        if entry is None:
            if not self.searched:
                self.notify("Still looking for configs…", title="One moment")
            elif self.entries:  # all of them filtered out (the filter has the keyboard: no o)
                self.notify("No config matches the filter. Esc clears it.", title="Nothing to choose",
                            severity="warning")
            else:
                self.notify("There is no config to choose yet. Press o to open one by its path.",
                            title="Nothing to choose", severity="warning")
            return
        if not entry.ok:
            self._refuse(entry)
            return
        if not self._choosing:
            self._choosing = True
            self._confirm_choice(entry)

    def _refuse(self, entry: ConfigEntry) -> None:
        count = entry.problem_count
        if entry.steps_only:
            first = entry.report.problems[0]
            self.notify(f"{first.message} Next step: {first.hint}" if count == 1 else
                        f"{entry.label} needs {counted(count, 'step')} first (listed in the preview).",
                        title="One step before this config can run", severity="warning", markup=False)
            self.query_one(ConfigPreview).flash()
            return
        self.notify(
            f"{entry.label} has {counted(count, 'problem')} (listed in the preview). "
            "Fix the file and it reloads here, or choose another config.",
            title="This config cannot be used", severity="error", markup=False,
        )
        self.query_one(ConfigPreview).flash()

    @work(thread=True, exclusive=True, group="picker-choose", exit_on_error=False, name="Choosing the config")
    def _confirm_choice(self, entry: ConfigEntry) -> None:
        # Validate again: the file may have changed since it was listed. Remembering the
        # choice writes ~/.synth-ai/train_cli.json, so this stays off the UI thread too; the
        # session itself changes only on the UI thread (on_config_picker_screen_config_chosen).
        from app.core.config.picker import load_config_entry

        try:
            fresh = load_config_entry(self.session, entry.path, last_used=entry.last_used, explicit=entry.explicit)
            if fresh.ok:
                self.session.remember_config(fresh.path, fresh.report)
                self.post_message(self.ConfigChosen(fresh))  # _choosing stays set until we are back
                return
        except BaseException:
            self.post_message(self.ChoiceRefused(None))
            raise
        self.post_message(self.EntryRefreshed(fresh))
        self.post_message(self.ChoiceRefused(fresh))

    def on_config_picker_screen_config_chosen(self, message: ConfigChosen) -> None:
        self.session.choose_config(message.entry.path, message.entry.report)
        self.flow_app.go_to_env()

    def on_config_picker_screen_choice_refused(self, message: ChoiceRefused) -> None:
        self._choosing = False
        if message.entry is not None:
            self._refuse(message.entry)
