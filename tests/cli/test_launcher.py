"""The `synth-tui` entry point: Ctrl+C while the command line's modules are still being imported
ends quietly with 130, as it does later (docs/product.md#exit-codes)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from app.cli import launcher
from app.core.errors import ExitCode

# Ctrl+C arrives while the command line (app.cli.dispatch) is imported: a finder raises it when
# that import starts.
INTERRUPTED_IMPORT = textwrap.dedent("""
    import sys
    class InterruptAtImport:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name == "app.cli.dispatch":
                raise KeyboardInterrupt
            return None
    sys.meta_path.insert(0, InterruptAtImport)
    from app.cli.launcher import main
    sys.exit(main())
""")


@pytest.mark.usefixtures("cli_process")  # a fresh interpreter, interrupted in its imports
def test_ctrl_c_during_the_imports_exits_130_without_a_traceback():
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_IMPORT], capture_output=True, text=True, timeout=60)
    assert done.returncode == ExitCode.INTERRUPTED
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr
    assert done.stderr.strip() == "Interrupted."


def test_the_launcher_exits_with_the_command_lines_code_for_an_interrupt():
    assert launcher.INTERRUPTED == ExitCode.INTERRUPTED


def test_the_installed_command_starts_at_the_launcher():
    from importlib.metadata import entry_points

    (script,) = [ep for ep in entry_points(group="console_scripts") if ep.name == "synth-tui"]
    # An editable install from before the launcher moved to app/cli/ still names app.launcher:
    # pip install -e . again.
    assert script.value == "app.cli.launcher:main"


def test_keys_typed_while_the_app_starts_are_not_echoed_and_the_terminal_comes_back(monkeypatch):
    """The README's keys typed at once were printed by the terminal above the app (and stayed
    there after it ended): echo is off from the launcher's first line, and put back after."""
    import os
    import pty
    import termios

    master, slave = pty.openpty()
    try:
        monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
        assert termios.tcgetattr(slave)[3] & termios.ECHO
        for headless in (["demo", "--no-tui"], ["backend"], ["serve", "demo"], ["--help"]):
            assert launcher.quiet_terminal(headless, slave) is None
        restore = launcher.quiet_terminal(["demo"], slave)
        assert restore is not None and not termios.tcgetattr(slave)[3] & termios.ECHO
        os.write(master, b"c\n")  # typed while quiet: kept for the app to read, not echoed
        os.set_blocking(master, False)
        try:
            echoed = os.read(master, 10)
        except BlockingIOError:
            echoed = b""
        assert b"c" not in echoed
        restore()
        assert termios.tcgetattr(slave)[3] & termios.ECHO
        assert os.read(slave, 10) == b"c\n"
        monkeypatch.setattr(sys.stdout, "isatty", lambda: False)  # piped: nothing to quiet
        assert launcher.quiet_terminal(["demo"], slave) is None
    finally:
        os.close(master)
        os.close(slave)


# The collector during the command line's imports (docs/performance.md#first-paint): off from the
# entry point on, on again once a front end that draws no app is chosen (a TUI: after its frame).
COLLECTOR_AT_IMPORT = textwrap.dedent("""
    import gc, runpy, sys
    class Probe:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name == "app.cli.dispatch":
                print("collector on:", gc.isenabled())
            return None
    sys.meta_path.insert(0, Probe)
    sys.argv = ["synth-tui", "--version"]
    runpy.run_module("app.cli", run_name="__main__")
""")


@pytest.mark.usefixtures("cli_process")  # a fresh interpreter: the state of its collector at import
def test_python_dash_m_imports_the_command_line_with_the_collector_off():
    done = subprocess.run([sys.executable, "-c", COLLECTOR_AT_IMPORT], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "collector on: False"


def test_the_launcher_imports_the_command_line_with_the_collector_off_and_turns_it_on_after(monkeypatch):
    import gc

    from app.cli import dispatch

    seen: list[bool] = []
    monkeypatch.setattr(dispatch, "main", lambda: seen.append(gc.isenabled()) or 0)
    monkeypatch.setattr(sys, "argv", ["synth-tui", "--no-tui"])
    assert launcher.main() == 0
    assert seen == [False]
    assert gc.isenabled()


@pytest.mark.parametrize("command", ["rollouts", "train"])
def test_a_front_end_that_draws_no_app_runs_with_the_collector_on(monkeypatch, command):
    import argparse
    import gc

    from app.cli import dispatch

    seen: list[bool] = []
    monkeypatch.setitem(dispatch._RUNNERS, command, lambda _args, _interactive: seen.append(gc.isenabled()) or 0)
    gc.disable()  # as the entry point leaves it
    try:
        dispatch._dispatch(argparse.Namespace(command=command, no_tui=True))
    finally:
        gc.enable()
    assert seen == [True]
