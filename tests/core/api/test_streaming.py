"""The job watcher against a real loopback server: lossless, deduplicated, bounded."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from app.core.api.client import SynthClient
from app.core.api.errors import AuthError
from app.core.api.streaming import (
    BackendGaveUp,
    ConnectionState,
    EventCursor,
    JobWatcher,
    MetricCursor,
    NewEvents,
    NewMetrics,
    StatusChanged,
    WatchEnded,
    WatchOptions,
)
from app.core.api.wire import JobEvent, JobStatus, MetricPoint
from app.core.errors import ExitCode
from support.fakes import FaultyBackend, ScriptedJob, event, metric, training_timeline

FAST = dict(poll_interval=0.02, poll_timeout=20.0, max_backoff=0.05)


async def collect(backend: FaultyBackend, job_id: str, **options) -> list:
    opts = {**FAST, **options}
    async with SynthClient(backend.url, backend.api_key, retries=0) as client:
        return [u async for u in JobWatcher(client, job_id, WatchOptions(**opts)).watch()]


def seqs(updates: list) -> list[int]:
    return [e.seq for u in updates if isinstance(u, NewEvents) for e in u.events]


def metric_keys(updates: list) -> list[tuple[str, int]]:
    return [p.key for u in updates if isinstance(u, NewMetrics) for p in u.points]


def all_seqs(timeline) -> list[int]:
    return [e["seq"] for _, events, _ in timeline for e in events]


def all_metric_keys(timeline) -> list[tuple[str, int]]:
    return sorted((m["name"], m["step"]) for _, _, metrics in timeline for m in metrics)


async def test_a_whole_job_arrives_once_in_order(faulty_backend):
    timeline = training_timeline(steps=5)
    faulty_backend.add_job(ScriptedJob("job_a", timeline))
    updates = await collect(faulty_backend, "job_a")
    assert seqs(updates) == all_seqs(timeline)
    assert sorted(metric_keys(updates)) == all_metric_keys(timeline)
    assert ("train.mean_score", 0) in metric_keys(updates), "step-0 metrics must be kept"
    statuses = [u.status.status for u in updates if isinstance(u, StatusChanged)]
    assert statuses == ["queued", "running", "succeeded"]
    assert isinstance(updates[-1], WatchEnded) and updates[-1].status == "succeeded"
    assert updates[-1].reason == "terminal"


async def test_status_change_without_timestamps_is_still_seen(faulty_backend):
    job = faulty_backend.add_job(ScriptedJob("job_a", training_timeline(steps=2)))
    job.stamp_updates = False
    updates = await collect(faulty_backend, "job_a")
    assert [u.status.status for u in updates if isinstance(u, StatusChanged)][-1] == "succeeded"


async def test_error_status_is_terminal(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", [("running", [event(1)], []), ("error", [], [])]))
    updates = await collect(faulty_backend, "job_a")
    assert updates[-1] == WatchEnded("error", updates[-1].payload, "terminal")


async def test_poll_timeout_is_enforced(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", [("running", [event(1)], [])] * 1000))
    started = time.monotonic()
    updates = await collect(faulty_backend, "job_a", poll_interval=0.05, poll_timeout=0.5)
    elapsed = time.monotonic() - started
    assert isinstance(updates[-1], WatchEnded) and updates[-1].reason == "timeout"
    assert updates[-1].status == "running"
    assert elapsed < 5, "the watch must stop near --poll-timeout, not run on"


@pytest.mark.parametrize("faults", [
    ("500", "502", "503"),
    ("drop", "html", "empty"),
    ("dup", "shuffle", "stale", "dup"),
    ("slow",),
])
async def test_faults_lose_nothing_and_repeat_nothing(faulty_backend, faults):
    timeline = training_timeline(steps=6)
    faulty_backend.add_job(ScriptedJob("job_a", timeline))
    for route in ("events", "status", "metrics"):
        faulty_backend.inject(route, *faults)
    faulty_backend.inject("metrics", "dup")
    async with SynthClient(faulty_backend.url, faulty_backend.api_key, retries=0, timeout=1.0) as client:
        watcher = JobWatcher(client, "job_a", WatchOptions(**FAST))
        updates = [u async for u in watcher.watch()]
    assert seqs(updates) == all_seqs(timeline)
    assert sorted(metric_keys(updates)) == all_metric_keys(timeline)
    assert updates[-1].status == "succeeded"
    transport_faults = [f for f in faults if f not in ("dup", "shuffle", "stale")]
    if transport_faults:
        states = [u.reconnecting for u in updates if isinstance(u, ConnectionState)]
        assert states[0] is True and states[-1] is False


async def test_late_event_inside_a_gap_is_still_delivered(faulty_backend):
    timeline = [
        ("running", [event(1), event(2), event(4)], []),
        ("running", [event(3, message="committed late")], []),
        ("succeeded", [event(5, "rl.job.completed")], []),
    ]
    faulty_backend.add_job(ScriptedJob("job_a", timeline))
    updates = await collect(faulty_backend, "job_a")
    assert sorted(seqs(updates)) == [1, 2, 3, 4, 5]
    assert len(seqs(updates)) == 5


async def test_late_metric_for_the_newest_step_is_still_delivered(faulty_backend):
    timeline = [
        ("running", [], [metric("train.mean_score", 1, 0.1)]),
        ("running", [], [metric("eval.mean_score", 1, 0.2)]),
        ("succeeded", [], [metric("train.mean_score", 2, 0.3)]),
    ]
    faulty_backend.add_job(ScriptedJob("job_a", timeline))
    updates = await collect(faulty_backend, "job_a")
    assert sorted(metric_keys(updates)) == all_metric_keys(timeline)


async def test_resuming_from_a_cursor_repeats_nothing(faulty_backend):
    timeline = training_timeline(steps=3)
    job = faulty_backend.add_job(ScriptedJob("job_a", timeline))
    job.tick = len(timeline)
    first = await collect(faulty_backend, "job_a")
    last_seq = max(seqs(first))
    extra = [("succeeded", [event(last_seq + 1, "rl.job.completed", message="again")], [])]
    faulty_backend.add_job(ScriptedJob("job_a", timeline + extra)).tick = len(timeline) + 1
    resumed = await collect(faulty_backend, "job_a", since_seq=last_seq, after_step=3)
    assert seqs(resumed) == [last_seq + 1]
    assert metric_keys(resumed) == []


async def test_backend_restart_mid_run_loses_and_repeats_nothing():
    timeline = training_timeline(steps=30)
    backend = FaultyBackend().start()
    port = backend.port
    backend.add_job(ScriptedJob("job_a", timeline))
    got = []
    try:
        async with SynthClient(backend.url, backend.api_key, retries=0, timeout=1.0) as client:
            watcher = JobWatcher(client, "job_a", WatchOptions(**FAST))
            restarted = False
            async for update in watcher.watch():
                got.append(update)
                if not restarted and len(seqs(got)) >= 5:
                    restarted = True
                    backend.stop()
                    # Down for a while, as a real restart is; the watcher keeps polling.
                    threading.Timer(0.4, backend.start_on, args=(port,)).start()
    finally:
        backend.stop()
    assert seqs(got) == all_seqs(timeline)
    assert any(isinstance(u, ConnectionState) and u.reconnecting for u in got)


async def test_a_backend_that_stops_answering_is_given_up_after_the_bound():
    """Killed mid-run and never back: the watch ends with BackendGaveUp (exit 5) once the
    backend has been silent for give_up_after, not at --poll-timeout."""
    backend = FaultyBackend().start()
    backend.add_job(ScriptedJob("job_a", training_timeline(steps=30)))
    got: list = []
    try:
        async with SynthClient(backend.url, backend.api_key, retries=0, timeout=1.0) as client:
            watcher = JobWatcher(client, "job_a", WatchOptions(**{**FAST, "give_up_after": 0.5}))
            with pytest.raises(BackendGaveUp) as ended:
                async for update in watcher.watch():
                    got.append(update)
                    if len(seqs(got)) >= 3:
                        backend.stop()
    finally:
        backend.stop()
    assert ended.value.exit_code == ExitCode.BACKEND
    assert "has not answered for" in ended.value.message and "job_a" in ended.value.message
    assert "--give-up-after" in ended.value.hint
    assert any(isinstance(u, ConnectionState) and u.reconnecting for u in got)
    assert not any(isinstance(u, WatchEnded) for u in got)


async def test_fallback_paths_only_after_a_404(faulty_backend):
    timeline = training_timeline(steps=2)
    faulty_backend.add_job(ScriptedJob("job_a", timeline))
    await collect(faulty_backend, "job_a")
    assert faulty_backend.count("/learning/") == 0

    other = FaultyBackend().start()
    try:
        other.rl_paths_missing = True
        other.add_job(ScriptedJob("job_b", timeline))
        updates = await collect(other, "job_b")
        assert seqs(updates) == all_seqs(timeline)
        assert other.count("/rl/jobs/job_b") == 1, "the /rl path is tried once, then /learning is remembered"
    finally:
        other.stop()


def event_polls(backend: FaultyBackend, job_id: str) -> int:
    """JSON reads of the job's events: one a tick while polling (the first tick tries the
    stream instead, and the end's drain reads once more), so this counts the watcher's ticks."""
    return sum(1 for verb, path, headers, _ in backend.requests
               if path.endswith(f"/jobs/{job_id}/events") and "event-stream" not in headers.get("Accept", ""))


async def test_at_most_three_requests_per_tick(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline(steps=10)))
    await collect(faulty_backend, "job_a")
    # Besides at most three requests a tick: the stream's tries (one; a second, after its retry
    # wait, when the first failed for a moment, as on a loaded machine) and one of slack for the
    # watch's start, as before.
    stream_tries = faulty_backend.count("/events/stream")
    assert 1 <= stream_tries <= 2
    assert len(faulty_backend.requests) - stream_tries <= 3 * event_polls(faulty_backend, "job_a") + 1


async def test_a_quiet_job_reads_its_status_every_third_tick_and_a_silent_change_still_shows(faulty_backend):
    """A status read each tick was most of a quiet dashboard's CPU: a quiet tick reads only the
    events, the status every STATUS_QUIET_TICKS ticks; a change that came with no event (here a
    pause) still ends the watch within that many ticks."""

    job = faulty_backend.add_job(ScriptedJob("job_quiet", [("running", [event(1)], [])]))
    watcher_ticks_at_change = 0

    def pause_later() -> None:
        nonlocal watcher_ticks_at_change
        deadline = time.monotonic() + 20
        while event_polls(faulty_backend, "job_quiet") < 30 and time.monotonic() < deadline:
            time.sleep(0.01)
        watcher_ticks_at_change = event_polls(faulty_backend, "job_quiet")
        job.timeline = [*job.timeline, ("paused", [], [])]

    pauser = threading.Thread(target=pause_later)
    pauser.start()
    updates = await collect(faulty_backend, "job_quiet")
    pauser.join()
    ended = updates[-1]
    assert isinstance(ended, WatchEnded) and ended.status == "paused"
    status_reads = faulty_backend.count("/jobs/job_quiet", "GET") - faulty_backend.count("/jobs/job_quiet/")
    ticks = event_polls(faulty_backend, "job_quiet")
    assert status_reads <= ticks / 3 + 3, (status_reads, ticks)  # it was one a tick
    # the drain after the pause reads the events once more
    assert ticks - watcher_ticks_at_change <= 3 + 2


async def test_server_sent_events_used_and_a_broken_stream_falls_back(faulty_backend):
    timeline = training_timeline(steps=4)
    job = faulty_backend.add_job(ScriptedJob("job_a", timeline))
    job.tick = 3
    faulty_backend.sse_enabled = True
    faulty_backend.inject("stream", "drop")
    updates = await collect(faulty_backend, "job_a")
    assert seqs(updates) == all_seqs(timeline)
    streamed = [h for m, p, h, _ in faulty_backend.requests if h.get("Accept") == "text/event-stream"]
    assert streamed, "the watcher should ask for server-sent events"


async def test_a_wrong_key_stops_the_watch_with_an_auth_error(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline()))
    async with SynthClient(faulty_backend.url, "sk_wrong_key_123456", retries=0) as client:
        with pytest.raises(AuthError):
            async for _ in JobWatcher(client, "job_a", WatchOptions(**FAST)).watch():
                pass


def test_event_cursor_dedupes_and_gives_up_a_gap_after_grace():
    cursor = EventCursor(0, gap_grace_ticks=2)
    got = cursor.accept([JobEvent(seq=s) for s in (2, 1, 2, 5)])
    assert [e.seq for e in got] == [1, 2, 5]
    assert cursor.since == 2  # waits for 3 and 4
    for _ in range(3):
        cursor.end_tick()
    assert cursor.since == 5
    assert cursor.accept([JobEvent(seq=5), JobEvent(seq=6)])[0].seq == 6


def test_metric_cursor_keeps_step_zero_and_bounds_memory():
    cursor = MetricCursor()
    got = cursor.accept([MetricPoint(name="a", step=0, value=1.0), MetricPoint(name="a", step=0, value=1.0)])
    assert [p.step for p in got] == [0]
    for step in range(1, 500):
        cursor.accept([MetricPoint(name="a", step=step, value=1.0)])
    assert len(cursor._seen) <= 2


async def test_a_paused_job_ends_the_watch_and_keeps_its_state(faulty_backend):
    # SDK 0.9's streamers stop on "paused" too: the job is not over, the watch is (exit 6).
    timeline = training_timeline(steps=2)
    paused = [*timeline[:3], ("paused", [event(50, "rl.job.paused", message="paused by the operator")], [])]
    faulty_backend.add_job(ScriptedJob("job_a", paused))
    updates = await collect(faulty_backend, "job_a")
    ended = updates[-1]
    assert isinstance(ended, WatchEnded) and (ended.status, ended.reason, ended.exit_code) == ("paused", "paused", 6)
    assert 50 in seqs(updates)  # the events written with the pause are read before the watch ends
    assert faulty_backend.count("/cancel") == 0


def test_every_end_of_a_watch_has_its_exit_code():
    codes = {(status, reason): WatchEnded(status, {}, reason).exit_code
             for status, reason in [("succeeded", "terminal"), ("completed", "terminal"), ("failed", "terminal"),
                                    ("cancelled", "terminal"), ("running", "timeout"), ("paused", "paused")]}
    assert codes == {("succeeded", "terminal"): 0, ("completed", "terminal"): 0, ("failed", "terminal"): 1,
                     ("cancelled", "terminal"): 1, ("running", "timeout"): 4, ("paused", "paused"): 6}


class _StreamingJob:
    """A client whose events stream while metrics are read by polling: step k's metric is
    written when its event streams, as a real trainer writes them."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.streamed = 0
        self.status_reads = 0

    async def get_job(self, job_id, retries=None):
        self.status_reads += 1
        return JobStatus(job_id=job_id, status="running")

    async def events(self, job_id, since_seq, limit=200, retries=None):
        return []

    async def metrics(self, job_id, after_step, limit=200, retries=None):
        return [MetricPoint(name="train.mean_score", step=s, value=s / 10)
                for s in range(1, self.streamed + 1) if s > after_step]

    async def stream_events(self, job_id, since_seq):
        for step in range(1, self.steps + 1):
            await asyncio.sleep(0.05)
            self.streamed = step
            yield JobEvent(seq=step, type="rl.train.step", message=f"Step {step}")


async def test_metrics_follow_streamed_events_without_waiting_for_the_next_tick():
    """Only events stream; a step's metric must reach the chart soon after its event, not a
    whole poll interval later (the chart trailed the log by a few steps)."""
    client = _StreamingJob(steps=3)
    watcher = JobWatcher(client, "job_a", WatchOptions(poll_interval=60.0, poll_timeout=120.0))

    async def until_last_metric() -> None:
        async for update in watcher.watch():
            if isinstance(update, NewMetrics) and any(p.step == 3 for p in update.points):
                return

    await asyncio.wait_for(until_last_metric(), timeout=30)
    assert client.status_reads == 1, "the metrics came between ticks, not from a later tick"


async def test_a_quiet_job_reads_metrics_less_often_and_a_lone_metric_still_arrives(faulty_backend, monkeypatch):
    import app.core.api.streaming as streaming

    monkeypatch.setattr(streaming, "METRICS_IDLE_INTERVAL", 0.2)
    quiet = [("running", [], [])] * 10  # a quiet tick reads the status every third tick: 30 ticks each
    timeline = [("running", [event(1)], []), *quiet, ("running", [], [metric("train.mean_score", 1, 0.5)]),
                *quiet, ("succeeded", [event(2, "rl.job.completed")], [])]
    faulty_backend.add_job(ScriptedJob("job_quiet", timeline))
    updates = await collect(faulty_backend, "job_quiet")
    metric_reads, ticks = faulty_backend.count("/metrics"), event_polls(faulty_backend, "job_quiet")
    assert ticks >= 3 * len(quiet)
    assert metric_reads < ticks / 3, (metric_reads, ticks)  # one a tick before
    # The metric written without an event arrives during the quiet ticks after it, not at the end.
    order = [type(u).__name__ for u in updates if isinstance(u, (NewMetrics, StatusChanged))]
    assert order.index("NewMetrics") < len(order) - 1 and metric_keys(updates) == [("train.mean_score", 1)]


async def test_a_queued_jobs_place_moving_is_a_status_update_and_a_status_line(faulty_backend):
    from app.core.runs.events import status_line

    timeline = [("queued", [], []), ("queued", [], []), ("queued", [], []), ("running", [], []),
                ("succeeded", [event(1, "rl.job.completed")], [])]
    faulty_backend.add_job(ScriptedJob("job_q", timeline, queue_positions=[2, 2, 1, None, None]))
    updates = await collect(faulty_backend, "job_q")
    changes = [(u.status.status, u.status.queue_position) for u in updates if isinstance(u, StatusChanged)]
    assert changes == [("queued", 2), ("queued", 1), ("running", None), ("succeeded", None)]
    lines = [status_line(u.status).split("] ", 1)[1] for u in updates if isinstance(u, StatusChanged)]
    assert lines == ["status=queued #2", "status=queued #1", "status=running", "status=succeeded"]


class _OneStreamedStep(_StreamingJob):
    """Step 1's event streams a moment after the watch's first metrics read (which found
    nothing), then the job goes quiet: its metric is written with its event."""

    async def stream_events(self, job_id, since_seq):
        await asyncio.sleep(0.125)  # inside a wait between two ticks (poll_interval 0.05)
        self.streamed = 1
        yield JobEvent(seq=1, type="rl.train.step", message="Step 1")
        await asyncio.sleep(3600)


async def test_a_streamed_steps_metric_is_read_even_when_a_tick_starts_before_it_is_due(monkeypatch):
    """The read that follows streamed events waits for METRICS_FOLLOW_INTERVAL after the last
    read; a tick that began meanwhile dropped it, and the chart showed the step before the
    log's until the next step's event (issue 37: the log at step 3, the charts at step 2)."""
    import app.core.api.streaming as streaming

    monkeypatch.setattr(streaming, "METRICS_FOLLOW_INTERVAL", 0.3)
    monkeypatch.setattr(streaming, "METRICS_IDLE_INTERVAL", 3600.0)  # no read just for being idle
    client = _OneStreamedStep(steps=1)
    watcher = JobWatcher(client, "job_a", WatchOptions(poll_interval=0.05, poll_timeout=120.0))

    async def until_the_metric() -> None:
        async for update in watcher.watch():
            if isinstance(update, NewMetrics) and any(p.step == 1 for p in update.points):
                return

    await asyncio.wait_for(until_the_metric(), timeout=10)
