"""Figure 2: events through the worker-to-log path, and whether keys still get answered.

A headless app with the dashboard's layout and stylesheet (the chart beside the EventLog)
takes ~100k synthetic JobEvents in batches of 2,000, what the dashboard's 0.1 s drain hands
over at 20,000 events/s. Each batch is posted to the screen's message queue (``call_later``)
as the dashboard's drain timer is, and the next batch is posted once it has been applied: so
the UI thread is saturated, and everything else it does (layout, compositor, key handling)
interleaves between batches as in the real app. The JobEvents are built beforehand (in the
app, the feed thread builds them): only the UI thread's work is timed.

Meanwhile a key (``k``, bound to an action that records the time) is sent every 50 ms through
the driver, as ``Pilot.press`` does (``driver.send_message``), but without Pilot's wait for
the CPU to go idle, which under a saturated UI spaces presses a second apart (too few samples).
Latency = handler time - send time.

Baseline, same run: the same events, one ``RichLog.write`` per line (the obvious alternative
widget, which renders each line to segments as it is written), same batches, same keys.
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import UTC, datetime, timedelta

from textual import events
from textual.widgets import RichLog

from app.core.api.wire import JobEvent, MetricPoint
from app.core.runs.events import is_noise
from app.core.runs.series import MetricStore
from benchmarks.bench_chart import DashboardLikeApp
from benchmarks.common import Figure, above, below, child_main, median, percentile, say
from widgets.compat.textual_compat import deliver_as_driver
from widgets.event_log import EventLog, format_event

BATCH = 2_000  # events per 0.1 s drain at the 20,000 events/s goal
KEY_EVERY_S = 0.05


def synthetic_events(count: int, seed: int = 3) -> list[JobEvent]:
    """A training run's mix: step lines, rollout batches, some warnings and errors, and 5%
    hatchet/modal noise (which the log hides), parsed as the client parses a page."""
    rng = random.Random(seed)
    start = datetime.now(UTC) - timedelta(hours=1)
    out = []
    for seq in range(1, count + 1):
        roll = rng.random()
        if roll < 0.05:
            kind, level, message = "hatchet.worker.heartbeat", "debug", f"worker {rng.randrange(8)} alive"
        elif roll < 0.08:
            kind, level, message = "rl.rollout.retry", "warning", f"rollout {seq} timed out after 30s; retrying"
        elif roll < 0.09:
            kind, level, message = "rl.rollout.failed", "error", f"task app answered 500 for seed {seq % 97}"
        elif roll < 0.5:
            kind, level = "rl.rollout.batch", "info"
            message = f"Batch {seq}: 32 rollouts, mean reward {rng.random():.3f}, 7.2 turns on average"
        else:
            kind, level = "rl.train.step", "info"
            message = (f"Step {seq}/100000: mean score {rng.random():.3f}, loss {rng.gauss(0, 0.3):.4f}, "
                       f"entropy {rng.random():.3f}")
        out.append(JobEvent.model_validate({
            "job_id": "job_bench", "seq": seq, "type": kind, "level": level, "message": message,
            "data": {"step": seq}, "created_at": (start + timedelta(milliseconds=seq)).isoformat()}))
    return out


def some_points(count: int) -> list[MetricPoint]:
    return [MetricPoint.model_validate({"name": "train.mean_score", "step": i, "value": 0.2 + 0.6 * i / count})
            for i in range(count)]


def make_log(baseline: bool):
    """The widget and how a drained batch reaches it."""
    if baseline:
        widget = RichLog(max_lines=5_000, markup=False, highlight=False, wrap=False, id="dash-log")

        def apply(batch: list[JobEvent]) -> None:
            for event in batch:
                if not is_noise(event):  # the same lines EventLog shows
                    widget.write(format_event(event))
    else:
        widget = EventLog(id="dash-log")

        def apply(batch: list[JobEvent]) -> None:
            widget.add_events(batch)
    return widget, apply


def make_app(widget) -> DashboardLikeApp:
    store = MetricStore()
    store.add(some_points(1_000))
    return DashboardLikeApp(store, log_widget=widget)


class KeyPresser:
    """Sends ``k`` every 50 ms through the driver (what Pilot.press does, without its wait for
    an idle CPU); the app's ``action_ping`` stamps when each was handled."""

    def __init__(self, app: DashboardLikeApp) -> None:
        self.app = app
        self.sent: list[float] = []
        self._stop = False
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while not self._stop:
            self.sent.append(time.perf_counter())
            deliver_as_driver(self.app, events.Key("k", "k"))  # what Pilot.press does, without its wait
            await asyncio.sleep(KEY_EVERY_S)

    async def stop(self) -> list[float]:
        self._stop = True
        if self._task is not None:
            await self._task
        for _ in range(500):  # let the last keys through
            if len(self.app.pings) >= len(self.sent):
                break
            await asyncio.sleep(0.01)
        # Keys still unhandled after the wait above are left out, not failed: not strict.
        return [(handled - pressed) * 1000 for pressed, handled in zip(self.sent, self.app.pings, strict=False)]


async def saturate(all_events: list[JobEvent], *, baseline: bool) -> dict:
    """Capacity: each batch is posted to the screen's queue (as the drain timer's callback
    is) as soon as the previous one was applied, so the UI thread does nothing but this and
    what interleaves with it (layout, compositor). Events/s = events / wall time."""
    widget, apply = make_log(baseline)
    app = make_app(widget)
    batches = [all_events[i:i + BATCH] for i in range(0, len(all_events), BATCH)]
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        done = asyncio.Event()

        def applied(batch: list[JobEvent]) -> None:
            apply(batch)
            done.set()

        started = time.perf_counter()
        for batch in batches:
            done.clear()
            app.screen.call_later(applied, batch)
            await done.wait()
        elapsed = time.perf_counter() - started
    return {"rate": len(all_events) / elapsed, "seconds": elapsed}


class Arrivals:
    """Stands in for JobFeed: the events "arrive" at ``rate`` per second from ``start``, and
    ``drain()`` hands over everything that arrived since the last drain."""

    def __init__(self, items: list[JobEvent], rate: float) -> None:
        self.items, self.rate = items, rate
        self.start = time.perf_counter()
        self.taken = 0

    def drain(self) -> list[JobEvent]:
        upto = min(len(self.items), int((time.perf_counter() - self.start) * self.rate))
        batch, self.taken = self.items[self.taken:upto], max(self.taken, upto)
        return batch


async def at_rate(all_events: list[JobEvent], rate: float, *, baseline: bool) -> dict:
    """Responsiveness: events arrive at ``rate`` and the screen drains them every 0.1 s, the
    most often the dashboard drains (it is woken when a batch starts, then waits out 0.1 s since
    its last drain: under a steady stream, this); keys are pressed throughout."""
    widget, apply = make_log(baseline)
    app = make_app(widget)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause()
        presser = KeyPresser(app)
        busy = 0.0
        finished = asyncio.Event()
        arrivals = Arrivals(all_events, rate)

        def drain() -> None:
            nonlocal busy
            batch = arrivals.drain()
            if batch:
                started = time.perf_counter()
                apply(batch)
                busy += time.perf_counter() - started
            if arrivals.taken >= len(all_events):
                finished.set()

        presser.start()
        arrivals.start = time.perf_counter()
        timer = app.screen.set_interval(0.1, drain, name="bench-drain")
        await finished.wait()
        elapsed = time.perf_counter() - arrivals.start
        timer.stop()
        latencies = await presser.stop()
    return {"rate": len(all_events) / elapsed, "seconds": elapsed, "latencies": latencies,
            "busy": busy / elapsed, "lag": elapsed - len(all_events) / rate,
            "keys_sent": len(presser.sent), "keys_handled": len(app.pings)}


async def measure(quick: bool) -> list[Figure]:
    count = 6_000 if quick else 100_000
    base_count = 2_000 if quick else 30_000
    all_events = synthetic_events(count)
    ours = await saturate(all_events, baseline=False)
    say(f"log: EventLog saturated {ours['rate']:,.0f} events/s over {count:,} events ({ours['seconds']:.2f} s)")
    base = await saturate(all_events[:base_count], baseline=True)
    say(f"log: RichLog saturated {base['rate']:,.0f} events/s over {base_count:,} events ({base['seconds']:.2f} s)")

    # Keys while 20,000 events/s arrive: EventLog for the whole run, RichLog for a shorter
    # one (it cannot keep up, so the drains grow and the run takes far longer than offered).
    rate = 20_000
    keys = await at_rate(all_events, rate, baseline=False)
    say(f"log: EventLog at {rate:,}/s offered: {keys['rate']:,.0f}/s achieved, UI busy {keys['busy']:.0%}, "
        f"keys {keys['keys_handled']}/{keys['keys_sent']}, median {median(keys['latencies']):.1f} ms")
    base_keys_count = 2_000 if quick else 20_000
    base_keys = await at_rate(all_events[:base_keys_count], rate, baseline=True)
    say(f"log: RichLog at {rate:,}/s offered ({base_keys_count:,} events): {base_keys['rate']:,.0f}/s achieved, "
        f"keys {base_keys['keys_handled']}/{base_keys['keys_sent']}, "
        f"median {median(base_keys['latencies']):.1f} ms")

    fewer = f"; baseline over the first {base_count:,} events (a rate; it would take minutes over all)"
    lat, base_lat = keys["latencies"], base_keys["latencies"]
    return [
        Figure(f"events -> EventLog, saturated, batches of {BATCH:,} ({count // 1000}k events)", ours["rate"],
               "events/s", baseline=base["rate"], baseline_label="RichLog.write per line",
               goal="> 20,000 events/s", met=above(ours["rate"], 20_000), note=f"one pass{fewer}"),
        Figure("  at 20k events/s offered, 0.1 s drain: rate achieved", keys["rate"], "events/s",
               baseline=base_keys["rate"], baseline_label=f"RichLog, {base_keys_count // 1000}k events",
               goal="keeps up (lag < 0.25 s)", met=keys["lag"] < 0.25,
               note=f"lag behind the last arrival {keys['lag']:.2f} s (RichLog {base_keys['lag']:.2f} s); UI thread "
                    f"busy {keys['busy']:.0%} applying batches (RichLog {base_keys['busy']:.0%})"),
        Figure(f"  key-to-handler latency meanwhile, median (n={len(lat)})", median(lat), "ms",
               baseline=median(base_lat), baseline_label="RichLog", goal="answers keys (< 100 ms)",
               met=below(median(lat), 100.0), samples=lat,
               note=f"keys handled {keys['keys_handled']}/{keys['keys_sent']}"),
        Figure("  key-to-handler latency meanwhile, p95", percentile(lat, 95), "ms",
               baseline=percentile(base_lat, 95), baseline_label="RichLog", goal="—"),
    ]


def run(quick: bool) -> list[Figure]:
    return asyncio.run(measure(quick))


if __name__ == "__main__":
    child_main("bench_log", run)
