"""The Textual app: the guided flow's screens, app-wide keys, the command palette, and the one
place where worker errors become an error modal."""

from __future__ import annotations

import argparse
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from app.core import envfile
from app.core.errors import SynthTuiError
from app.core.history import RunHistory
from app.core.redact import redact
from app.core.session import LaunchOptions, LaunchSession
from app.screens.modals import ConfirmModal, ErrorModal, HelpModal


def stylesheet_path() -> Path:
    """``styles.tcss`` sits at the repo root in a checkout and inside ``app/`` in a wheel."""
    installed = Path(__file__).with_name("styles.tcss")
    return installed if installed.exists() else Path(__file__).resolve().parents[1] / "styles.tcss"


class SynthTuiApp(App[int]):
    CSS_PATH = str(stylesheet_path())
    TITLE = "synth-tui"
    SUB_TITLE = "RL training jobs"
    ENABLE_COMMAND_PALETTE = True
    BINDINGS = [
        Binding("f1,question_mark", "help", "Help", id="app.help", key_display="?"),
        # Not a priority binding: the dashboard hides it behind its own q (which asks first).
        Binding("ctrl+q", "quit", "Quit", id="app.quit"),
        Binding("ctrl+p", "command_palette", "Commands", id="app.commands", show=False),
    ]

    def __init__(self, session: LaunchSession, *, start: str = "picker", attach=None) -> None:
        """``start`` is the first step shown (flags skip steps); ``attach`` (a JobContext) opens
        only the dashboard of an existing job; ``start="history"`` opens the run history."""
        super().__init__()
        self.session = session
        self.start = start
        self.attach = attach
        self.exit_code = 0

    # -- flow ------------------------------------------------------------------------------

    STEPS = ("picker", "env", "verify", "preview")

    def on_mount(self) -> None:
        """Push the picker, then every step up to ``start``, so Escape always goes back."""
        from app.screens.config_picker import ConfigPickerScreen

        if self.attach is not None:
            from app.screens.dashboard import DashboardScreen

            self.push_screen(DashboardScreen(self.attach))
            return
        if self.start == "history":
            from app.screens.history import HistoryScreen

            self.push_screen(HistoryScreen())
            return
        self.push_screen(ConfigPickerScreen())
        start = self.start if self.start in self.STEPS else "picker"
        for step in self.STEPS[1 : self.STEPS.index(start) + 1]:
            {"env": self.go_to_env, "verify": self.go_to_verification, "preview": self.go_to_preview}[step]()

    def go_to_env(self) -> None:
        from app.screens.env_review import EnvReviewScreen

        self.push_screen(EnvReviewScreen())

    def go_to_verification(self) -> None:
        from app.screens.verification import VerificationScreen

        self.push_screen(VerificationScreen())

    def go_to_preview(self) -> None:
        from app.screens.preview import PayloadPreviewScreen

        self.push_screen(PayloadPreviewScreen())

    def go_to_dashboard(self, job_id: str) -> None:
        """After a submit: remember the run, then watch it."""
        from app.screens.dashboard import DashboardScreen, JobContext

        session = self.session
        payload = session.prepared.payload if session.prepared else None
        data = (payload or {}).get("data", {})
        context = JobContext(job_id, payload, str(session.config_path) if session.config_path else None,
                             data.get("base_model") or data.get("model"))
        self.run_worker(lambda: remember_submission(session, context), thread=True, name="Run history")
        self.push_screen(DashboardScreen(context))

    # -- app-wide actions -------------------------------------------------------------------

    def action_help(self) -> None:
        if isinstance(self.screen, HelpModal):
            return
        rows: list[tuple[str, str]] = []
        seen: set[tuple[str, str]] = set()
        # The screen's and the app's own keys first; a focused widget's scroll keys after.
        actives = sorted(self.screen.active_bindings.values(),
                         key=lambda active: not isinstance(active.node, (Screen, App)))
        for active in actives:
            binding = active.binding
            label = binding.description or binding.action
            if not label or (binding.action, label) in seen:
                continue
            seen.add((binding.action, label))
            rows.append((self.get_key_display(binding), label))
        title = getattr(self.screen, "TITLE", None) or type(self.screen).__name__
        self.push_screen(HelpModal(str(title), rows))

    async def action_quit(self) -> None:
        """Ctrl+Q: on the dashboard, the same confirm-and-attach-hint as its own q."""
        quit_dashboard = getattr(self.screen, "action_quit_dashboard", None)
        env = self.session.env
        if quit_dashboard is not None:
            quit_dashboard()
        elif env is not None and env.dirty:
            self.confirm(f"Quit and drop the unsaved changes to {env.path.name}?",
                         lambda: self.exit(self.exit_code), label="Quit",
                         detail="ctrl+s on the .env screen saves them first.")
        else:
            self.exit(self.exit_code)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        # Textual's "Keys" duplicates our help, and its "Screenshot" writes to a Downloads
        # folder that a server over SSH usually does not have.
        for command in super().get_system_commands(screen):
            if command.title not in ("Keys", "Screenshot"):
                yield command
        actions = getattr(screen, "PALETTE_COMMANDS", ())
        for title, help_text, action in actions:
            yield SystemCommand(title, help_text, getattr(screen, f"action_{action}"))
        yield SystemCommand("Help", "Show every key of this screen", self.action_help)

    def confirm(self, question: str, on_yes, *, detail: str = "", label: str = "Yes") -> None:
        """Ask, then call ``on_yes()`` only when the user confirms."""

        def answered(yes: bool | None) -> None:
            if yes:
                on_yes()

        self.push_screen(ConfirmModal(question, confirm_label=label, detail=detail), answered)

    def show_error(self, title: str, error: BaseException) -> None:
        """The one place a failure reaches the user: a message and a fix, never a traceback."""
        secrets = self.session.secret_values()
        if isinstance(error, SynthTuiError):
            message, hint = error.message, error.hint
        else:
            message = f"{type(error).__name__}: {error}"
            hint = "This is a bug in synth-tui; please report it with the steps that led here."
        self.push_screen(ErrorModal(title, redact(message, secrets), redact(hint, secrets) if hint else None))


def remember_submission(session: LaunchSession, context) -> None:
    try:
        RunHistory().record_submission(job_id=context.job_id, backend=session.backend_base,
                                       config_path=context.config_path, payload=context.payload,
                                       idempotency_key=session.idempotency_key)
    except (sqlite3.Error, OSError):
        pass  # the history is a convenience; a full disk must not stop the dashboard


def initial_step(session: LaunchSession) -> str:
    """Flags skip steps as in the SDK: one valid --config skips the picker; with --env-file
    too and every required key present, the env review is skipped as well."""
    options = session.options
    if len(options.config_paths) != 1:
        return "picker"
    path = envfile.resolved_user_path(options.config_paths[0])
    report = session.validate(path)
    if not report.ok:
        return "picker"
    session.choose_config(path, report)
    if not options.env_files:
        return "env"
    choice = session.initial_env_choice()
    session.open_env(choice.path, choice.how, choice.candidates)
    return "verify" if not session.missing_keys() else "env"


def run_app(app: SynthTuiApp) -> int:
    result = app.run()
    return result if isinstance(result, int) else app.exit_code


def run_tui(args: argparse.Namespace, *, session: LaunchSession | None = None) -> int:
    session = session or LaunchSession(LaunchOptions.from_args(args))
    return run_app(SynthTuiApp(session, start=initial_step(session)))


def run_attach_tui(args: argparse.Namespace, record=None) -> int:
    from app.screens.dashboard import JobContext

    session = LaunchSession(LaunchOptions.from_args(args))
    if record is not None and not args.backend:
        session.use_backend(record.backend, "the job history")
    choice = session.initial_env_choice()
    session.open_env(choice.path, choice.how, choice.candidates)
    session.synth_api_key()  # fail before the screen opens when the key is missing
    payload = record.payload if record is not None else None
    model = ((payload or {}).get("data") or {})
    context = JobContext(args.job_id, payload, record.config_path if record else None,
                         model.get("base_model") or model.get("model"))
    return run_app(SynthTuiApp(session, attach=context))


def run_history_tui(args: argparse.Namespace) -> int:
    session = LaunchSession(LaunchOptions.from_args(args))
    choice = session.initial_env_choice()
    session.open_env(choice.path, choice.how, choice.candidates)
    return run_app(SynthTuiApp(session, start="history"))
