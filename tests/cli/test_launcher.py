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
