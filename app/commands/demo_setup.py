"""The demo's folder, keys and servers (``DemoSetup``): what ``synth-tui demo`` starts, after
the guided demo's first frame (app/commands/demo.py's ``DemoServers``, in a worker), or before a
headless demo. Its own module, so that the first frame waits for none of it: its two
dataclasses, the folder's lock and the keys' imports (docs/performance.md#first-paint).

The .env and the backend's database live in one private folder (``<state dir>/demo`` unless
``--workdir`` says otherwise) that later demos reuse with the same keys, so no new copy of
live keys is left behind on every run. ``claim_folder`` serves ``lab`` and ``--backend local``
too."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from app.commands.demo import demo_config_path
from app.core.errors import UsageError
from app.core.paths import open_private, private_dir, private_file, state_dir

if TYPE_CHECKING:  # the servers (FastAPI, uvicorn) load only when a demo starts them
    from app.local.servers import ServerHandle

LOCK_NAME = ".lock"


@dataclass
class DemoFolder:
    """The folder one demo uses: its own (locked) or, while another demo holds that one, a
    temporary one that is removed with its keys when the demo ends."""

    path: Path
    lock: IO[bytes]  # held open: the flock lasts until release() or the process ends
    temporary: bool = False
    busy: Path | None = None  # the folder another demo holds, when this one is temporary

    def release(self) -> None:
        """Idempotent: the servers that used the folder must be stopped first."""
        if self.temporary:
            shutil.rmtree(self.path, ignore_errors=True)
        self.lock.close()


@dataclass
class DemoSetup:
    folder: DemoFolder
    env_path: Path
    config_path: Path
    backend: ServerHandle
    task_app: ServerHandle
    reused_keys: bool = False

    def stop(self) -> None:
        """Stop both servers, then let the folder go (a temporary one is removed with its keys).
        The task app first: its rollouts in flight still reach the backend's chat and end at once;
        after the backend, they would wait out the chat hop's backoff (app/local/training/retry.py)."""
        for server in (self.task_app, self.backend):
            server.stop()
        self.folder.release()


def _check_own_file(env_path: Path) -> None:
    """The demo writes its .env in place: never through a link (it would write, and chmod,
    whatever file the link points at) nor into anything but a plain file."""
    if env_path.is_symlink() or (env_path.exists() and not env_path.is_file()):
        raise UsageError(f"{env_path} is a link or not a plain file; the demo writes only a .env of its own.",
                         "Remove it (the demo makes a new one with fresh keys), or pass another --workdir.")


def demo_keys(env_path: Path) -> tuple[str, str]:
    """Fresh keys, or the keys of an earlier demo in the same folder (its database knows them)."""
    import secrets  # with hmac and OpenSSL's hashlib: in the preparation too, not before the first frame

    from app.core.env import envfile  # in the preparation, after the first frame (docs/performance.md)

    _check_own_file(env_path)
    if env_path.exists():
        private_file(env_path)  # a .env left wider by an earlier version is tightened first
        existing = envfile.EnvFile.load(env_path)
        synth, env_key = existing.get("SYNTH_API_KEY"), existing.get("ENVIRONMENT_API_KEY")
        if synth and env_key:
            return synth, env_key
    return f"sk_demo_{secrets.token_hex(16)}", secrets.token_hex(32)


def write_env(env_path: Path, synth_key: str, env_key: str, task_url: str) -> None:
    """A new demo .env (0600), or the task URL of an earlier one updated (ports change)."""
    from app.core.env import envfile

    if not env_path.exists():
        envfile.write_demo_env(env_path, {"SYNTH_API_KEY": synth_key, "ENVIRONMENT_API_KEY": env_key,
                                          "TASK_APP_URL": task_url})
        return
    existing = envfile.EnvFile.load(env_path)
    # The keys too: an earlier .env whose keys were removed gets the fresh ones (demo_keys).
    for name, value in (("SYNTH_API_KEY", synth_key), ("ENVIRONMENT_API_KEY", env_key), ("TASK_APP_URL", task_url)):
        if existing.get(name) != value:
            existing.set(name, value)
    existing.save()


def default_demo_dir() -> Path:
    return state_dir() / "demo"


def claim_demo_folder(workdir: str | None) -> DemoFolder:
    return claim_folder(Path(workdir).expanduser() if workdir else default_demo_dir(), "demo-")


def claim_folder(path: Path, temporary_prefix: str) -> DemoFolder:
    """``path``, locked for this run; if another run holds it, a fresh private folder named
    ``<temporary_prefix>…`` in the state folder.

    Two runs must never share a backend database: the demo's backend fails the jobs it finds
    running when it opens one, and those would be the other run's live jobs.
    """
    if os.path.lexists(path) and not path.is_dir():
        raise UsageError(f"{path} is not a folder; the run keeps its database and .env in a folder there.",
                         "Pass another folder (--workdir DIR for the demo), or move it away.")
    try:
        chosen = private_dir(path)
        lock = _try_lock(chosen)
    except OSError as exc:  # a folder (or a looping link) where its lock file goes; no permission
        where = exc.filename or path
        raise UsageError(f"Cannot use {path} as the run's folder: {where}: {exc.strerror or exc}.",
                         f"Pass another folder (--workdir DIR for the demo), or move {where} away ({LOCK_NAME} is "
                         f"an empty file that only marks the folder taken).") from None
    if lock is not None:
        return DemoFolder(chosen, lock)
    _remove_abandoned_temporary_folders(temporary_prefix)
    fresh = Path(tempfile.mkdtemp(prefix=temporary_prefix, dir=private_dir(state_dir())))  # mkdtemp: 0700
    lock = _try_lock(fresh)
    assert lock is not None, "a folder made a moment ago cannot be locked by anyone else"
    return DemoFolder(fresh, lock, temporary=True, busy=chosen)


def _remove_abandoned_temporary_folders(prefix: str) -> None:
    """Temporary folders whose run was killed (so never cleaned up) still hold keys: any
    whose lock nobody holds is removed."""
    for folder in state_dir().glob(f"{prefix}*"):
        # A minute old at least: one made this instant may not be locked by its demo yet.
        if folder.is_dir() and not folder.is_symlink() and time.time() - folder.stat().st_mtime > 60:
            lock = _try_lock(folder)
            if lock is not None:
                lock.close()
                shutil.rmtree(folder, ignore_errors=True)


def _try_lock(folder: Path) -> IO[bytes] | None:
    """The folder's lock file, exclusively locked; None while another process holds it."""
    handle = open_private(folder / LOCK_NAME, "ab")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    except BaseException:
        handle.close()
        raise
    return handle


def start_demo(workdir: str | None) -> DemoSetup:
    folder = claim_demo_folder(workdir)
    try:
        return _start_servers(folder)
    except BaseException:
        folder.release()
        raise


def _start_servers(folder: DemoFolder) -> DemoSetup:
    from app.local.servers import start_backend, start_taskapp  # the servers load only when used

    env_path = folder.path / ".env"
    reused = env_path.exists()
    synth_key, env_key = demo_keys(env_path)
    config_path = demo_config_path()
    task_app = start_taskapp(env_api_keys=[env_key])
    try:
        backend = start_backend(api_key=synth_key, db_path=folder.path / "backend.sqlite3", env_api_keys=[env_key],
                                # it stops with the demo: so do its jobs; the demo trains the fast stand-in
                                resume=False, policy_kind="tabular",
                                db_elsewhere="pass --workdir DIR to run the demo in another folder")
    except BaseException:
        task_app.stop()
        raise
    setup = DemoSetup(folder, env_path, config_path, backend, task_app, reused_keys=reused)
    try:
        write_env(env_path, synth_key, env_key, task_app.url)
    except BaseException:
        setup.stop()
        raise
    return setup
