"""Figure 5: requests per poll tick, and event-to-screen latency with and without SSE.

The embedded backend and the gridworld task app (``app.local.servers.start_backend`` and
``start_taskapp``) run in a helper process (``--serve``), so the backend's trainer, which keeps
a core busy, does not compete for this process's GIL: what is measured is the client's and
the dashboard's pipeline (as with ``synth-tui attach`` to a backend elsewhere; in the
interactive ``synth-tui demo`` the servers share the process and the GIL as well).

Requests per tick: one demo job watched by ``JobWatcher(poll_interval=0.2, use_sse=False)``
(``SynthClient.request_count`` / ticks, a tick being a call of ``JobWatcher._tick``, which no
longer reads the status every time; the final drain's two reads are reported apart) and,
concurrently on the same job and backend, an emulation of the SDK 0.2.22 JobStreamer's loop
(docs/wire-contract.md#sdk-jobstreamer): status on /rl, /learning, /orchestration (first that
works), events on all three, metrics on /rl and /learning: 6 requests a tick.

Latency: for each event shown, (time the dashboard's EventLog.add_events received it) minus
its ``created_at`` (the backend stamps UTC ISO times; same machine clock). The real
``SynthTuiApp`` in attach mode, headless, watches a fresh demo job with SSE (the default) and
another polling at 1 s. Events from before the dashboard's first batch (the backlog at attach
time) are left out. The dashboard offers no switch for SSE, so the polling run wraps
``LaunchSession.watch_options`` (what both front ends watch a job with) to turn SSE off. (It
patched the dashboard's ``WatchOptions`` name, which the screen stopped using when the session
came to build the options: that "polling" run streamed, and read about 10 ms.)
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from itertools import pairwise
from pathlib import Path

import httpx

from benchmarks.common import REPO, Figure, at_most, below, child_main, median, percentile, say

TERMINAL_STATUSES = {"succeeded", "failed", "cancelled", "canceled", "completed"}
TERMINAL_EVENTS = {"sft.job.completed", "rl.train.completed", "rl.job.completed", "workflow.completed",
                   "training.completed", "sft.job.failed", "rl.train.failed", "rl.job.failed", "workflow.failed",
                   "training.failed"}


# --------------------------------------------------------------------------- the servers


def serve(api_key: str, env_key: str) -> None:
    """Helper process: both servers on free ports until stdin closes."""
    from app.local.servers import start_backend, start_taskapp

    with tempfile.TemporaryDirectory() as tmp, start_taskapp(env_api_keys=[env_key]) as taskapp, \
            start_backend(api_key=api_key, db_path=Path(tmp) / "bench.sqlite3", env_api_keys=[env_key]) as backend:
        print(json.dumps({"backend": backend.url, "taskapp": taskapp.url}), flush=True)
        sys.stdin.read()


class Servers:
    def __init__(self) -> None:
        self.api_key, self.env_key = f"sk_bench_{secrets.token_hex(8)}", secrets.token_hex(32)
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.bench_requests", "--serve", self.api_key,
                                      self.env_key], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        try:
            urls = json.loads(line)
        except ValueError:
            self.stop()
            raise RuntimeError(f"the embedded servers did not start: {line!r}") from None
        self.backend, self.taskapp = urls["backend"], urls["taskapp"]

    def create_job(self, quick: bool) -> str:
        from app.commands.demo import demo_payload, load_demo_config

        config = load_demo_config()
        if quick:  # a shorter run: 1 policy update
            config["training"].update(num_epochs=1, iterations_per_epoch=1)
        payload = demo_payload(config, self.taskapp, self.backend + "/api")
        with httpx.Client(base_url=self.backend + "/api", headers={"Authorization": f"Bearer {self.api_key}"},
                          timeout=30.0) as client:
            return client.post("/rl/jobs", json=payload).raise_for_status().json()["job_id"]

    def stop(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


# --------------------------------------------------------------------------- requests per tick


async def ours_per_tick(servers: Servers, job_id: str) -> dict:
    from app.core.api.client import SynthClient
    from app.core.api.streaming import JobWatcher, WatchOptions

    at_tick: list[int] = []  # the request count as each tick starts
    async with SynthClient(servers.backend, servers.api_key) as client:
        options = WatchOptions(poll_interval=0.2, poll_timeout=600, use_sse=False)
        watcher = JobWatcher(client, job_id, options)
        tick = watcher._tick

        def counting_tick():  # type: ignore[no-untyped-def]
            at_tick.append(client.request_count)
            return tick()

        watcher._tick = counting_tick  # type: ignore[method-assign]
        async for _ in watcher.watch():
            pass
        return per_tick(at_tick, client.request_count)


def per_tick(at_tick: list[int], total: int) -> dict:
    """Requests per tick = requests between one tick's start and the next's, over the full
    ticks; what follows the last tick's start (that tick, plus the final read after a
    terminal status) is reported apart."""
    full = len(at_tick) - 1
    return {"requests": total, "ticks": len(at_tick),
            "per_tick": (at_tick[-1] - at_tick[0]) / full if full > 0 else None,
            "max_tick": max((b - a for a, b in pairwise(at_tick)), default=None),
            "last_tick": total - at_tick[-1] if at_tick else None}


class _SdkStreamer:
    """The SDK 0.2.22 JobStreamer's requests, emulated from docs/wire-contract.md#sdk-jobstreamer:
    status on the three paths until one answers a dict; events on all three paths with a cursor
    per path; metrics on /rl and /learning after the largest step seen of any metric. Errors are
    swallowed."""

    def __init__(self, client: httpx.AsyncClient, job_id: str) -> None:
        self.client = client
        self.paths = [f"/rl/jobs/{job_id}", f"/learning/jobs/{job_id}", f"/orchestration/jobs/{job_id}"]
        self.event_cursor = {path: 0 for path in self.paths}
        self.last_step: dict[str, int] = {}
        self.requests = 0

    async def get(self, path: str, params: dict | None = None) -> object:
        self.requests += 1
        try:
            response = await self.client.get(path, params=params)
            return response.json() if 200 <= response.status_code < 300 else None
        except (httpx.HTTPError, ValueError):
            return None

    async def status(self) -> str | None:
        for path in self.paths:
            body = await self.get(path)
            if isinstance(body, dict):
                return str(body.get("status") or body.get("state") or "").lower()
        return None

    async def events(self) -> bool:
        """Reads every path's new events; True when one of them ends the job."""
        terminal = False
        for path in self.paths:
            body = await self.get(f"{path}/events", {"since_seq": self.event_cursor[path], "limit": 200})
            for event in (body.get("events") or []) if isinstance(body, dict) else []:
                seq = int(event.get("seq") or 0)
                if seq <= self.event_cursor[path]:
                    continue
                self.event_cursor[path] = seq
                terminal = terminal or event.get("type") in TERMINAL_EVENTS
        return terminal

    async def metrics(self) -> None:
        after = max(self.last_step.values(), default=-1)
        for path in self.paths[:2]:
            body = await self.get(f"{path}/metrics", {"after_step": after, "limit": 200})
            for point in (body.get("points") or []) if isinstance(body, dict) else []:
                step, name = int(point.get("step") or -1), point.get("name")
                if step > self.last_step.get(name, -1):
                    self.last_step[name] = step


async def sdk_pattern_per_tick(servers: Servers, job_id: str, poll_interval: float = 0.2) -> dict:
    """The requests per tick of the SDK's streamer (_SdkStreamer) watching one job to its end."""
    at_status: list[int] = []
    async with httpx.AsyncClient(base_url=servers.backend + "/api", timeout=30.0,
                                 headers={"Authorization": f"Bearer {servers.api_key}"}) as client:
        streamer = _SdkStreamer(client, job_id)
        while True:
            at_status.append(streamer.requests)
            status = await streamer.status()
            terminal = await streamer.events()
            await streamer.metrics()
            if terminal or status in TERMINAL_STATUSES:
                break
            await asyncio.sleep(poll_interval)
    return per_tick(at_status, streamer.requests)


# --------------------------------------------------------------------------- latency


def _epoch(created_at: str | None) -> float | None:
    if not created_at:
        return None
    try:
        return datetime.fromisoformat(created_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


async def screen_latency(servers: Servers, job_id: str, *, use_sse: bool) -> dict:
    from app.core.launch.options import LaunchOptions
    from app.core.launch.session import LaunchSession
    from app.screens.dashboard import DashboardScreen, JobContext
    from app.tui import SynthTuiApp
    from widgets.event_log import EventLog

    received: list[tuple[float, float | None]] = []
    original = EventLog.add_events

    def recording(self: EventLog, events: list) -> None:
        now = time.time()
        received.extend((now, _epoch(e.created_at)) for e in events)
        original(self, events)

    EventLog.add_events = recording  # type: ignore[method-assign]
    watch_options = LaunchSession.watch_options
    if not use_sse:
        def polling_options(self: LaunchSession, **kwargs):  # type: ignore[no-untyped-def]
            return dataclasses.replace(watch_options(self, **kwargs), use_sse=False)

        LaunchSession.watch_options = polling_options  # type: ignore[method-assign]
    try:
        session = LaunchSession(LaunchOptions(backend=servers.backend, poll_interval=1.0),
                                shell={"SYNTH_API_KEY": servers.api_key})
        session.resolve()
        app = SynthTuiApp(session, attach=JobContext(job_id))
        async with app.run_test(size=(160, 45)) as pilot:
            deadline = time.monotonic() + 300
            while not (isinstance(app.screen, DashboardScreen) and app.screen.ended):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"job {job_id} did not end")
                await pilot.pause(0.1)
    finally:
        EventLog.add_events = original  # type: ignore[method-assign]
        LaunchSession.watch_options = watch_options  # type: ignore[method-assign]
    if not received:
        return {"latencies": [], "backlog": 0}
    first_batch = received[0][0]
    live = [(now - created) * 1000 for now, created in received if created is not None and created >= first_batch]
    return {"latencies": live, "backlog": len(received) - len(live)}


# --------------------------------------------------------------------------- the figures


async def measure(servers: Servers, quick: bool) -> list[Figure]:
    job = servers.create_job(quick)
    ours, sdk = await asyncio.gather(ours_per_tick(servers, job), sdk_pattern_per_tick(servers, job))
    ours_rate, sdk_rate = ours["per_tick"], sdk["per_tick"]
    say(f"requests: JobWatcher {ours_rate:.2f} per tick (max {ours['max_tick']}) over {ours['ticks']} ticks, "
        f"{ours['last_tick']} in the last tick with the final read; SDK 0.2.22 pattern {sdk_rate:.2f} per tick "
        f"(max {sdk['max_tick']}) over {sdk['ticks']} ticks")

    sse = await screen_latency(servers, servers.create_job(quick), use_sse=True)
    say(f"latency: SSE median {median(sse['latencies']) or 0:.1f} ms over {len(sse['latencies'])} events "
        f"({sse['backlog']} backlog events left out)")
    poll = await screen_latency(servers, servers.create_job(quick), use_sse=False)
    say(f"latency: polling 1 s median {median(poll['latencies']) or 0:.1f} ms over {len(poll['latencies'])} events "
        f"({poll['backlog']} backlog events left out)")
    sse_med, poll_med = median(sse["latencies"]), median(poll["latencies"])
    return [
        Figure("requests per poll tick (JobWatcher, no SSE, 0.2 s)", ours_rate, "", baseline=sdk_rate,
               baseline_label="SDK 0.2.22 pattern (emulated)", goal="<= 3", met=at_most(ours_rate, 3.0),
               note=f"mean over {ours['ticks'] - 1} full ticks, max {ours['max_tick']}; the last tick plus the "
                    f"final read after the terminal status: {ours['last_tick']} ({ours['requests']} in all); SDK "
                    f"pattern {sdk_rate:.2f} over {sdk['ticks'] - 1} full ticks, max {sdk['max_tick']}; same job, "
                    f"same backend, concurrently"),
        Figure(f"event-to-screen latency, SSE, median (n={len(sse['latencies'])})", sse_med, "ms",
               baseline=poll_med, baseline_label="polling every 1 s", goal="< 100 ms", met=below(sse_med, 100.0),
               samples=sse["latencies"], note=f"{sse['backlog']} backlog events left out"),
        Figure("  event-to-screen latency, SSE, p95", percentile(sse["latencies"], 95), "ms",
               baseline=percentile(poll["latencies"], 95), baseline_label="polling every 1 s", goal="—",
               samples=poll["latencies"], note=f"polling run: n={len(poll['latencies'])}, "
                                               f"{poll['backlog']} backlog events left out"),
    ]


def run(quick: bool) -> list[Figure]:
    servers = Servers()
    try:
        return asyncio.run(measure(servers, quick))
    finally:
        servers.stop()


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        serve(sys.argv[2], sys.argv[3])
    else:
        child_main("bench_requests", run)
