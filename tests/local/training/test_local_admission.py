"""Admission control of the embedded backend (docs/architecture.md#admission): at most
`max_jobs` jobs train at once, the rest wait `queued` in FIFO order with their place shown,
a cancel of a queued job is immediate, a restart keeps the queue, and rollouts in flight
across jobs stay within `max_rollouts`. Real loopback servers; every job seeded."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import Request, Response

from app.cli.parser import build_parser
from app.local.servers import ServerHandle, _bind, start_backend
from app.local.taskapps.gridworld_app import create_taskapp
from app.local.training import admission as admission_module
from app.local.training.admission import MAX_JOBS_LIMIT, MAX_ROLLOUTS_LIMIT, Admission, default_max_jobs, rollout_pool
from support.pilot_waits import poll_until

from ..conftest import API_KEY, ENV_KEY, api_client, create_job, events_of, payload, small_config, wait_terminal


class GatedTaskApp:
    """The reference gridworld, counting the rollouts in flight at it (and the most ever) and
    holding every /rollout while its gate is closed."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.in_flight = 0
        self.most = 0
        app = create_taskapp(env_api_keys=[ENV_KEY])

        @app.middleware("http")
        async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
            if request.url.path != "/rollout":
                return await call_next(request)
            self.in_flight += 1  # one event loop: no lock needed
            self.most = max(self.most, self.in_flight)
            try:
                while not self.gate.is_set():  # the server waits, not the test
                    await asyncio.sleep(0.01)
                return await call_next(request)
            finally:
                self.in_flight -= 1

        self.server = ServerHandle("task app", app, _bind("127.0.0.1", 0)).start("/")
        self.url = self.server.url


@pytest.fixture
def gated() -> Iterator[GatedTaskApp]:
    app = GatedTaskApp()
    try:
        yield app
    finally:
        app.gate.set()
        app.server.stop()


def seeded(config: dict[str, Any] | None = None, **training: Any) -> dict[str, Any]:
    return small_config(seed=7, **training) if config is None else config


def job(api: httpx.Client, job_id: str) -> dict[str, Any]:
    return api.get(f"/rl/jobs/{job_id}").json()


def first_event(api: httpx.Client, job_id: str, event_type: str) -> dict[str, Any]:
    return next(e for e in events_of(api, job_id) if e["type"] == event_type)


def running_and_held(api: httpx.Client, gated: GatedTaskApp, job_id: str) -> bool:
    return job(api, job_id)["status"] == "running" and gated.in_flight > 0


def test_jobs_beyond_max_jobs_wait_in_order_with_their_place_and_all_succeed(tmp_path: Path, gated):
    gated.gate.clear()
    with start_backend(api_key=API_KEY, db_path=tmp_path / "state.sqlite3", env_api_keys=[ENV_KEY],
                       max_jobs=1) as server, api_client(server) as api:
        first_view = api.post("/rl/jobs", json=payload(gated.url, seeded())).json()
        first = first_view["job_id"]
        assert "queue_position" not in first_view  # a slot was free: it never queued
        poll_until(lambda: running_and_held(api, gated, first), what="the first job running")
        second_view = api.post("/rl/jobs", json=payload(gated.url, seeded())).json()
        third_view = api.post("/rl/jobs", json=payload(gated.url, seeded())).json()
        second, third = second_view["job_id"], third_view["job_id"]
        # The create answer already says where the job stands, and so do GET and the list.
        assert (second_view["status"], second_view["queue_position"]) == ("queued", 1)
        assert (third_view["status"], third_view["queue_position"]) == ("queued", 2)
        assert "queue_position" not in job(api, first)
        assert [job(api, j).get("queue_position") for j in (second, third)] == [1, 2]
        listed = {j["job_id"]: j for j in api.get("/rl/jobs").json()["jobs"]}
        assert [listed[j].get("queue_position") for j in (first, second, third)] == [None, 1, 2]
        # Each queued job says why it waits, once.
        waits = [poll_until(lambda j=j: next((e for e in events_of(api, j) if e["type"] == "rl.job.queued"), None),
                            what="a queued event") for j in (second, third)]
        assert waits[0]["message"] == ("Waiting for a slot: first in the queue; the backend runs at most 1 job at "
                                       "once (--max-jobs), and 1 is running")
        assert waits[1]["message"].startswith("Waiting for a slot: 1 job ahead in the queue;")
        assert [w["data"]["queue_position"] for w in waits] == [1, 2]
        assert not any(e["type"] == "rl.job.queued" for e in events_of(api, first))

        gated.gate.set()
        assert [wait_terminal(api, j, timeout=120)["status"] for j in (first, second, third)] == ["succeeded"] * 3
        # In order: each starts after the one before ended, and says how long it waited.
        ended_first = first_event(api, first, "rl.job.completed")["created_at"]
        admitted_second = first_event(api, second, "rl.job.admitted")
        ended_second = first_event(api, second, "rl.job.completed")["created_at"]
        admitted_third = first_event(api, third, "rl.job.admitted")
        assert ended_first <= admitted_second["created_at"] <= ended_second <= admitted_third["created_at"]
        assert admitted_third["message"].startswith("A slot is free after ")
        assert all("queue_position" not in job(api, j) for j in (first, second, third))


def test_a_queued_job_is_cancelled_at_once_and_the_queue_moves_up(tmp_path: Path, gated):
    gated.gate.clear()
    with start_backend(api_key=API_KEY, db_path=tmp_path / "state.sqlite3", env_api_keys=[ENV_KEY],
                       max_jobs=1) as server, api_client(server) as api:
        first = create_job(api, payload(gated.url, seeded()))
        poll_until(lambda: running_and_held(api, gated, first), what="the first job running")
        second = create_job(api, payload(gated.url, seeded()))
        third = create_job(api, payload(gated.url, seeded()))
        assert job(api, third)["queue_position"] == 2

        answer = api.post(f"/rl/jobs/{second}/cancel")
        assert answer.status_code == 200 and answer.json()["status"] == "cancelled"
        cancelled = job(api, second)
        assert cancelled["status"] == "cancelled" and "queue_position" not in cancelled
        assert first_event(api, second, "rl.job.cancelled")["message"] == \
            "Job cancelled by request while it waited in the queue"
        assert not any(e["type"] in ("rl.job.admitted", "rl.train.started") for e in events_of(api, second))
        assert job(api, third)["queue_position"] == 1  # the queue moved up
        assert job(api, first)["status"] == "running"  # the running job was not touched

        gated.gate.set()
        assert [wait_terminal(api, j, timeout=120)["status"] for j in (first, third)] == ["succeeded"] * 2
        assert job(api, second)["status"] == "cancelled"


def test_a_restart_resumes_the_running_job_first_and_keeps_the_queue(tmp_path: Path, gated):
    db = tmp_path / "state.sqlite3"
    gated.gate.clear()
    with start_backend(api_key=API_KEY, db_path=db, env_api_keys=[ENV_KEY], max_jobs=1) as server, \
            api_client(server) as api:
        first = create_job(api, payload(gated.url, seeded()))
        poll_until(lambda: running_and_held(api, gated, first), what="the first job running")
        second = create_job(api, payload(gated.url, seeded()))
        third = create_job(api, payload(gated.url, seeded()))
    # The backend stopped with one job running and two queued; the next start resumes them.
    with start_backend(api_key=API_KEY, db_path=db, env_api_keys=[ENV_KEY], max_jobs=1) as server, \
            api_client(server) as api:
        poll_until(lambda: running_and_held(api, gated, first), what="the first job resumed")
        assert [(job(api, j)["status"], job(api, j).get("queue_position")) for j in (second, third)] == \
            [("queued", 1), ("queued", 2)]
        gated.gate.set()
        assert [wait_terminal(api, j, timeout=120)["status"] for j in (first, second, third)] == ["succeeded"] * 3
        assert first_event(api, second, "rl.job.admitted")["created_at"] <= \
            first_event(api, third, "rl.job.admitted")["created_at"]
        # Nothing lost or duplicated: one start and one end each.
        for job_id in (first, second, third):
            types = [e["type"] for e in events_of(api, job_id)]
            assert types.count("rl.job.completed") == 1 and types.count("rl.job.created") == 1
            assert types.count("rl.train.started") == 1


def test_rollouts_in_flight_across_jobs_never_exceed_max_rollouts(tmp_path: Path, gated):
    """Three jobs of 8 concurrent rollouts each would put 24 in flight; the bound is 3."""
    gated.gate.clear()
    config = small_config(seed=3, group_size=4, batch_size=2)
    config["rollout"]["max_concurrent_rollouts"] = 8
    with start_backend(api_key=API_KEY, db_path=tmp_path / "state.sqlite3", env_api_keys=[ENV_KEY],
                       max_jobs=3, max_rollouts=3) as server, api_client(server) as api:
        ids = [create_job(api, payload(gated.url, config)) for _ in range(3)]
        poll_until(lambda: all(job(api, j)["status"] == "running" for j in ids), what="three jobs running")
        poll_until(lambda: gated.in_flight == 3 or None, what="three rollouts held at the task app")
        gated.gate.set()
        assert [wait_terminal(api, j, timeout=120)["status"] for j in ids] == ["succeeded"] * 3
    assert gated.most == 3


def test_the_default_limits_are_sized_to_the_machine_and_bounded(monkeypatch: pytest.MonkeyPatch):
    assert default_max_jobs(1) == 2 and default_max_jobs(2) == 2 and default_max_jobs(6) == 6
    assert default_max_jobs(64) == 16
    monkeypatch.setattr(admission_module, "usable_cpus", lambda: 4)
    limits = Admission()
    assert (limits.max_jobs, limits.max_rollouts) == (4, 32)
    for bad in (0, -1, MAX_JOBS_LIMIT + 1, True, 2.5):
        with pytest.raises(ValueError, match="max_jobs must be a whole number from 1 to"):
            Admission(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_rollouts must be a whole number"):
        Admission(2, MAX_ROLLOUTS_LIMIT + 1)


@pytest.mark.parametrize("flag", ["--max-jobs", "--max-rollouts"])
@pytest.mark.parametrize("value", ["0", "-3", "x", "100000"])
def test_the_backend_flags_refuse_values_out_of_bounds_without_a_traceback(flag, value, capsys):
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["backend", flag, value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}:" in err and "Traceback" not in err


def test_the_backend_flags_reach_the_app():
    args = build_parser().parse_args(["backend", "--max-jobs", "3", "--max-rollouts", "12"])
    assert (args.max_jobs, args.max_rollouts) == (3, 12)
    assert build_parser().parse_args(["backend", "--max-jobs", str(MAX_JOBS_LIMIT)]).max_jobs == MAX_JOBS_LIMIT
    defaults = build_parser().parse_args(["backend"])
    assert (defaults.max_jobs, defaults.max_rollouts) == (None, None)  # sized to the machine by the backend


def test_the_rollout_client_pool_never_makes_a_rollout_wait():
    """A connection for every rollout in flight and every job's /openapi.json: none waits for
    the pool inside its time limit."""
    for limits in (Admission(2, 5), Admission(1, 1), Admission(16, 4096)):
        pool = rollout_pool(limits)
        assert pool.max_connections is not None and pool.max_connections >= limits.max_rollouts + limits.max_jobs
        assert pool.max_keepalive_connections == pool.max_connections


def test_the_jobs_list_text_shows_each_queued_jobs_place(tmp_path: Path, gated, capsys):
    from app.cli.dispatch import main

    env_file = tmp_path / ".env"
    env_file.write_text(f"SYNTH_API_KEY={API_KEY}\n")
    env_file.chmod(0o600)
    gated.gate.clear()
    with start_backend(api_key=API_KEY, db_path=tmp_path / "state.sqlite3", env_api_keys=[ENV_KEY],
                       max_jobs=1) as server, api_client(server) as api:
        first = create_job(api, payload(gated.url, seeded()))
        poll_until(lambda: running_and_held(api, gated, first), what="the first job running")
        second = create_job(api, payload(gated.url, seeded()))
        third = create_job(api, payload(gated.url, seeded()))
        code = main(["jobs", "--no-tui", "--backend", server.url, "--env-file", str(env_file), "--sort", "status"])
        out, err = capsys.readouterr()
        gated.gate.set()
        for job_id in (first, second, third):
            wait_terminal(api, job_id, timeout=120)
    assert code == 0, err
    rows = {line.split()[0]: line.split()[1:3] for line in out.splitlines()[1:]}
    assert rows[first][0] == "running"
    assert rows[second][:2] == ["queued", "#1"] and rows[third][:2] == ["queued", "#2"]
    # By status, the queue in its order: the next to start first.
    order = [line.split()[0] for line in out.splitlines()[1:]]
    assert order == [first, second, third]


async def test_lm_jobs_take_one_device_each_and_stand_in_jobs_pass_a_job_waiting_for_one():
    """On a machine with one device: an `lm` job waits for the one before it, a stand-in job
    behind it takes the free slot; the queue order holds among jobs that can start."""
    limits = Admission(3, 8, devices=lambda: 1)
    started: list[str] = []
    waits: dict[str, tuple[int, bool]] = {}

    async def job(job_id: str, device: bool) -> None:
        await limits.admit(job_id, device=device, on_wait=lambda ahead, for_device: waits.__setitem__(
            job_id, (ahead, for_device)))
        started.append(job_id)

    for job_id in ("lm1", "lm2", "tab1"):
        limits.enqueue(job_id)
    tasks = {"lm1": asyncio.create_task(job("lm1", device=True))}
    await asyncio.wait_for(tasks["lm1"], 5)  # the first `lm` job counts the devices (in a thread)
    tasks |= {j: asyncio.create_task(job(j, device=j.startswith("lm"))) for j in ("lm2", "tab1")}
    await asyncio.wait_for(tasks["tab1"], 5)
    assert started == ["lm1", "tab1"] and limits.position("lm2") == 1
    assert waits == {"lm2": (0, True)}  # it waits for the device, not for a job slot
    limits.release("lm1")
    await asyncio.wait_for(tasks["lm2"], 5)
    assert started == ["lm1", "tab1", "lm2"] and limits.running == 2 and limits.device_slots == 1


async def test_a_wait_cancelled_leaves_the_queue_and_a_released_slot_goes_first_come_first_served():
    limits = Admission(1, 4)
    for job_id in ("a", "b", "c", "d"):
        limits.enqueue(job_id, device=False)
    assert limits.running == 1 and [limits.position(j) for j in "abcd"] == [None, 1, 2, 3]
    waiters = {j: asyncio.create_task(limits.admit(j, device=False)) for j in "bcd"}
    await asyncio.sleep(0)  # let them reach their wait
    waiters["c"].cancel()
    await asyncio.gather(waiters["c"], return_exceptions=True)
    assert [limits.position(j) for j in "bd"] == [1, 2]
    limits.release("a")
    await asyncio.wait_for(waiters["b"], 5)
    assert limits.position("d") == 1 and not waiters["d"].done()
    limits.release("b")
    await asyncio.wait_for(waiters["d"], 5)
    assert limits.running == 1


@pytest.mark.usefixtures("trainer_extra")  # torch.cuda, as the backend asks it
def test_a_job_of_n_processes_takes_n_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    """lm jobs at once: one per GPU, a data-parallel job's N ranks taking N of them; one on a CPU."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    assert [admission_module.lm_devices(n) for n in (1, 2, 3, 8, 16)] == [8, 4, 2, 1, 1]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert admission_module.lm_devices(2) == 1


def test_a_job_queued_behind_one_still_starting_is_not_told_none_are_running() -> None:
    """After a restart the resumed job ahead has not started yet: the one behind it said "1 job ahead
    in the queue … and 0 are running" (issue 41 item 7). The words name the job starting first."""
    said: list[str] = []

    async def restart() -> None:
        queue = Admission(max_jobs=1, max_rollouts=4, devices=lambda: 1)
        queue.enqueue("resumed")  # launched first, has not said yet what it needs
        behind = asyncio.ensure_future(queue.admit(
            "next", device=False, on_wait=lambda ahead, device: said.append(queue.why_waiting(ahead, device))))
        await asyncio.sleep(0)
        await queue.admit("resumed", device=False)
        assert queue.running == 1 and not behind.done()
        queue.release("resumed")
        await behind

    asyncio.run(restart())
    assert said == ["the backend runs at most 1 job at once (--max-jobs): 1 job ahead of it is starting first"]
    full = Admission(max_jobs=1, max_rollouts=4)
    assert "and 0 are running" in full.why_waiting(0, False)  # first in line: nothing to blame but the limit
