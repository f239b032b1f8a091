"""Figure 3: CPU of the live dashboard watching a job, idle and while data streams in.

The backend is ``benchmarks/synthetic_backend.py`` in a separate process, so its CPU is not
counted. This process runs the real app (``SynthTuiApp`` in attach mode, headless, 160x45),
polling every 1 s, against:

- ``job_idle``: 200 events and 100 metric points already there, nothing new arrives;
- ``job_stream``: the same history, then 20 events/s and 2 metric points/s.

CPU% = this process's CPU time (every thread: the UI thread and the feed's worker thread,
``time.process_time``) over wall time, in 5 back-to-back 4 s windows after a warm-up (which
absorbs start-up, the job's history reaching the screen and the first chart draw); the figure
is their median. A window is a whole number of the dashboard's periods (the 1 s poll and
clock, the chart's 2 s redraw cadence), so each holds the same work: with 3 s windows they
held one or two chart redraws in turn, and the median of five was a two-redraw window.
Headless still runs layout and the compositor; only the terminal write is skipped.
Baseline, same run, same windows: an idle Textual app holding one Static. The per-thread
split in the notes (from /proc/self/task) says where the time goes.
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
import time

from textual.app import App, ComposeResult
from textual.widgets import Static

from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession
from app.screens.dashboard import DashboardScreen, JobContext
from app.tui import SynthTuiApp
from benchmarks.common import REPO, Figure, below, child_main, cpu_seconds, median, say, thread_cpu
from widgets.event_log import EventLog
from widgets.metric_chart import MetricChart
from widgets.metrics_grid import MetricsGrid
from widgets.plot_canvas import PlotCanvas

SIZE = (160, 45)
HISTORY = 200  # events already there when the dashboard attaches (and 100 metric points)


class IdleApp(App):
    def compose(self) -> ComposeResult:
        yield Static("idle")


def start_backend(api_key: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.synthetic_backend", "--api-key", api_key,
         "--job", f"job_idle,0,0,{HISTORY},100", "--job", f"job_stream,20,2,{HISTORY},100"],
        cwd=REPO, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline().strip() if proc.stdout else ""
    if not line.startswith("READY "):
        proc.kill()
        raise RuntimeError(f"synthetic backend did not start: {line!r}")
    return proc, line.split()[1]


async def window(app: App, warmup: float, windows: int, seconds: float, probe=None, history: int = 0) -> dict:
    async with app.run_test(size=SIZE):
        # Warm-up: until the job's history (the events already there) is on screen, then a
        # little more, so the windows hold only the steady state.
        deadline = time.monotonic() + 30
        while probe and probe(app)["events"] < history and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(warmup)
        before_probe = probe(app) if probe else {}
        threads0, wall0 = thread_cpu(), time.monotonic()
        samples = []
        for _ in range(windows):  # back-to-back windows: the median shrugs off a noisy one
            cpu_a, wall_a = cpu_seconds(), time.monotonic()
            await asyncio.sleep(seconds)
            samples.append(100 * (cpu_seconds() - cpu_a) / (time.monotonic() - wall_a))
        wall1, threads1 = time.monotonic(), thread_cpu()
        after_probe = probe(app) if probe else {}
    split = {name: threads1[name] - threads0.get(name, 0.0) for name in threads1}
    split = {name: spent for name, spent in split.items() if spent > 0.005}
    return {"cpu_pct": median(samples), "samples": samples, "wall": wall1 - wall0, "threads": split,
            "delta": {key: after_probe[key] - before_probe[key] for key in after_probe}}


class RenderClock:
    """Time spent drawing charts: MetricChart.redraw (the figure set up from the data) and
    PlotCanvas.frame_strips (plotext's matrix and the strips painted from it, built when the
    figure changed), to say what share of the dashboard's CPU the charts take; a wrapper
    costs microseconds a call. (It timed PlotextPlot.render, which the grid no longer calls
    since the charts paint through PlotCanvas: it read 0.)"""

    spent = 0.0
    _timed = ((MetricChart, "redraw"), (PlotCanvas, "frame_strips"))

    @classmethod
    def install(cls) -> None:
        for owner, name in cls._timed:
            original = getattr(owner, name)
            if getattr(original, "_clocked", False):
                continue

            def timed(self, *args, _original=original, **kwargs):  # type: ignore[no-untyped-def]
                started = time.perf_counter()
                try:
                    return _original(self, *args, **kwargs)
                finally:
                    cls.spent += time.perf_counter() - started

            timed._clocked = True  # type: ignore[attr-defined]
            setattr(owner, name, timed)


def dashboard_probe(app: App) -> dict:
    screen = app.screen
    if not isinstance(screen, DashboardScreen):
        return {"events": 0, "redraws": 0, "chart_s": RenderClock.spent}
    return {"events": screen.query_one(EventLog).total, "redraws": screen.query_one(MetricsGrid).redraws,
            "chart_s": RenderClock.spent}


def dashboard_app(url: str, api_key: str, job_id: str) -> SynthTuiApp:
    session = LaunchSession(LaunchOptions(backend=url, poll_interval=1.0), shell={"SYNTH_API_KEY": api_key})
    session.resolve()
    return SynthTuiApp(session, attach=JobContext(job_id))


def describe(result: dict) -> str:
    spread = f"windows {min(result['samples']):.1f}-{max(result['samples']):.1f}%; "
    threads = ", ".join(f"{name} {100 * s / result['wall']:.1f}%" for name, s in
                        sorted(result["threads"].items(), key=lambda kv: -kv[1]))
    delta = result["delta"]
    seen = (f"; over the windows: {delta['events']} events, {delta['redraws']} chart redraws, chart figure "
            f"builds {100 * delta['chart_s'] / result['wall']:.1f}% of a core") if delta else ""
    return f"{spread}per thread over all windows: {threads}{seen}"


async def measure(quick: bool) -> list[Figure]:
    # Full: 5 windows of 4 s (20 s) per scenario; quick: 2 of 0.8 s.
    warmup, windows, seconds = (0.3, 2, 0.8) if quick else (2.0, 5, 4.0)
    RenderClock.install()
    api_key = f"sk_bench_{secrets.token_hex(8)}"
    proc, url = start_backend(api_key)
    try:
        base = await window(IdleApp(), warmup, windows, seconds)
        say(f"cpu: idle Textual app {base['cpu_pct']:.2f}% ({describe(base)})")
        idle = await window(dashboard_app(url, api_key, "job_idle"), warmup, windows, seconds, dashboard_probe,
                            HISTORY)
        say(f"cpu: dashboard, no new data {idle['cpu_pct']:.2f}% ({describe(idle)})")
        stream = await window(dashboard_app(url, api_key, "job_stream"), warmup, windows, seconds, dashboard_probe,
                              HISTORY)
        say(f"cpu: dashboard, 20 events/s + 2 points/s {stream['cpu_pct']:.2f}% ({describe(stream)})")
    finally:
        proc.terminate()
        proc.wait(5)
    label = f"median of {windows} x {seconds:.0f} s"
    return [
        Figure(f"dashboard CPU, polled 1 s, no new data ({label})", idle["cpu_pct"], "%", baseline=base["cpu_pct"],
               baseline_label="idle app with a Static", goal="< 1% of a core", met=below(idle["cpu_pct"], 1.0),
               note=describe(idle)),
        Figure(f"dashboard CPU, 20 events/s + 2 points/s ({label})", stream["cpu_pct"], "%",
               baseline=base["cpu_pct"], baseline_label="idle app with a Static", goal="< 6% of a core",
               met=below(stream["cpu_pct"], 6.0), note=describe(stream)),
    ]


def run(quick: bool) -> list[Figure]:
    return asyncio.run(measure(quick))


if __name__ == "__main__":
    child_main("bench_cpu", run)
