"""The Textual app: the guided flow's screens, app-wide keys, the command palette, and the one
place where worker errors become an error dialog."""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import events, on, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.notifications import Notification, Notify, SeverityLevel
from textual.reactive import reactive
from textual.screen import Screen
from textual.timer import Timer
from textual.worker import Worker, WorkerState

from app.core.env.discovery import resolved_user_path
from app.core.errors import INTERRUPTED, INTERRUPTED_BEFORE_A_JOB, ExitCode, SynthTuiError
from app.core.invocation import as_run
from app.core.launch.options import LaunchOptions, Preparation
from app.core.launch.session import LaunchSession
from app.core.redact import redact
from app.screens.base import FlowScreen
from app.screens.commands import ScreenCommands
from app.screens.css_cache import parsed_css_kept, save_parsed_css
from app.screens.steps import dashboard_screen, env_screen, picker_screen, preview_screen, verification_screen
from app.screens.stylesheet import add_later_styles, add_styles
from widgets.compat.textual_compat import give_empty_result_callback, has_queued_callbacks, withdraw_notification
from widgets.textual_speedups import identity_hashed_rule_sets
from widgets.worker_errors import WorkerFailed

if TYPE_CHECKING:  # the run history's module comes with a job, after the first frame (docs/performance.md#first-paint)
    from app.core.runs.jobs import JobContext

# Never held behind keys typed ahead (SynthTuiApp.on_event): the user wants out now.
UNHELD_KEYS = frozenset({"ctrl+c", "ctrl+q"})
KEY_RELEASE_S = 0.01  # how often a key typed ahead checks whether it can go on
# A screen that is never quiet (a live feed's bursts) takes the next key after this many checks
# anyway (about a second). Counted in checks, not seconds: on a starved machine the clock runs
# while the app does not, and a key released by the clock went ahead of the one before it.
KEY_SETTLE_CHECKS = 100

# How a worker's failure reaches the user (on_worker_failed; docs/architecture.md#threads-and-workers),
# by the worker's group. A toast where the work was a side matter and the screen goes on; any
# other group is a dialog (show_error): what the user asked for did not happen, and it says why.
# The preparation ("prepare") is a dialog too, and the flow stays on its first screen.
WORKER_FAILURE_TOASTS: dict[str, str] = {
    "rollout-image": "An image could not be drawn",  # the image says so where it stands
}

# The parsed CSS is pickled this long after the first frame, not while Textual writes it out.
SAVE_PARSED_CSS_AFTER_S = 1.0

# Whether this process has frozen what existed at its first frame (SynthTuiApp._first_frame_drawn).
_startup_frozen = False


class SynthTuiApp(App[int]):
    # No CSS_PATH: __init__ adds styles.tcss itself, in two parts when the picker comes first.
    TITLE = "synth-tui"
    SUB_TITLE = "RL training jobs"
    ENABLE_COMMAND_PALETTE = True
    # The screen's own commands come from its bindings (app/screens/commands.py).
    COMMANDS = App.COMMANDS | {ScreenCommands}
    BINDINGS = [
        Binding("f1,question_mark", "help", "Help", id="app.help", key_display="?"),
        # Not a priority binding: the dashboard hides it behind its own q (which asks first).
        Binding("ctrl+q", "quit", "Quit", id="app.quit"),
        Binding("ctrl+p", "command_palette", "Commands", id="app.commands", show=False),
    ]

    # What the flow waits for before its first step can be left (a Preparation's ``waiting``, or
    # why it failed); "" when nothing is awaited. The picker shows it and waits.
    preparing: reactive[str] = reactive("", init=False)

    def __init__(self, session: LaunchSession, *, start: str = "picker", attach: JobContext | None = None,
                 first_screen: Callable[[], Screen] | None = None, preparation: Preparation | None = None) -> None:
        """``start`` is the first step shown (flags skip steps); ``attach`` (a JobContext) opens
        only the dashboard of an existing job; ``start="history"`` opens the run history;
        ``first_screen`` makes the screen of a command that is not a step (jobs, compare);
        ``preparation`` runs after the first frame and the flow waits for it (the demo's servers)."""
        identity_hashed_rule_sets()  # a quarter of the CPU of applying CSS: widgets/textual_speedups.py
        super().__init__()
        self.session = session
        self.start = start
        self.attach = attach
        self.first_screen = first_screen
        self.preparation = preparation
        self.exit_code = 0
        self.exit_message: str | None = None  # what leave() prints when the app has ended
        self._held_keys: list[events.Key] = []  # typed ahead, waiting (on_event)
        self._replaying: set[events.Key] = set()
        self._key_in_flight: int | None = None  # checks since the last key was handed on
        self._key_release: Timer | None = None
        # True while the preparation runs: keys typed meanwhile wait for it (the picker holds them).
        self.preparation_running = preparation is not None
        # The preparation's "Ready" notice: taken down when the flow moves on from the picker,
        # so it does not sit over the next screens (the dashboard's event log).
        self._ready_notice: Notification | None = None
        if preparation is not None:  # set before the first screen mounts, which reads it
            self.set_reactive(SynthTuiApp.preparing, preparation.waiting)
        self._later_rules: str | None = self._add_styles()

    def _add_styles(self) -> str | None:
        """styles.tcss, in two parts when the picker comes first (app/screens/stylesheet.py)."""
        return add_styles(self, first_part_only=self._first_screen_is_picker())

    def _first_screen_is_picker(self) -> bool:
        if self.first_screen is not None or self.attach is not None or self.start == "history":
            return False
        return self.STEPS.get(self.start, picker_screen) is picker_screen  # as _first_screen chooses

    def _add_later_rules(self) -> None:
        """The later steps' rules, once, before any screen but the first is shown (after the
        first frame, or when a screen is pushed first)."""
        later, self._later_rules = self._later_rules, None
        if later is not None:
            add_later_styles(self, later)

    def push_screen(self, *args: Any, **kwargs: Any) -> Any:
        self._add_later_rules()  # a screen pushed before the first frame's callbacks ran
        return super().push_screen(*args, **kwargs)

    def switch_screen(self, screen: Screen | str) -> Any:
        self._add_later_rules()
        return super().switch_screen(screen)

    def on_mount(self) -> None:
        # What exists once the first screen is drawn (Textual's and our modules, the first
        # screen) lives as long as the app: moved out of the collector's reach, each full pass
        # walks only what came later; the collector, off for the start when the command line
        # started the app (app/cli/dispatch.py), is on from then (docs/performance.md#a-quiet-dashboard).
        self.call_after_refresh(self._add_later_rules)
        # What the start parsed, kept for the next (app/screens/css_cache.py), once the first frame is out.
        self.call_after_refresh(self.set_timer, SAVE_PARSED_CSS_AFTER_S, save_parsed_css)
        self.call_after_refresh(self._first_frame_drawn)
        if self.preparation is not None:
            self.call_after_refresh(self._prepare, self.preparation)

    @staticmethod
    def _first_frame_drawn() -> None:
        global _startup_frozen
        if not _startup_frozen:  # once a process: a later app (tests run many) would freeze garbage
            _startup_frozen = True
            gc.freeze()
        gc.enable()

    @work(thread=True, exit_on_error=False, group="prepare", name="Preparing")
    def _prepare(self, preparation: Preparation) -> None:
        options, ready = preparation.run()
        self.call_from_thread(self._prepared, options, ready)

    def _prepared(self, options: LaunchOptions, ready: str) -> None:
        self.session.adopt_options(options)
        self.preparation_running = False
        self.preparing = ""
        self._ready_notice = Notification(ready, "Ready", "information", 8, markup=False)
        self.post_message(Notify(self._ready_notice))

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Every toast is plain text: its words come from messages (a config's `[model]`, a path,
        an error) that markup would swallow (docs/product.md, "Toasts"); ``markup`` is ignored. A
        command they name is named as it was run (app/core/invocation.py)."""
        super().notify(as_run(message), title=title, severity=severity, timeout=timeout, markup=False)

    def _flow_moved_on(self) -> None:
        """A step after the picker opens: the "Ready" notice has said what it had to."""
        notice, self._ready_notice = self._ready_notice, None
        if notice is not None:
            withdraw_notification(self, notice)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The app's own workers (the preparation, the run history): the same path as the
        screens' and widgets' (WorkerFailed)."""
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            self.worker_failed(event.worker, event.worker.error)

    @on(WorkerFailed)
    def _worker_failed_below(self, event: WorkerFailed) -> None:
        self.worker_failed(event.worker, event.error)

    def watch_app_focus(self, focus: bool) -> None:
        """Textual gives a screen its AUTO_FOCUS only while the app has focus, and a served
        tab's app starts blurred (docs/browser.md): the screen gets it when focus comes, so the
        picker's list takes the arrow keys in a browser as in a terminal."""
        if not focus or not self.screen_stack:
            return
        screen = self.screen
        selector = self.AUTO_FOCUS if screen.AUTO_FOCUS is None else screen.AUTO_FOCUS
        if selector and screen.focused is None:
            widget = next((w for w in screen.query(selector) if w.focusable), None)
            if widget is not None:
                widget.focus(scroll_visible=False)

    def worker_failed(self, worker: Worker, error: BaseException) -> None:
        """Every worker's failure: a toast or a dialog (WORKER_FAILURE_TOASTS), never silence."""
        if worker.group == "prepare":
            # The flow stays on its first screen, which says why; the run ends with the
            # failure's exit code.
            self.exit_code = error.exit_code if isinstance(error, SynthTuiError) else ExitCode.BACKEND
            failed = self.preparation.failed if self.preparation is not None else "Could not start"
            self.preparation_running = False
            self.preparing = f"{failed}: see the error. Quit with ctrl+q, fix it and run again."
            self.show_error(failed, error)
        elif (title := WORKER_FAILURE_TOASTS.get(worker.group)) is not None:
            message = error.message if isinstance(error, SynthTuiError) else f"{type(error).__name__}: {error}"
            self.notify(redact(message, self.session.secret_values()), title=title, severity="error", markup=False)
        else:
            self.show_error(f"{worker.name or 'A background task'} failed", error)

    # -- keys typed ahead --------------------------------------------------------------------

    async def on_event(self, event: events.Event) -> None:
        """Keys typed faster than the app handles them reach the screen they were meant for, in
        order, as a terminal's type-ahead does (the README's `Enter c Enter s`;
        docs/product.md#keys-typed-ahead). A key is handled once what it set off has settled
        (every queue of the app and its screen empty); until then, and while the screen is not
        yet mounted or its step is deciding where the flow goes (FlowScreen.holds_key), the keys
        after it wait here and go on one at a time."""
        if isinstance(event, events.Key) and event.key == "ctrl+j" and not event.is_forwarded:
            event = self._enter_typed_early()
        if isinstance(event, events.Key) and not event.is_forwarded and self._hold(event):
            return
        await super().on_event(event)

    def _enter_typed_early(self) -> events.Key:
        """An Enter typed before the app took the keyboard (the first half second, while the
        terminal still edits lines) is turned into a newline by the terminal, which Textual reads
        as ctrl+j. Nothing here binds ctrl+j: it is that Enter."""
        enter = events.Key("enter", "\r")
        enter.set_sender(self)
        return enter

    def _hold(self, key: events.Key) -> bool:
        if key in self._replaying:
            self._replaying.discard(key)
            if self._keys_wait(key.key):
                # Released after the settle limit, it arrived once the screen had begun to hold
                # keys (`o` opening its dialog on a loaded machine): first in line again.
                self._held_keys.insert(0, key)
                self._start_key_release()
                return True
        elif key.key in UNHELD_KEYS:
            self._held_keys.clear()
            return False
        elif self._held_keys or self._key_in_flight is not None or self._keys_wait(key.key):
            self._held_keys.append(key)
            self._start_key_release()
            return True
        self._key_in_flight = 0
        self._start_key_release()
        return False

    def _start_key_release(self) -> None:
        if self._key_release is None:
            self._key_release = self.set_interval(KEY_RELEASE_S, self._release_key, name="Keys typed ahead")

    def _keys_wait(self, key: str) -> bool:
        if not self.screen_stack:
            return False
        screen = self.screen
        return not screen.is_mounted or (isinstance(screen, FlowScreen) and screen.holds_key(key))

    def _settled(self) -> bool:
        """No message waits in the app or anywhere on its screen: the last key's effects (a
        binding's message, the handler it reaches, a screen pushed) have all run."""
        if not self.screen_stack:
            return True
        nodes = [self, *self.screen.walk_children(with_self=True)]
        # Textual offers no public way to ask whether a node still has callbacks to run
        # (call_next's queue), and a key's effects can wait there.
        return not any(node.message_queue_size or has_queued_callbacks(node) for node in nodes)

    def _release_key(self) -> None:
        if self._key_in_flight is not None:
            self._key_in_flight += 1
            if not self._settled() and self._key_in_flight < KEY_SETTLE_CHECKS:
                return
            self._key_in_flight = None
        if not self._held_keys:
            if self._key_release is not None:
                self._key_release.stop()
                self._key_release = None
            return
        if self._keys_wait(self._held_keys[0].key):
            return
        # The next key goes back to the app's queue, behind the focus the screen's mount asked for.
        held = self._held_keys.pop(0)
        replay = events.Key(held.key, held.character)
        replay.set_sender(self)
        self._replaying.add(replay)
        self._key_in_flight = 0
        self.post_message(replay)

    # -- flow ------------------------------------------------------------------------------

    # The guided steps in order; Esc on one goes to the one before.
    STEPS: dict[str, Callable[[], FlowScreen]] = {
        "picker": picker_screen, "env": env_screen, "verify": verification_screen, "preview": preview_screen,
    }

    def get_default_screen(self) -> Screen:
        """The first screen is the bottom of the stack, made when the app starts: no blank
        screen is built and drawn under it before the first frame (docs/performance.md).
        Only the first step is made: earlier steps are made when the user goes back to them,
        so a start on a later step (flags skip steps) runs nothing of the steps skipped."""
        screen = self._first_screen()
        # What push_screen gives a screen and switch_screen takes back: Textual 8.2 gives the
        # default screen none, so switching it (Esc to an earlier step, a rerun) would fail.
        # Textual 8.2 has no public way to give the default screen a result callback.
        give_empty_result_callback(screen)
        return screen

    def _first_screen(self) -> Screen:
        if self.first_screen is not None:
            return self.first_screen()
        if self.attach is not None:
            return dashboard_screen(self.attach)
        if self.start == "history":
            from app.screens.history import HistoryScreen

            return HistoryScreen()
        return self.STEPS.get(self.start, picker_screen)()

    def go_to_env(self) -> None:
        self._flow_moved_on()
        self.push_screen(env_screen())

    def go_to_verification(self) -> None:
        self._flow_moved_on()
        self.push_screen(verification_screen())

    def go_to_preview(self) -> None:
        self._flow_moved_on()
        self.push_screen(preview_screen())

    def go_back(self, step: str) -> None:
        """From ``step`` to the step before it: the screen below when the user came that way,
        else a new one (the run started on ``step``)."""
        if len(self.screen_stack) > 1:
            self.pop_screen()
            return
        names = list(self.STEPS)
        index = names.index(step)
        if index > 0:
            self.switch_screen(self.STEPS[names[index - 1]]())

    def go_to_dashboard(self, job: JobContext, *, history_warning: str | None = None) -> None:
        """After a submit (the launch service's, which remembered the run): watch it."""
        self._flow_moved_on()
        self.warn_history(history_warning)
        self.push_screen(dashboard_screen(job))

    def tell_history_repairs(self) -> None:
        """A damaged run history moved aside by a read just made (jobs.read_history): told once,
        here, as a notification (docs/product.md#damaged-state)."""
        from app.core.runs.history import take_repair_notes

        self.warn_history(" ".join(take_repair_notes()) or None)

    def warn_history(self, warning: str | None) -> None:
        """A run-history write that failed, or a damaged history moved aside on the way
        (jobs.remember's sentences): said once, the job goes on."""
        if warning:
            self.notify(warning, title="Run history", severity="warning", markup=False)

    # -- app-wide actions -------------------------------------------------------------------

    def action_help(self) -> None:
        from app.screens.dialogs.common import HelpDialog
        from widgets.steady_footer import help_rows

        if isinstance(self.screen, HelpDialog):
            return
        title = getattr(self.screen, "TITLE", None) or type(self.screen).__name__
        rows, note = help_rows(self.screen)
        self.push_screen(HelpDialog(str(title), rows, note=note))

    def action_help_quit(self) -> None:
        """Ctrl+C with no text selected (with a selection it copies): an interrupt, one rule on
        every screen (docs/product.md#exit-codes): exit 130 with the line a headless run prints
        for it. Where something would be lost (a job running on the dashboard, unsaved .env
        edits) the quit question comes first, and a second Ctrl+C answers it. The flow screen on
        top decides (a dialog over it changes nothing). Textual would only say to press Ctrl+Q."""
        screen = next((s for s in reversed(self.screen_stack) if isinstance(s, FlowScreen)), None)
        if screen is None:
            self.leave(ExitCode.INTERRUPTED, INTERRUPTED)
        else:
            screen.request_interrupt()

    async def action_quit(self) -> None:
        """Ctrl+Q (and the palette's Quit): the screen decides, e.g. the dashboard asks while
        the job runs and says how to attach again."""
        if isinstance(self.screen, FlowScreen):
            self.screen.request_quit()
        else:
            self.quit_flow()

    def quit_flow(self) -> None:
        """Leave, asking first when the .env has unsaved edits."""
        self._leave_flow(lambda: self.leave(self.exit_code))

    def interrupt_flow(self, message: str | None = None) -> None:
        """Ctrl+C: exit 130 with ``message``, asking first when the .env has unsaved edits. By
        default the headless run's words: in the guided steps, before a submit, that nothing
        was sent (a job's dashboard says its own: DashboardScreen.request_interrupt)."""
        if message is None:
            message = INTERRUPTED_BEFORE_A_JOB if self.guided else INTERRUPTED
        self._leave_flow(lambda: self.leave(ExitCode.INTERRUPTED, message), message)

    @property
    def guided(self) -> bool:
        """The guided flow (config to submit), not a command's own screen (history, jobs…)."""
        return self.attach is None and self.first_screen is None and self.start in self.STEPS

    def _leave_flow(self, leave: Callable[[], None], interrupt_message: str = INTERRUPTED) -> None:
        env = self.session.env
        if env is not None and env.dirty:
            self.confirm(f"Quit and drop the unsaved changes to {env.path.name}?", leave, label="Quit",
                         detail="ctrl+s on the .env screen saves them first.",
                         on_interrupt=lambda: self.leave(ExitCode.INTERRUPTED, interrupt_message))
        else:
            leave()

    def leave(self, code: int, message: str | None = None) -> None:
        """End the app with ``code``; ``message`` is printed on stderr once the terminal is
        back (as plain text: a path or a command is never read as markup), its commands as they
        were run (``.venv/bin/synth-tui attach …``: app/core/invocation.py)."""
        message = as_run(message) if message else message
        self.exit_code, self.exit_message = code, message
        self.exit(code, message=Text(message) if message else None)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        # Textual's "Keys" duplicates our help, and its "Screenshot" writes to a Downloads
        # folder that a server over SSH usually does not have.
        for command in super().get_system_commands(screen):
            if command.title == "Quit":  # ours asks first where something would be lost
                yield SystemCommand("Quit", "Quit synth-tui (asks first while a job is watched)", command.callback)
            elif command.title not in ("Keys", "Screenshot"):
                yield command
        yield SystemCommand("Help", "Show every key of this screen", self.action_help)

    def confirm(self, question: str, on_yes, *, detail: str = "", label: str = "Yes",
                on_interrupt: Callable[[], None] | None = None) -> None:
        """Ask, then call ``on_yes()`` only when the user confirms. A quit question gives
        ``on_interrupt``: Ctrl+C in it calls that instead (the second Ctrl+C of an interrupt)."""
        from app.screens.dialogs.common import ConfirmDialog

        dialog = ConfirmDialog(question, confirm_label=label, detail=detail, interruptible=on_interrupt is not None)

        def answered(yes: bool | None) -> None:
            if dialog.interrupted and on_interrupt is not None:
                on_interrupt()
            elif yes:
                on_yes()

        self.push_screen(dialog, answered)

    def show_error(self, title: str, error: BaseException) -> None:
        """The one place a failure reaches the user: a message and a fix, never a traceback."""
        from app.screens.dialogs.common import ErrorDialog

        secrets = self.session.secret_values()
        if isinstance(error, SynthTuiError):
            message, hint = error.message, error.hint
        else:
            message = f"{type(error).__name__}: {error}"
            hint = "This is a bug in synth-tui; please report it with the steps that led here."
        shown_hint = as_run(redact(hint, secrets)) if hint else None
        self.push_screen(ErrorDialog(title, as_run(redact(message, secrets)), shown_hint))


def initial_step(session: LaunchSession) -> str:
    """Flags skip steps as in the SDK: one valid --config skips the picker; with --env-file
    too and every required key present, the env review is skipped as well."""
    options = session.options
    if len(options.config_paths) != 1:
        return "picker"
    path = resolved_user_path(options.config_paths[0])
    report = session.validate(path)
    if not report.ok:
        return "picker"
    session.choose_config(path, report)
    session.remember_config(path, report)
    if not options.env_files:
        return "env"
    session.open_unattended_env()  # --env-file: what the user named, nothing to confirm
    return "verify" if not session.missing_keys() else "env"


def run_app(app: SynthTuiApp) -> int:
    with parsed_css_kept():  # the CSS parsed by an earlier start (docs/performance.md#first-paint)
        result = app.run()
    return result if isinstance(result, int) else app.exit_code


def guided_app(session: LaunchSession) -> SynthTuiApp:
    """The guided session's app. --modal-secret / --modal-app are read first, on the terminal
    (a container is started: it is said before; docs/modal.md), so the flow starts with them:
    the env review shows them from "Modal secret NAME", and a complete set skips it. When Modal
    gives nothing the flow still starts, and the env review shows why and what to do."""
    failed = False
    if session.options.modal_secret or session.options.modal_app:
        from app.core.modal_errors import ModalError  # only then: docs/performance.md#first-paint

        try:
            session.fetch_modal_values(announce=lambda text: print(text, file=sys.stderr, flush=True))
        except ModalError as exc:
            session.modal_failure = exc
            failed = True
    step = initial_step(session)
    return SynthTuiApp(session, start="env" if failed and step != "picker" else step)


def run_tui(session: LaunchSession) -> int:
    if session.options.config_paths:  # a --config that does not exist ends here, as headless
        from app.core.launch.service import require_configs

        require_configs(session.options.config_paths)
    return run_app(guided_app(session))


def run_attach_tui(session: LaunchSession, job_id: str) -> int:
    job = session.attach(job_id)
    session.check_attach_backend()
    return run_app(SynthTuiApp(session, attach=job))


def run_history_tui(session: LaunchSession) -> int:
    if session.options.env_files:  # checked now; without it each job uses the .env it was launched with
        session.open_unattended_env()
    return run_app(SynthTuiApp(session, start="history"))


def run_jobs_tui(session: LaunchSession, **jobs_options: Any) -> int:
    """``synth-tui jobs``: the backend's job list. No key or a backend without RL jobs ends here
    (exit 3 or 5), as attach does, before a screen is shown."""
    session.open_unattended_env()
    session.synth_api_key()
    session.check_attach_backend()
    from app.screens.jobs import JobsScreen

    return run_app(SynthTuiApp(session, first_screen=lambda: JobsScreen(**jobs_options)))


def run_compare_tui(session: LaunchSession, job_ids: list[str]) -> int:
    """``synth-tui compare``: the runs' metrics on one grid."""
    from app.core.runs.compare import open_comparison
    from app.screens.compare import CompareScreen

    ids = open_comparison(session, job_ids)
    session.check_attach_backend()
    return run_app(SynthTuiApp(session, first_screen=lambda: CompareScreen(ids)))
