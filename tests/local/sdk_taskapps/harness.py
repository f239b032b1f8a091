"""Run a task app of this folder as a real uvicorn server in a child process, for the tests.

Imported by the test process, so it never imports synth_ai: the child is
`python -m sdk_taskapps.serve NAME`, run by a Python that has synth-ai 0.5.0, found in this
order: $SYNTH_AI_SDK_PYTHON; the test's own Python when synth-ai 0.5.0 is installed in it; the
SDK venv in the machine's test cache (support/machine_cache.py). Without one, the SDK venv is
made (a venv of its own, out of the project's: synth-ai 0.5.0 brings about 160 packages, some
pinned below ours; pip is upgraded first, as the machine's pip 23 resolves them for tens of
minutes), once per machine, by support/provision.py (which .ci/run calls before the tests), or
else by the first test that needs it, one process at a time. A failed install fails those tests
with pip's last lines; they are never skipped.

The key is handled as the SDK does it: the child reads ENVIRONMENT_API_KEY from its
environment (never from its command line). The child gets a HOME of its own, no other Synth or
provider key, and SYNTH_LOCALAPI_AUTH_PERSIST=0, so the SDK's start-up key handling
(ensure_localapi_auth) neither reads nor writes anything outside the test's folder.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx

from support import loopback_http
from support.machine_cache import CACHE
from support.pilot_waits import poll_until

HERE = Path(__file__).resolve().parent
SDK_VERSION = "0.5.0"
SDK_VENV = CACHE / f"sdkvenv-{SDK_VERSION}"
SDK_PYTHON_ENV = "SYNTH_AI_SDK_PYTHON"
APPS = ("context_free", "guess_number")
START_TIMEOUT_S = 90.0  # importing synth_ai takes 3-10 s on a busy 2-core machine
STOP_TIMEOUT_S = 15.0
# What the child must not inherit: keys of other services, and the SDK's own settings.
_DROPPED = re.compile(r"^(SYNTH_|ENVIRONMENT_API_KEY|DEV_ENVIRONMENT_API_KEY)|_API_KEY$|_TOKEN$|^MODAL_", re.I)
_VERSION_PROBE = "import importlib.metadata as m\ntry: print(m.version('synth-ai'))\nexcept Exception: print('')"


def _version_of(python: str) -> str:
    try:
        done = subprocess.run([python, "-c", _VERSION_PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def find_sdk_python() -> tuple[str | None, str]:
    """(a Python with synth-ai 0.5.0, '') or (None, why there is none and how to get one)."""
    explicit = os.environ.get(SDK_PYTHON_ENV, "").strip()
    candidates = [explicit] if explicit else [sys.executable, str(SDK_VENV / "bin" / "python")]
    seen = []
    for python in candidates:
        if not explicit and not Path(python).exists():
            continue
        version = _version_of(python)
        if version == SDK_VERSION:
            return python, ""
        seen.append(f"{python}: {f'synth-ai {version}' if version else 'no synth-ai'}")
    where = f"${SDK_PYTHON_ENV}" if explicit else f"this Python or {SDK_VENV}"
    return None, (f"no Python with synth-ai {SDK_VERSION} ({where}: {'; '.join(seen) or 'none'}); make one with "
                  "`python tests/support/provision.py --only sdk` "
                  f"or point ${SDK_PYTHON_ENV} at one")


class SdkTaskApp:
    """One app in its child process: `with SdkTaskApp(...).start() as app: app.url`."""

    def __init__(self, name: str, *, python: str, env_api_key: str, workdir: Path,
                 settings: dict[str, str] | None = None) -> None:
        """``settings``: the app's own variables (CONTEXT_FREE_BUTTONS), added to its environment."""
        if name not in APPS:
            raise ValueError(f"no task app {name!r}: one of {', '.join(APPS)}")
        self.name = name
        self.python = python
        self.workdir = workdir
        self.log_path = workdir / f"{name}.log"
        self.url = ""
        self._env_api_key = env_api_key
        self._settings = dict(settings or {})
        self._proc: subprocess.Popen[bytes] | None = None

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not _DROPPED.search(k)}
        home = self.workdir / "home"
        home.mkdir(exist_ok=True)
        env.update(HOME=str(home), PYTHONPATH=str(HERE.parent), PYTHONUNBUFFERED="1",
                   SYNTH_LOCALAPI_AUTH_PERSIST="0", ENVIRONMENT_API_KEY=self._env_api_key, **self._settings)
        return env

    def start(self) -> SdkTaskApp:
        port_file = self.workdir / f"{self.name}.port"
        port_file.unlink(missing_ok=True)
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                [self.python, "-m", "sdk_taskapps.serve", self.name, "--port-file", str(port_file)],
                cwd=self.workdir, env=self._env(), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

        def answers() -> bool:
            if self._proc is not None and self._proc.poll() is not None:
                raise RuntimeError(f"the {self.name} task app exited ({self._proc.returncode}):\n{self.log_tail()}")
            if not port_file.exists():
                return False
            self.url = f"http://127.0.0.1:{int(port_file.read_text())}"
            try:
                return loopback_http.get(self.url + "/", timeout=2.0).status_code == 200
            except httpx.TransportError:
                return False

        try:
            poll_until(answers, timeout=START_TIMEOUT_S, what=f"the {self.name} task app to answer")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> int | None:
        """Stops the child (SIGTERM: uvicorn's graceful shutdown, then SIGKILL if it hangs);
        its exit code."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_TIMEOUT_S)
        return proc.returncode

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> SdkTaskApp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


INSTALL_TIMEOUT_S = 1800.0


def ensure_sdk_python() -> str:
    """A Python with synth-ai 0.5.0: one found by find_sdk_python, else the SDK venv, made now.
    Raises RuntimeError (with pip's last lines) when it cannot be made."""
    python, why = find_sdk_python()
    if python is not None:
        return python
    if os.environ.get(SDK_PYTHON_ENV, "").strip():
        raise RuntimeError(why)  # the one named was asked for: do not make another
    venv = SDK_VENV
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".sdkvenv-{SDK_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # pytest-xdist workers: one installs, the others wait
        python, why = find_sdk_python()
        if python is not None:
            return python
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        for step in ([sys.executable, "-m", "venv", "--clear", str(venv)], [*pip, "-U", "pip"],
                     [*pip, f"synth-ai=={SDK_VERSION}"]):
            done = subprocess.run(step, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S)
            if done.returncode != 0:
                tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
                raise RuntimeError(f"could not make {venv} with synth-ai {SDK_VERSION} "
                                   f"({' '.join(step[-2:])} exited {done.returncode}):\n{tail}")
    python, why = find_sdk_python()
    if python is None:
        raise RuntimeError(why)
    return python
