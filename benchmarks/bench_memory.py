"""Figure 4: resident memory after 1M events through the dashboard's path.

A headless app with the dashboard's layout (the MetricsGrid beside the EventLog, whose Log
keeps at most 5,000 lines and whose deque keeps the last 20,000 events) takes a MetricStore
of 100k points and 1M JobEvents (parsed from dicts as the client parses a page) in batches of
2,000, yielding to the event loop between batches so the UI renders as it goes. RSS is VmRSS
from /proc/self/status, after a gc.collect(), before and after; the peak (VmHWM) is noted.

Baseline, same run: the RSS of a bare Textual app (one Static), measured in a fresh process
that imports only Textual, so the figure is not inflated by what this process loaded.
"""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

from benchmarks.common import REPO, Figure, below, child_main, peak_rss_mb, rss_mb, say

BATCH = 2_000


async def bare_rss() -> float:
    from textual.app import App, ComposeResult
    from textual.widgets import Static

    class Bare(App):
        def compose(self) -> ComposeResult:
            yield Static("bare")

    async with Bare().run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        gc.collect()
        return rss_mb()


def event_dicts(start: int, count: int, base: datetime) -> list[dict]:
    return [{"job_id": "job_bench", "seq": seq, "type": "rl.train.step" if seq % 20 else "hatchet.task.heartbeat",
             "level": "warning" if seq % 33 == 0 else "info",
             "message": f"Step {seq}: mean score 0.{seq % 1000:03d}, loss -0.{seq % 97:04d}, entropy 0.53",
             "data": {"step": seq, "total_steps": 1_000_000},
             "created_at": (base + timedelta(milliseconds=seq)).isoformat()}
            for seq in range(start, start + count)]


async def settle(app, limit: float = 10.0) -> None:
    """Wait until the app's workers (the Log's width workers) are done, so what is measured
    is what the dashboard keeps, not a backlog of work in flight."""
    deadline = time.monotonic() + limit
    while app.workers and time.monotonic() < deadline:
        await asyncio.sleep(0.005)


async def dashboard_rss(events: int, points: int) -> dict:
    from app.core.api.wire import JobEvent, MetricPoint
    from app.core.runs.series import MetricStore
    from benchmarks.bench_chart import DashboardLikeApp
    from widgets.event_log import EventLog
    from widgets.metrics_grid import MetricsGrid

    store = MetricStore()
    app = DashboardLikeApp(store)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        gc.collect()
        before = rss_mb()
        chart, log = app.query_one(MetricsGrid), app.query_one(EventLog)
        for start in range(0, points, 1_000):
            store.add([MetricPoint.model_validate({"name": "train.mean_score", "step": step, "value": step / points})
                       for step in range(start, min(points, start + 1_000))])
        chart.data_changed()
        base = datetime.now(UTC)
        for number, start in enumerate(range(1, events + 1, BATCH)):
            batch = [JobEvent.model_validate(item) for item in event_dicts(start, min(BATCH, events + 1 - start), base)]
            log.add_events(batch)
            # Between drains the UI thread renders and runs the Log's own follow-ups (each
            # write_lines starts a thread worker that measures the new lines' width and
            # reports back through the UI thread): give it a turn after every batch.
            await asyncio.sleep(0)
            if number % 10 == 0:
                await settle(app)
        await settle(app)
        await pilot.pause()
        gc.collect()
        after = rss_mb()
        kept, lines = len(log.kept), log.log_view.line_count
    return {"before": before, "after": after, "peak": peak_rss_mb(), "kept": kept, "lines": lines}


def run(quick: bool) -> list[Figure]:
    events, points = (50_000, 10_000) if quick else (1_000_000, 100_000)
    bare = subprocess.run([sys.executable, "-m", "benchmarks.bench_memory", "--bare"], cwd=REPO,
                          capture_output=True, text=True, check=True)
    bare_mb = json.loads(bare.stdout.strip().splitlines()[-1])["rss_mb"]
    say(f"memory: bare Textual app {bare_mb:.1f} MB")
    result = asyncio.run(dashboard_rss(events, points))
    say(f"memory: dashboard path {result['before']:.1f} MB before, {result['after']:.1f} MB after {events:,} events "
        f"and {points:,} points (peak {result['peak']:.1f} MB; {result['kept']:,} events kept, "
        f"{result['lines']:,} log lines)")
    label = f"{events // 1_000_000}M" if events >= 1_000_000 else f"{events // 1000}k"
    return [
        Figure(f"RSS after {label} events + {points // 1000}k points", result["after"], "MB", baseline=bare_mb,
               baseline_label="bare Textual app", goal="< 150 MB", met=below(result["after"], 150.0),
               note=f"before: {result['before']:.1f} MB; peak (VmHWM) {result['peak']:.1f} MB; kept "
                    f"{result['kept']:,} events, {result['lines']:,} log lines"),
        Figure(f"  RSS growth over the {label} events", result["after"] - result["before"], "MB",
               goal="bounded", note="after - before, same process"),
    ]


if __name__ == "__main__":
    if "--bare" in sys.argv:
        print(json.dumps({"rss_mb": asyncio.run(bare_rss())}))
    else:
        child_main("bench_memory", run)
