"""Attaching to a job that exists: the set-up of a watch of a job of the run history or of any
other, the .env a job was launched with, and the attach commands and hints both front ends
print. Functions of a :class:`LaunchSession`, which calls them from its methods of the same
names (the front ends call the session); cut from session.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from app.core import shell_env
from app.core.errors import EnvFileError, MissingSecretsError, UnusableSecretError
from app.core.runs.jobs import JobContext, StoppedWithItsBackend, read_history

if TYPE_CHECKING:
    from app.core.launch.session import LaunchSession
    from app.core.runs.history import RunRecord


def attach_command(job_id: str, backend: str, env_path: str | Path | None) -> str:
    """`synth-tui attach` with every flag it needs to work when copied: the backend, and the
    .env to read SYNTH_API_KEY from (None: the shell's)."""
    import shlex

    from app.core.invocation import program

    serve = "serve " if shell_env.variable("SYNTH_TUI_SERVE") else ""  # in a browser tab (docs/browser.md)
    command = f"{program()} {serve}attach {job_id} --backend {backend}"  # as it was run (docs/product.md#commands)
    return command if env_path is None else f"{command} --env-file {shlex.quote(str(env_path))}"


def attach(session: LaunchSession, job_id: str) -> JobContext:
    """Set up a watch of an existing job, the same for both front ends: a job of the run
    history as :meth:`use_history_record` says; any other with --backend (or the default),
    the .env found as for a headless run, and its backend key (missing: MissingSecretsError
    before anything is shown)."""
    from app.core.api.wire import check_job_id

    check_job_id(job_id)  # it goes into URL paths: "../x" or "" must stop here
    record = read_history(job_id)
    if record is not None and record.end_note and not session.options.backend:
        raise StoppedWithItsBackend(record)  # its backend is gone: it would say "start a backend"
    if record is not None:
        return session.use_history_record(record)
    session.open_unattended_env()
    session.synth_api_key()
    return JobContext.of(job_id)


def use_history_record(session: LaunchSession, record: RunRecord) -> JobContext:
    """Set up an attach, a rerun or a status check of a job from the run history; the one
    way, for the history screen, `history --no-tui` and `attach`. The backend it ran on
    (unless --backend names one); the .env: --env-file when given, else the one the job was
    launched with, else (an older record) as for a headless run; then its SYNTH_API_KEY.
    A remembered .env that is gone or has no SYNTH_API_KEY is an error naming the file and
    the fix, raised before anything is sent."""
    if not session.options.backend:
        session.use_backend(record.backend, "the job history")
    remembered = session.remembered_env(record)
    if remembered is None:
        session.open_unattended_env()
        session.synth_api_key()
    else:
        open_remembered_env(session, record.job_id, remembered)
    return JobContext.from_record(record)


def open_remembered_env(session: LaunchSession, job_id: str, path: Path) -> None:
    fix = (f"pass --env-file PATH with its SYNTH_API_KEY: synth-tui history --env-file PATH, or "
           f"{attach_command(job_id, session.backend_base, 'PATH')}")
    present = path.is_file()
    if not present and not session.shell.get("SYNTH_API_KEY"):
        raise EnvFileError(f"Job {job_id} was launched with {path}, which no longer exists.",
                           f"Restore that file, or {fix}.")
    # The shell's SYNTH_API_KEY wins over the file, as everywhere; it also stands in for a
    # file that is gone.
    session.open_env(path if present else None, "the job's .env (run history)", [path])
    try:
        session.synth_api_key()
    except UnusableSecretError:
        raise
    except MissingSecretsError:
        raise MissingSecretsError(f"{path}, the .env job {job_id} was launched with, has no SYNTH_API_KEY.",
                                  f"Add SYNTH_API_KEY to it, or {fix}.") from None


def attach_hint(session: LaunchSession, job_id: str) -> str:
    """How to watch this job again after leaving: the command with every flag it needs."""
    if session.options.embedded_backend:
        return (f"The embedded backend stops with this process, and job {job_id} with it: "
                "the run history records it as cancelled.")
    env_path = session.env_choice.path if session.env_choice is not None else None
    return f"Attach again with:\n  {attach_command(job_id, session.backend_base, env_path)}"


def history_attach_command(session: LaunchSession, record: RunRecord) -> str:
    """The attach command for a job of the run history, with the backend and .env
    :meth:`use_history_record` would use (printed by `history --no-tui`; nothing is read)."""
    backend = session.backend_base if session.options.backend else record.backend
    env_path = os.path.abspath(session.options.env_files[0]) if session.options.env_files else record.env_path
    return attach_command(record.job_id, backend, env_path)


def paused_message(session: LaunchSession, job_id: str) -> str:
    """What a watch that ended on a paused job says (the job is not over)."""
    return (f"Job {job_id} is paused on the backend: it keeps its state there, and this watch has ended. "
            f"Resume it on the backend, then watch it again. {session.attach_hint(job_id)}")
