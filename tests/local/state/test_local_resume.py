"""A backend killed with SIGKILL mid-job and started again on the same state file resumes the
job from its last checkpoint: it succeeds, every step's events and metrics are recorded once,
and (the run being seeded) it scores exactly what an uninterrupted run scores."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from app.commands.demo import demo_payload
from app.local.servers import ServerHandle
from support import loopback_http
from support.pilot_waits import poll_until

from ..conftest import API_KEY, ENV_KEY, api_client, create_job, events_of, seeded_demo_config, wait_terminal

CLI_MAIN = "import sys; from app.cli.dispatch import main; sys.exit(main())"  # synth-tui in a process
_LISTENING = re.compile(r"embedded backend on (http://\S+)/api")


@contextmanager
def backend_process(db: Path, home: Path, *args: str) -> Iterator[tuple[subprocess.Popen[bytes], ServerHandle]]:
    """`synth-tui backend` in a process of its own (so it can be killed), on a free port; `args`
    are more of its flags (the stand-in unless they say otherwise)."""
    log = db.with_name(f"backend-{os.urandom(3).hex()}.log")
    env = {**os.environ, "HOME": str(home), "SYNTH_API_KEY": API_KEY, "ENVIRONMENT_API_KEY": ENV_KEY,
           "PYTHONPATH": os.pathsep.join(sys.path)}
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", CLI_MAIN,
                                 "backend", "--port", "0", "--db", str(db), *(args or ("--trainer", "tabular"))],
                                stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        url = poll_until(lambda: (m := _LISTENING.search(log.read_text())) and m.group(1),
                         timeout=60, what=f"the backend to listen (its log: {log})")
        # It says its address before it listens: wait until it answers.
        poll_until(lambda: answering(url + "/api/health"), timeout=60, what="the backend to answer")
        handle = ServerHandle.__new__(ServerHandle)  # only its url is used
        handle.url = url
        yield proc, handle
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def job_killed_at_step(db: Path, home: Path, body: dict, step: int, *args: str, timeout: float = 120.0) -> str:
    """A job created on a `backend_process` (`args`: its flags) that is SIGKILLed once the job has
    recorded `step` while still running; the job's id, for the next backend on `db` to resume."""
    with backend_process(db, home, *args) as (proc, server), api_client(server) as first:
        job_id = create_job(first, body)
        poll_until(lambda: (first.get(f"/rl/jobs/{job_id}").json()["metadata"].get("step") or 0) >= step,
                   timeout=timeout, what=f"step {step}")
        status = first.get(f"/rl/jobs/{job_id}").json()["status"]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert status == "running", status  # killed mid-run, not after its end
    return str(job_id)


def answering(url: str) -> bool:
    """Whether a server just started answers `url` with a 200 yet."""
    try:
        return loopback_http.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _seeded_demo() -> dict:
    """The demo config's first 8 of 16 steps (two evaluations), seeded: the kill lands at step 3."""
    return seeded_demo_config()


def _points(api, job_id: str) -> list[tuple[int, str, float]]:
    points = api.get(f"/rl/jobs/{job_id}/metrics", params={"limit": 1000}).json()["points"]
    return [(p["step"], p["name"], p["value"]) for p in points]


@pytest.mark.usefixtures("cli_process")  # the backend as a process, killed
def test_a_job_killed_mid_run_resumes_and_records_every_step_once(tmp_path, taskapp, api, seeded_demo_job):
    config = _seeded_demo()
    total = config["training"]["num_epochs"] * config["training"]["iterations_per_epoch"]
    db = tmp_path / "state.sqlite3"
    job_id = job_killed_at_step(db, tmp_path, demo_payload(config, taskapp.url), 3)
    with backend_process(db, tmp_path) as (proc, server), api_client(server) as second:
        job = wait_terminal(second, job_id, timeout=180)
        assert job["status"] == "succeeded", job
        events = events_of(second, job_id)
        points = _points(second, job_id)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert [e["type"] for e in events].count("rl.train.resumed") == 1
    assert [e["data"]["step"] for e in events if e["type"] == "rl.train.step"] == list(range(1, total + 1))
    evals = [e["data"]["step"] for e in events if e["type"] == "rl.eval.summary"]
    assert evals == sorted(set(evals)) and evals[0] == 0 and evals[-1] == total  # step 0's once
    per_step = Counter((step, name) for step, name, _ in points)
    assert set(per_step.values()) == {1}
    assert sorted({s for s, _ in per_step}) == list(range(0, total + 1))  # 0: the evaluation before any update
    # The final policy is a folder beside the state file, the table as JSON.
    folder = Path(job["artifacts"]["model_path"])
    assert folder.parent.parent == tmp_path / "checkpoints"
    saved = json.loads((folder / "policy.json").read_text())
    assert saved["kind"] == "tabular" and saved["table"]
    assert [p.name for p in folder.parent.iterdir()] == [folder.name]  # earlier steps pruned

    # Seeded: the same config trained without a kill (once a run, shared) scores the same at every step.
    assert _points(api, seeded_demo_job[0]) == points


def _checkpoint_step(db: Path, job_id: str) -> int:
    import sqlite3

    with sqlite3.connect(db) as conn:
        (text,) = conn.execute("SELECT checkpoint FROM jobs WHERE id = ?", (job_id,)).fetchone()
    return int(json.loads(text)["step"]) if text else 0


@pytest.mark.usefixtures("cli_process")  # the backend as a process, killed
def test_save_every_2_resumes_from_the_last_saved_step_and_replays_the_rest_once(tmp_path, taskapp, api,
                                                                                 seeded_demo_job):
    """[training] save_every = 2 (docs/embedded-policy.md#checkpoints): a step is recorded at once
    and the job resumes from its last written checkpoint (an even step, or one evaluated); the
    steps recorded after it are played again, their events and metrics not stored twice."""
    config = _seeded_demo()
    config["training"]["save_every"] = 2
    total = config["training"]["iterations_per_epoch"]
    evaluated = {s for s in range(1, total + 1) if s % config["evaluation"]["every_n_iters"] == 0} | {total}
    db = tmp_path / "state.sqlite3"
    job_id = job_killed_at_step(db, tmp_path, demo_payload(config, taskapp.url), 3)
    saved = _checkpoint_step(db, job_id)
    assert saved % 2 == 0 or saved in evaluated, saved  # never an odd step that no evaluation follows
    with backend_process(db, tmp_path) as (proc, server), api_client(server) as second:
        job = wait_terminal(second, job_id, timeout=180)
        assert job["status"] == "succeeded", job
        events = events_of(second, job_id)
        points = _points(second, job_id)
    resumed = [e for e in events if e["type"] == "rl.train.resumed"]
    assert len(resumed) == 1 and resumed[0]["data"]["step"] == saved, resumed
    steps = [e["data"]["step"] for e in events if e["type"] == "rl.train.step"]
    assert steps == list(range(1, total + 1))  # the replayed steps recorded once
    recorded_before = max(s for s in steps if _index(events, s) < events.index(resumed[0]))
    assert resumed[0]["data"]["replayed_steps"] == recorded_before - saved
    assert f"after step {saved}/{total}" in resumed[0]["message"]
    assert set(Counter((step, name) for step, name, _ in points).values()) == {1}
    assert _points(api, seeded_demo_job[0]) == points  # seeded: the run without a kill, save_every 1


def _index(events: list[dict], step: int) -> int:
    return next(i for i, e in enumerate(events) if e["type"] == "rl.train.step" and e["data"]["step"] == step)
