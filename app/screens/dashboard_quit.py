"""How a dashboard is left: the question before quitting while the job runs (it goes on, or
stops with an embedded backend), then the exit code and the line printed when the app has ended
(the same codes as the headless watch). Functions of the :class:`DashboardScreen`, cut from
dashboard.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.core.errors import ExitCode
from app.core.paths import run_dir
from app.core.runs.jobs import remember, stop_backend_jobs

if TYPE_CHECKING:
    from app.screens.dashboard import DashboardScreen


def ask_to_quit(screen: DashboardScreen, *, interrupted: bool) -> None:
    """q, Ctrl+Q or Ctrl+C: leave at once when the job has ended, else ask first."""
    if screen.ended:
        leave(screen, interrupted=interrupted)
        return
    if screen.session.options.embedded_backend:
        question = "Quit? The embedded backend stops with the app, and this job with it."
        detail = f"Its events so far stay in {run_dir(screen.job.job_id)}."
    else:
        question, detail = "Quit? The job keeps running on the backend.", screen.session.attach_hint(screen.job.job_id)
    screen.flow_app.confirm(question, lambda: leave(screen, interrupted=interrupted), label="Quit", detail=detail,
                            on_interrupt=lambda: leave(screen, interrupted=True))


def leave(screen: DashboardScreen, *, interrupted: bool = False) -> None:
    """Stop the watch and end the app with the quit line (Interrupted. first after Ctrl+C)."""
    if screen.feed is not None:
        screen.feed.stop()
    code, message = quit_line(screen)
    if interrupted:
        code, message = ExitCode.INTERRUPTED, f"Interrupted. {message}"
    screen.flow_app.leave(code, message)


def quit_line(screen: DashboardScreen) -> tuple[int, str]:
    """The exit code and the line printed when the app has ended."""
    if screen.ended:
        model = f" Model: {screen.model.path}." if screen.model is not None and not screen.end_message else ""
        message = screen.end_message or f"Job {screen.job.job_id}: {screen.status}.{model} Past runs: synth-tui history"
        # The same exit codes as the headless command (WatchEnded.exit_code).
        return screen.ended_code, message
    if screen.session.options.embedded_backend:
        # The job ends with this process: it did not succeed, and the history must not
        # list it as running for ever.
        remember(lambda history: stop_backend_jobs(history, screen.session.backend_base))
        return (ExitCode.JOB_FAILED, f"Job {screen.job.job_id} stopped with the app, as the embedded backend "
                                     "does: the run history records it as cancelled.")
    # The job's id is said once, in the command (the walk found it twice).
    return 0, f"The job is {screen.status}. {screen.session.attach_hint(screen.job.job_id)}"
