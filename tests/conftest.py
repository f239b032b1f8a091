"""Shared test setup: a clean environment for every test, and loopback servers."""

from __future__ import annotations

import builtins
import gc
import io
import os
import signal
import socket
import sys

import pytest

from support.fakes import FaultyBackend, TinyTaskApp
from support.tiers import QuickTierGuard, choose_hypothesis_profile, slow_fixture, slow_reasons, worker_group

# Variables that would make tests depend on the developer's shell or terminal.
_LEAKY_VARS = (
    "NO_COLOR", "TEXTUAL_THEME", "SYNTH_API_KEY", "ENVIRONMENT_API_KEY", "DEV_ENVIRONMENT_API_KEY",
    "dev_environment_api_key", "ENVIRONMENT_API_KEY_ALIASES", "TASK_APP_URL", "TASK_APP_BASE_URL",
    "BACKEND_BASE_URL", "BACKEND_OVERRIDE", "SYNTH_BACKEND_URL_OVERRIDE", "LOCAL_BACKEND_URL", "DEV_BACKEND_URL",
    "PROD_BACKEND_URL", "SYNTH_API_URL", "SYNTH_BACKEND_URL", "SYNTH_API_BASE_URL", "SDK_EXPERIMENTAL",
    "SDK_EXPERIMENTAL_MODELS", "SYNTH_AI_HOME", "SYNTH_TUI_STATE_DIR",
    "XDG_STATE_HOME", "XDG_CACHE_HOME",
)


@pytest.fixture(autouse=True)
def clean_environment(tmp_path_factory, monkeypatch):
    """Every test gets its own HOME, state folders and working folder, and none of the shell's
    secrets: nothing of the clone (its ./.env, a demo's files) or of the user is read."""
    for name in _LEAKY_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path_factory.mktemp("cwd"))
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SYNTH_AI_HOME", str(home / ".synth-ai"))
    monkeypatch.setenv("SYNTH_TUI_STATE_DIR", str(home / "state"))
    yield home


@slow_fixture("starts real processes: synth-tui or a fresh Python (about a second each)", scope="session")
def cli_process():
    """``cli_process(*args, cwd=, env=, timeout=)``: the installed ``synth-tui`` as a real process
    (support.cli.run_process), for what only a process shows (a signal, a closed pipe, a fresh
    interpreter's imports, ps); exit codes and messages are checked in-process with
    support.cli.run_cli. A test that starts its own processes uses it too
    (``pytest.mark.usefixtures("cli_process")``): that puts it in the slow tier."""
    from support.cli import run_process

    return run_process


@pytest.fixture(scope="session", autouse=True)
def parsed_css_shared():
    """Every app in this process shares the stylesheets parsed once (support/textual_compat.py)."""
    from support.textual_compat import share_parsed_css

    undo = share_parsed_css()
    yield
    undo()


@pytest.fixture
def faulty_backend():
    with FaultyBackend() as backend:
        yield backend


@pytest.fixture
def dead_port():
    """A loopback port bound and never listening: connecting to it is refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture
def tiny_task_app():
    with TinyTaskApp() as app:
        yield app


def pytest_configure(config):
    os.environ.pop("NO_COLOR", None)
    os.environ.pop("TEXTUAL_THEME", None)
    keep_compiled_code()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # More workers than cores (pytest_xdist_auto_num_workers): torch in each, sized to every
        # core, oversubscribed them, and its threads spun waiting for each other. One each.
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    # Hundreds of apps are built and dropped in a test process, each thousands of objects: the
    # cycle collector's default (a pass every 700 new objects) cost an eighth of a Pilot test's
    # CPU. Collected less often, as a long-running server would tune it; memory stays bounded.
    gc.set_threshold(50_000, 20, 100)
    # A suite started in the background by a non-interactive shell inherits Ctrl+C ignored, and
    # so would every process a test starts: the tests that send a server SIGINT (exit 130) would
    # wait for nothing. A handler of our own is reset to the default in each child.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.stash[_GUARD] = QuickTierGuard()
    choose_hypothesis_profile(config.getoption("markexpr") or "", config.getoption("hypothesis_profile", None))


def pytest_collection_finish(session):
    """What the worker holds once it has collected (every module, test and library imported) is
    kept to its end: frozen, a full collection no longer walks it. The embedded backend runs one
    (app/local/policies/heap.py) at each job's end, and in a test process that walk was about
    0.1-0.3 s of CPU a job, for a heap a real backend does not have (docs/testing.md#the-test-process)."""
    gc.collect()
    gc.freeze()


def keep_compiled_code() -> None:
    """Compiled modules are kept between runs (in __pycache__, as anywhere without the variable):
    where PYTHONDONTWRITEBYTECODE is set (it is on our CI machines), every pytest worker would
    otherwise rewrite every test module's asserts and compile the app again at each start (about
    6 s of CPU each), and so would every process a test starts (docs/testing.md#compiled-code)."""
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # the processes the tests start


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: two workers more than the CPUs this process may use. A quarter of the suite's
    time is spent waiting (on loopback servers, rank processes, timers a test must see fire),
    and a worker that waits leaves its core idle; the extra workers fill it
    (docs/testing.md#workers)."""
    return len(os.sched_getaffinity(0)) + 2


# -- the two tiers (support/tiers.py, docs/testing.md#two-tiers) ------------------------------

_GUARD = pytest.StashKey[QuickTierGuard]()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """`slow` from the fixtures a test uses, before `-m "not slow"` deselects by it; and the
    xdist group of a fixture that its tests share on one worker."""
    for item in items:
        if slow_reasons(item.fixturenames):
            item.add_marker(pytest.mark.slow)
        if (group := worker_group(item.fixturenames)) is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def _guarded_phase(item):
    """One phase of a test; a quick test's under the guard, failed when it did a slow test's work."""
    guard = item.config.stash[_GUARD] if item.get_closest_marker("slow") is None else None
    if guard is not None:
        guard.start()
    try:
        result = yield
    finally:
        problem = guard.stop() if guard is not None else None
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _guarded_phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _guarded_phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    return (yield from _guarded_phase(item))


@pytest.fixture
def refuse_os_access(monkeypatch):
    """Make the OS refuse (EACCES) to open a file, or to create files in a folder with
    creating=True: what chmod does to anyone but root. CI runs as root, where chmod cannot
    refuse anything, so the permission paths are tested this way for everyone."""
    real_os_open, real_io_open = os.open, io.open
    refused: list[tuple[str, bool]] = []

    def check(path, creates: bool) -> None:
        if isinstance(path, int):
            return
        target = os.path.abspath(os.fspath(path))
        for denied, creating in refused:
            if (os.path.dirname(target) == denied and creates) if creating else target == denied:
                raise PermissionError(13, "Permission denied", target)

    def guarded_os_open(path, flags, *args, **kwargs):
        check(path, bool(flags & os.O_CREAT))
        return real_os_open(path, flags, *args, **kwargs)

    def guarded_io_open(file, mode="r", *args, **kwargs):
        check(file, any(c in mode for c in "wax"))
        return real_io_open(file, mode, *args, **kwargs)

    def refuse(path, *, creating: bool = False) -> None:
        refused.append((os.path.abspath(os.fspath(path)), creating))

    monkeypatch.setattr(os, "open", guarded_os_open)
    monkeypatch.setattr(io, "open", guarded_io_open)
    monkeypatch.setattr(builtins, "open", guarded_io_open)
    return refuse


class ModalStandin:
    """The stand-in `modal` CLI of tests/modal_standin (docs/modal.md): edit ``state`` (secrets,
    apps, logged_in, delay, banner, create_lands), then ``save()``; ``calls()`` is every argv it
    was run with, and the mode of each file it read; ``containers()`` every container it started."""

    def __init__(self, state_path, bin_dir) -> None:
        self.path = state_path
        self.bin_dir = bin_dir
        self.state: dict = {"logged_in": True, "environment": "main", "secrets": {}, "apps": [], "delay": 0,
                            "banner": True}

    def save(self) -> None:
        import json

        self.path.write_text(json.dumps(self.state))

    def reload(self) -> dict:
        import json

        self.state = json.loads(self.path.read_text())
        return self.state

    def calls(self) -> list[dict]:
        import json

        log = self.path.with_name(self.path.name + ".calls.jsonl")
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def containers(self) -> list[dict]:
        """Every container the stand-in really started (what a run paid for): the secrets mounted."""
        import json

        log = self.path.with_name(self.path.name + ".containers.jsonl")
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@slow_fixture("runs the stand-in `modal` CLI: a Python process per call")
def modal_standin(tmp_path, monkeypatch):
    """The stand-in `modal` first on PATH, its state in a fresh file ($MODAL_STANDIN_STATE)."""
    from pathlib import Path

    bin_dir = Path(__file__).parent / "modal_standin"
    standin = ModalStandin(tmp_path / "modal_state.json", bin_dir)
    standin.save()
    monkeypatch.setenv("MODAL_STANDIN_STATE", str(standin.path))
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return standin
