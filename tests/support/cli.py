"""Running the command line in a test: in-process (quick) or as a real process (slow).

``run_cli`` calls ``app.cli.dispatch.main([...])`` in the test's process with the environment, working
folder and standard streams a process would get, and gives back what the process would have:
an exit code, stdout and stderr. It checks exit codes and messages in milliseconds. The
``cli_process`` fixture (conftest.py) runs the installed ``synth-tui`` for what only a real
process shows: a closed pipe, a signal, the first paint, its command line in ``ps``.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

EXE = Path(sys.executable).with_name("synth-tui")


@dataclass
class CliResult:
    """What a finished command gave: the fields of subprocess.CompletedProcess that tests read."""

    returncode: int
    stdout: str
    stderr: str


def _text_stream() -> io.TextIOWrapper:
    # A real process's streams: text over bytes (a .buffer), strict errors, not a terminal.
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict", write_through=True)


def _read(stream: io.TextIOWrapper) -> str:
    stream.flush()
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return buffer.getvalue().decode("utf-8", errors="replace")


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> CliResult:
    """``synth-tui ARGS`` in this process: os.environ updated by `env`, the working folder `cwd`,
    stdin empty and stdout/stderr captured, all put back afterwards."""
    from app.cli.dispatch import main

    saved_environ, saved_cwd = dict(os.environ), os.getcwd()
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    out, err = _text_stream(), _text_stream()
    try:
        os.environ.update(env or {})
        if cwd is not None:
            os.chdir(cwd)
        sys.stdin, sys.stdout, sys.stderr = io.StringIO(""), out, err
        try:
            code = main(list(args))
        except SystemExit as exc:  # what the interpreter would turn into an exit status
            code = exc.code if isinstance(exc.code, int) else 1
        return CliResult(code, _read(out), _read(err))
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_environ)


def run_process(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
                timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``synth-tui ARGS`` as a real process (through the ``cli_process`` fixture)."""
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)
