"""Figure 8: first paint, from the command's start to its first frame on a terminal.

Each command runs on a pseudo-terminal of 160x45 (TERM=xterm-256color), as a user's shell
would start it, and the clock stops when the terminal receives the header line of the first
screen ("synth-tui — <screen>"), which Textual writes with the frame. The baseline, in the
same run, is a minimal Textual app with the same header and nothing else: the floor any
Textual app pays (interpreter start, Textual's import, the driver's setup, one frame).

Measured: `synth-tui` (the guided session, from an empty project folder: the picker) and
`synth-tui demo` (its first screen, the picker, which says the demo's servers are starting:
they start after the first frame). Each start is in a fresh state folder; a round starts the
baseline and the two commands one after the other, and the figure is the median over the
rounds of each round's ratio (command / baseline). This shared machine's speed drifts by a
third between moments (the same minimal app: 290 to 450 ms within a minute): a ratio taken
within one round, a second or two, cancels that drift, where a ratio of medians taken over
the whole run does not. The medians in milliseconds, and their ratio, are in the notes.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

from benchmarks.common import REPO, Figure, child_main, median, say

SIZE = (160, 45)
MARKER = "synth-tui \u2014".encode()  # the header's "synth-tui — <screen>", once styles are stripped
# Control sequences (CSI, and OSC ended by BEL): the header's words arrive styled in pieces.
CONTROL = re.compile(rb"\x1b\[[0-9;?<>=$]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
LIMIT_S = 60.0

MINIMAL_APP = '''
from textual.app import App
from textual.widgets import Header, Static

class Minimal(App):
    TITLE = "synth-tui"
    SUB_TITLE = "baseline"

    def compose(self):
        yield Header()
        yield Static("first paint")

Minimal().run()
'''


def first_paint(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Seconds from spawning ``command`` on a pty to the marker reaching the terminal."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", SIZE[1], SIZE[0], 0, 0))
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
                               start_new_session=True)
    os.close(slave)
    seen = b""
    try:
        while time.perf_counter() - started < LIMIT_S:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if process.poll() is not None:
                    raise RuntimeError(f"{command[-1]} exited ({process.returncode}) before its first frame")
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                raise RuntimeError(f"{command[-1]} closed the terminal before its first frame") from None
            seen = (seen + chunk)[-65536:]
            if MARKER in CONTROL.sub(b"", seen):
                return time.perf_counter() - started
        raise RuntimeError(f"no first frame within {LIMIT_S:.0f} s")
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()
        os.close(master)


def one_start(command: list[str]) -> float:
    """Milliseconds to the first frame of one start, in a fresh home and state folder."""
    with tempfile.TemporaryDirectory(prefix="synth-tui-paint-") as folder:
        home = Path(folder)
        (home / "project").mkdir()
        env = {**os.environ, "TERM": "xterm-256color", "HOME": str(home),
               "SYNTH_TUI_STATE_DIR": str(home / "state"), "SYNTH_AI_HOME": str(home / ".synth-ai"),
               "PYTHONPATH": str(REPO), "COLUMNS": str(SIZE[0]), "LINES": str(SIZE[1])}
        # PYTHONDONTWRITEBYTECODE (set on some CI and sandbox shells) would compile every module
        # from source on every start: a user's second run reads the bytecode the first one wrote.
        for name in ("NO_COLOR", "TEXTUAL_THEME", "SYNTH_API_KEY", "ENVIRONMENT_API_KEY", "TASK_APP_URL",
                     "PYTHONDONTWRITEBYTECODE"):
            env.pop(name, None)
        return first_paint(command, home / "project", env) * 1000


def run(quick: bool) -> list[Figure]:
    repeat = 3 if quick else 21
    with tempfile.NamedTemporaryFile("w", suffix="_minimal_app.py", delete=False) as script:
        script.write(MINIMAL_APP)
    commands = {"minimal Textual app": [sys.executable, script.name],
                "synth-tui": [sys.executable, "-m", "app.cli"],
                "synth-tui demo": [sys.executable, "-m", "app.cli", "demo"]}
    samples: dict[str, list[float]] = {label: [] for label in commands}
    try:
        # One untimed start of each writes its bytecode and warms the disk cache: a user's second run.
        for command in commands.values():
            one_start(command)
        # In turns, so that a busy moment of the shared machine falls on all three alike.
        for _ in range(repeat):
            for label, command in commands.items():
                samples[label].append(one_start(command))
    finally:
        os.unlink(script.name)
    for label, values in samples.items():
        say(f"startup: {label}: {', '.join(f'{value:.0f}' for value in values)} ms")
    base = samples["minimal Textual app"]
    base_ms = median(base)
    figures = []
    for label, limit in (("synth-tui", 1.3), ("synth-tui demo", 1.6)):
        ratios = [value / floor for value, floor in zip(samples[label], base, strict=True)]
        ratio = median(ratios)
        value_ms = median(samples[label])
        say(f"startup: {label} / minimal app, round by round: {', '.join(f'{r:.2f}' for r in ratios)}")
        figures.append(Figure(
            f"first paint at 160x45, `{label}` / minimal Textual app (median of {len(ratios)} rounds)", ratio, "x",
            goal=f"within {limit}x the minimal app", met=None if ratio is None else ratio <= limit, samples=ratios,
            note=f"command start to the header of the first screen on a pseudo-terminal; medians {value_ms:.0f} ms "
                 f"vs the minimal app's {base_ms:.0f} ms (ratio of medians "
                 f"{value_ms / base_ms if value_ms and base_ms else float('nan'):.2f}x); rounds "
                 f"{min(ratios):.2f}-{max(ratios):.2f}x"))
    return figures


if __name__ == "__main__":
    child_main("bench_startup", run)
