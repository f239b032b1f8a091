"""Figure 8: first paint, from the command's start to its first frame on a terminal.

Each command runs on a pseudo-terminal of 160x45 (TERM=xterm-256color), as a user's shell
would start it, and the figure is its CPU time when it writes the header line of the first
screen ("synth-tui — <screen>"), which Textual writes with the frame: CPU time, which the load
of the other processes on this shared machine does not move, where the wall clock drifts by a
third from one minute to the next. Each command runs under FIRST_FRAME_CLOCK, which watches
what it writes to the terminal and notes its CPU time at that write; the wall clock (to the
header reaching the terminal) and the CPU time when it is killed right after (which adds what
the start did after its frame until then) are in the notes. The baseline, in the same run, is a
minimal Textual app with the same header and nothing else: the floor any Textual app pays
(interpreter start, Textual's import, the driver's setup, one frame).

Measured: `synth-tui` (the guided session, from an empty project folder: the picker) and
`synth-tui demo` (its first screen, the picker, which says the demo's servers are starting:
they start after the first frame). Each start is in a fresh home and state folder; the user's
cache folder (XDG_CACHE_HOME), where a start keeps the CSS it parsed for the next
(app/screens/css_cache.py), is one folder kept across the rounds, warmed by an untimed start
that runs until it has written it (or for WARM_UP_S, when the seed of parsed CSS shipped with
the package served every source and it keeps nothing): a user's second start, as the bytecode
is warm. The cold start (an empty cache folder: the first start after an install or an upgrade
of Textual; it reads the package's seed) is measured in the same rounds and reported beside it.
A round starts the baseline and the commands one after the other, and the figure is the median
over the rounds of each round's ratio (command / baseline). The medians in milliseconds are in the notes.

The same starts are also counted in instructions, under valgrind's callgrind (INSTRUCTION_RUNS
each, the fewest kept: a start's threads and timers can add work, never take it away), from the
interpreter's start to the first frame, where the wrapper ends the process as the main thread
hands the frame to the driver (end_at_the_frame): a count the other processes' load does not
move, where the CPU time of one round moves by a half on this shared machine. Without valgrind
installed those rows say so (no figure).
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from benchmarks.common import REPO, Figure, child_main, median, say

SIZE = (160, 45)
MARKER = "synth-tui \u2014".encode()  # the header's "synth-tui — <screen>", once styles are stripped
# Control sequences (CSI, and OSC ended by BEL): the header's words arrive styled in pieces.
CONTROL = re.compile(rb"\x1b\[[0-9;?<>=$]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
LIMIT_S = 60.0
# A warm-up start runs on this long at most for its save (1 s after its frame): with the package's
# seed current (app/screens/css_cache.py) the start parsed nothing and keeps nothing.
WARM_UP_S = 10.0
COLD = ", cold cache"  # a label's ending: the start's cache folder is empty (its first start)
INSTRUCTION_RUNS = 2  # callgrind runs of each start (about 20 s each here); the fewest instructions kept

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


class Start(NamedTuple):
    """One start: wall milliseconds to the first frame; the CPU milliseconds the command had
    spent when it wrote that frame (FIRST_FRAME_CLOCK: what the other processes' load does not
    move); and its CPU milliseconds when killed once the frame reached the terminal, which adds
    what it did after the frame until then (on a loaded machine, a few to tens of ms of the work
    a start defers to after its first frame)."""

    wall_ms: float
    cpu_ms: float
    cpu_killed_ms: float

# Runs a command (a script, or -m and a module) with its terminal writes watched: Textual writes
# its frames to sys.__stderr__ (its Linux driver's writer thread), and the write that completes the
# first frame's header records this process's CPU time then, in $FIRST_FRAME_CPU, before it goes
# on to the terminal. The same for every command measured, so its own cost (runpy, one regular
# expression) is in the floor too; it leaves the collector to the command.
FIRST_FRAME_CLOCK = '''
import os, re, runpy, sys, time

MARKER = "synth-tui \\u2014"
CONTROL = re.compile(r"\\x1b\\[[0-9;?<>=$]*[ -/]*[@-~]|\\x1b\\][^\\x07]*\\x07")


class Watched:
    def __init__(self, stream):
        self._stream, self._seen, self._done = stream, "", False

    def write(self, text):
        if not self._done:
            self._seen = (self._seen + text)[-65536:]
            if MARKER in CONTROL.sub("", self._seen):
                self._done = True
                with open(os.environ["FIRST_FRAME_CPU"], "w") as out:
                    out.write(repr(time.process_time()))
        return self._stream.write(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def end_at_the_frame():
    """Under callgrind: end the process where the main thread hands the frame with the header to
    the driver's writer thread. Valgrind runs one thread at a time and may run the main thread on
    through what the start does after its frame (the later styles, the search) before the writer
    gets its turn: counted to the writer's write, one start counted 1,070 M and the next 1,430 M."""
    from textual.drivers import linux_driver  # what every Textual app imports; here a little sooner

    handed = linux_driver.LinuxDriver.write

    def write(driver, data):
        if MARKER in CONTROL.sub("", data):
            with open(os.environ["FIRST_FRAME_CPU"], "w") as out:
                out.write(repr(time.process_time()))
            os._exit(0)  # callgrind writes its counts as the process exits
        return handed(driver, data)

    linux_driver.LinuxDriver.write = write


sys.__stderr__ = sys.stderr = Watched(sys.__stderr__)
if os.environ.get("FIRST_FRAME_EXIT"):
    end_at_the_frame()
if sys.argv[1] == "-m":
    sys.argv = sys.argv[2:]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    sys.argv = sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
'''


def first_paint(command: list[str], cwd: Path, env: dict[str, str],
                until: Callable[[], bool] | None = None) -> Start:
    """The first frame of ``command`` on a pty: wall time from its spawn to the marker reaching
    the terminal, and its CPU time then (the command is killed at once and its rusage read;
    with `until`, it runs on after its first frame until ``until()`` holds, a warm-up's cache
    written, within the same limit, and its CPU time is the whole run's)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", SIZE[1], SIZE[0], 0, 0))
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
                               start_new_session=True)
    os.close(slave)
    seen = b""
    reaped = False
    try:
        while time.perf_counter() - started < LIMIT_S:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if process.poll() is not None:
                    reaped = True
                    raise RuntimeError(f"{command[-1]} exited ({process.returncode}) before its first frame")
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                raise RuntimeError(f"{command[-1]} closed the terminal before its first frame") from None
            seen = (seen + chunk)[-65536:]
            if MARKER in CONTROL.sub(b"", seen):
                painted = time.perf_counter() - started
                if until is not None:
                    wait_after_paint(master, until, started)
                os.killpg(process.pid, signal.SIGKILL)
                _, _, usage = os.wait4(process.pid, 0)
                process.returncode = -signal.SIGKILL
                reaped = True
                clock = Path(env.get("FIRST_FRAME_CPU", "/nonexistent"))
                at_frame = float(clock.read_text()) if clock.is_file() else float("nan")  # a command unwatched
                return Start(painted * 1000, at_frame * 1000, (usage.ru_utime + usage.ru_stime) * 1000)
        raise RuntimeError(f"no first frame within {LIMIT_S:.0f} s")
    finally:
        if not reaped:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
        os.close(master)


def wait_after_paint(master: int, until: Callable[[], bool], started: float) -> None:
    """Keep reading the terminal (the app writes on) until ``until()`` holds."""
    while not until():
        if time.perf_counter() - started > LIMIT_S:
            raise RuntimeError(f"the condition after the first frame did not hold within {LIMIT_S:.0f} s")
        if select.select([master], [], [], 0.1)[0]:
            try:
                os.read(master, 65536)
            except OSError:
                raise RuntimeError("the command closed the terminal after its first frame") from None


def one_start(command: list[str], cache: Path | None = None, *, until_cached: bool = False,
              repo: Path = REPO) -> Start:
    """The first frame of one start of ``command`` (run from `repo`), in a fresh home and
    state folder; the user's cache folder is `cache` (kept across starts) or, without it, a
    fresh one. With `until_cached`, the start runs on until it has kept its parsed CSS in `cache`,
    or for WARM_UP_S when it has nothing to keep (the package's seed served every source)."""
    with tempfile.TemporaryDirectory(prefix="synth-tui-paint-") as folder:
        home = Path(folder)
        (home / "project").mkdir()
        cache = cache or home / ".cache"
        kept = cache / "synth-tui" / "parsed-css.pickle"
        env = {**os.environ, "TERM": "xterm-256color", "HOME": str(home), "XDG_CACHE_HOME": str(cache),
               "SYNTH_TUI_STATE_DIR": str(home / "state"), "SYNTH_AI_HOME": str(home / ".synth-ai"),
               "PYTHONPATH": str(repo), "COLUMNS": str(SIZE[0]), "LINES": str(SIZE[1]),
               "FIRST_FRAME_CPU": str(home / "first-frame-cpu")}
        # PYTHONDONTWRITEBYTECODE (set on some CI and sandbox shells) would compile every module
        # from source on every start: a user's second run reads the bytecode the first one wrote.
        for name in ("NO_COLOR", "TEXTUAL_THEME", "SYNTH_API_KEY", "ENVIRONMENT_API_KEY", "TASK_APP_URL",
                     "PYTHONDONTWRITEBYTECODE"):
            env.pop(name, None)
        begun = time.perf_counter()
        return first_paint(command, home / "project", env,
                           (lambda: kept.exists() or time.perf_counter() - begun > WARM_UP_S) if until_cached else None)


def instructions_to_first_frame(command: list[str], cache: Path) -> int:
    """Instructions (callgrind's Ir, every thread) from the start of `command` to its first frame,
    in a fresh home and state folder, with `cache` as its cache folder: the wrapper ends the
    process at the frame, and callgrind writes its counts as it exits."""
    with tempfile.TemporaryDirectory(prefix="synth-tui-paint-cg-") as folder:
        home = Path(folder)
        (home / "project").mkdir()
        counts = home / "callgrind.out"
        env = {**os.environ, "TERM": "xterm-256color", "HOME": str(home), "XDG_CACHE_HOME": str(cache),
               "SYNTH_TUI_STATE_DIR": str(home / "state"), "SYNTH_AI_HOME": str(home / ".synth-ai"),
               "PYTHONPATH": str(REPO), "COLUMNS": str(SIZE[0]), "LINES": str(SIZE[1]),
               "FIRST_FRAME_CPU": str(home / "first-frame-cpu"), "FIRST_FRAME_EXIT": "1"}
        for name in ("NO_COLOR", "TEXTUAL_THEME", "SYNTH_API_KEY", "ENVIRONMENT_API_KEY", "TASK_APP_URL",
                     "PYTHONDONTWRITEBYTECODE"):
            env.pop(name, None)
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", SIZE[1], SIZE[0], 0, 0))
        process = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={counts}", *command],
                                   cwd=home / "project", env=env, stdin=slave, stdout=slave, stderr=slave,
                                   start_new_session=True)
        os.close(slave)
        try:
            deadline = time.monotonic() + 20 * LIMIT_S  # valgrind runs a start 50 to 100 times slower
            while process.poll() is None and time.monotonic() < deadline:
                if select.select([master], [], [], 0.5)[0]:
                    try:
                        os.read(master, 65536)
                    except OSError:
                        break  # the child closed the terminal: it is exiting
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            os.close(master)
        summary = next((line for line in counts.read_text().splitlines() if line.startswith("summary:")), None) \
            if counts.is_file() else None
        if summary is None or not (home / "first-frame-cpu").is_file():
            raise RuntimeError(f"{command[-1]}: no first frame under callgrind (exit {process.returncode})")
        return int(summary.split()[1])


def instruction_figures(commands: dict[str, list[str]], cache: Path, quick: bool) -> list[Figure]:
    """One row per command: its instructions to the first frame / the minimal app's (the fewest of
    INSTRUCTION_RUNS each), or a row saying valgrind is missing."""
    labels = [label for label in commands if label != "minimal Textual app"]
    if shutil.which("valgrind") is None:
        return [Figure(f"first paint at 160x45, `{label}` / minimal Textual app, instructions (callgrind)", None,
                       note="not measured: valgrind is not installed (apt-get install valgrind)") for label in labels]
    runs = 1 if quick else INSTRUCTION_RUNS
    counts = {label: min(instructions_to_first_frame(command, cache) for _ in range(runs))
              for label, command in commands.items()}
    base = counts["minimal Textual app"]
    say("startup: instructions to the first frame: "
        + ", ".join(f"{label} {n / 1e6:,.0f} M" for label, n in counts.items()))
    return [Figure(f"first paint at 160x45, `{label}` / minimal Textual app, instructions "
                   f"(callgrind, fewest of {runs})", counts[label] / base, "x",
                   goal="within 1.15x the minimal app (issue 38)",
                   met=counts[label] / base <= 1.15,
                   note=f"{counts[label] / 1e6:,.0f} M instructions against the minimal app's {base / 1e6:,.0f} M, "
                        f"from the interpreter's start to the first frame (a second start: the CSS cache warm)")
            for label in labels]


def script_file(text: str, suffix: str) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=suffix, delete=False) as script:
        script.write(text)
    return script.name


def run(quick: bool) -> list[Figure]:
    repeat = 3 if quick else 15
    minimal = script_file(MINIMAL_APP, "_minimal_app.py")
    clock = script_file(FIRST_FRAME_CLOCK, "_first_frame_clock.py")
    tui, demo = [sys.executable, clock, "-m", "app.cli"], [sys.executable, clock, "-m", "app.cli", "demo"]
    # label: (command, whether its cache folder is the one kept across rounds)
    commands = {"minimal Textual app": ([sys.executable, clock, minimal], False), "synth-tui": (tui, True),
                "synth-tui demo": (demo, True), "synth-tui, cold cache": (tui, False),
                "synth-tui demo, cold cache": (demo, False)}
    samples: dict[str, list[Start]] = {label: [] for label in commands}
    try:
        with tempfile.TemporaryDirectory(prefix="synth-tui-paint-cache-") as kept:
            # One untimed start of each writes its bytecode and warms the disk cache, and the
            # first runs on until it has kept its parsed CSS: a user's second run.
            one_start(tui, Path(kept), until_cached=True)
            for command, _warm in commands.values():
                one_start(command)
            # In turns, so that a busy moment of the shared machine falls on all of them alike.
            for _ in range(repeat):
                for label, (command, warm) in commands.items():
                    samples[label].append(one_start(command, Path(kept) if warm else None))
            counted = instruction_figures({label: command for label, (command, warm) in commands.items()
                                           if not label.endswith(COLD)}, Path(kept), quick)
    finally:
        os.unlink(minimal)
        os.unlink(clock)
    for label, starts in samples.items():
        say(f"startup: {label}: CPU at the first frame {', '.join(f'{start.cpu_ms:.0f}' for start in starts)} ms; "
            f"when killed {', '.join(f'{start.cpu_killed_ms:.0f}' for start in starts)} ms; "
            f"wall {', '.join(f'{start.wall_ms:.0f}' for start in starts)} ms")
    base = samples["minimal Textual app"]
    return [figure(label, limit, samples[label], base)
            for label, limit in (("synth-tui", 1.3), ("synth-tui demo", 1.6), ("synth-tui, cold cache", 1.3),
                                 ("synth-tui demo, cold cache", 1.6))] + counted


def figure(label: str, limit: float, starts: list[Start], base: list[Start]) -> Figure:
    """One command's row: the median of its rounds' CPU ratios to the minimal app at the first
    frame (the figure); the ratios of the CPU until killed and of the wall clock in the note."""
    cpu = [start.cpu_ms / floor.cpu_ms for start, floor in zip(starts, base, strict=True)]
    killed = [start.cpu_killed_ms / floor.cpu_killed_ms for start, floor in zip(starts, base, strict=True)]
    wall = [start.wall_ms / floor.wall_ms for start, floor in zip(starts, base, strict=True)]
    ratio = median(cpu)
    say(f"startup: {label} / minimal app, CPU round by round: {', '.join(f'{r:.2f}' for r in cpu)}")
    cpu_ms, base_cpu_ms = median([s.cpu_ms for s in starts]), median([s.cpu_ms for s in base])
    wall_ms, base_wall_ms = median([s.wall_ms for s in starts]), median([s.wall_ms for s in base])
    return Figure(
        f"first paint at 160x45, `{label.removesuffix(COLD)}`{' (cold CSS cache)' if label.endswith(COLD) else ''}"
        f" / minimal Textual app, CPU time (median of {len(cpu)} rounds)", ratio, "x",
        goal=f"within {limit}x the minimal app", met=None if ratio is None else ratio <= limit, samples=cpu,
        note=f"CPU time from the command's start to the header of its first screen on a pseudo-terminal: "
             f"medians {cpu_ms:.0f} ms vs the minimal app's {base_cpu_ms:.0f} ms, rounds "
             f"{min(cpu):.2f}-{max(cpu):.2f}x; CPU until killed once the frame was seen (with what the start "
             f"did after it): median ratio {median(killed) or float('nan'):.2f}x; wall clock: medians "
             f"{wall_ms:.0f} ms vs {base_wall_ms:.0f} ms, median ratio {median(wall) or float('nan'):.2f}x")


if __name__ == "__main__":
    child_main("bench_startup", run)
