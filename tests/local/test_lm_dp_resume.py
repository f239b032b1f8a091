"""A data-parallel `lm` job (`synth-tui backend --trainer lm --processes 2`) survives a
backend killed with SIGKILL: its ranks exit by their orphan guard, and the backend started
again on the same state file resumes the job from its last checkpoint, loaded by every rank,
with the same Adam moments; it succeeds with every step recorded once. The checkpoint does not
depend on the process count: a job checkpointed by one process resumes in two, and the other
way round. docs/design/data-parallel.md."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from app.local.dp_launch import alive
from app.local.servers import ServerHandle
from lm_fixtures import press_payload
from pilot_waits import poll_until

from .conftest import api_client, create_job, events_of, wait_terminal
from .test_lm_dp import NEEDS_TRAINER, NEEDS_TWO_CORES
from .test_local_resume import backend_process

STEPS = 6


def _flags(processes: int) -> tuple[str, ...]:
    return ("--trainer", "lm", "--processes", str(processes))


def _policy_events(api: Any, job_id: str) -> list[dict[str, Any]]:
    return [e for e in events_of(api, job_id) if e["type"] == "rl.train.policy"]


def _failed(api: Any, job_id: str) -> bool:
    job = api.get(f"/rl/jobs/{job_id}").json()
    if job["status"] in ("failed", "cancelled"):
        pytest.fail(f"{job['status']}: {job.get('error')}; {[e['message'] for e in events_of(api, job_id)][-4:]}")
    return False


@NEEDS_TRAINER
@NEEDS_TWO_CORES
@pytest.mark.parametrize(("before", "after_kill"), [(2, 2), (1, 2), (2, 1)])
def test_a_data_parallel_job_survives_a_backend_kill_and_resumes_on_every_rank(
        tiny_model: Path, press_app: ServerHandle, tmp_path: Path, before: int, after_kill: int) -> None:
    import torch

    db = tmp_path / "state.sqlite3"
    body = press_payload(press_app.url, tiny_model, "full", steps=STEPS, lr=1e-2)
    with backend_process(db, tmp_path, *_flags(before)) as (proc, server), api_client(server) as first:
        job_id = create_job(first, body)
        policy = poll_until(lambda: next(iter(_policy_events(first, job_id)), None) or _failed(first, job_id),
                            timeout=300, what="the policy to be ready")
        pids = [r["pid"] for r in policy["data"].get("ranks", [])]
        assert len(set(pids)) == (before if before > 1 else 0) and all(alive(pid) for pid in pids), pids
        # step 2 committed: its event is written with its checkpoint, in one transaction
        poll_until(lambda: any(e["type"] == "rl.train.step" and e["data"]["step"] >= 2
                               for e in events_of(first, job_id)) or _failed(first, job_id),
                   timeout=300, what="step 2")
        rendezvous = None
        if pids:
            argv = Path(f"/proc/{pids[0]}/cmdline").read_bytes().split(b"\0")
            rendezvous = Path(argv[argv.index(b"--rendezvous") + 1].decode())
            assert rendezvous.is_dir()
        proc.send_signal(signal.SIGKILL)
        # torchrun starts each rank in a session of its own: only their orphan guard ends them,
        # and before the killed backend is reaped (a zombie still answers kill(pid, 0))
        poll_until(lambda: not any(alive(pid) for pid in pids), timeout=10, what=f"the ranks {pids} to exit")
        assert rendezvous is None or not rendezvous.exists()  # rank 0 removed what the dead backend could not
        proc.wait(10)

    with backend_process(db, tmp_path, *_flags(after_kill)) as (proc, server), api_client(server) as second:
        job = wait_terminal(second, job_id, timeout=300)
        events = events_of(second, job_id)
        assert job["status"] == "succeeded", (job, [e["message"] for e in events][-5:])
        points = second.get(f"/rl/jobs/{job_id}/metrics", params={"limit": 1000}).json()["points"]

    resumed = [e for e in events if e["type"] == "rl.train.resumed"]
    assert len(resumed) == 1, resumed
    after = resumed[0]["data"]["step"]
    assert 2 <= after < STEPS and f"resumes after step {after}/{STEPS}" in resumed[0]["message"]
    # every step once: none lost, none played twice
    steps = [e["data"] for e in events if e["type"] == "rl.train.step"]
    assert [d["step"] for d in steps] == list(range(1, STEPS + 1))
    per_step = Counter((p["step"], p["name"]) for p in points)
    assert set(per_step.values()) == {1} and sorted({s for s, _ in per_step}) == list(range(1, STEPS + 1))
    # the steps before the kill were trained by `before` processes, the others by `after_kill`
    assert [d.get("world_size", 1) for d in steps] == [before] * after + [after_kill] * (STEPS - after)
    # the resumed run's policy: new ranks, each of which loaded the checkpoint of step `after`
    new = [e for e in events if e["type"] == "rl.train.policy" and e["seq"] > resumed[0]["seq"]]
    assert len(new) == 1, [e["seq"] for e in events if e["type"] == "rl.train.policy"]
    data = new[0]["data"]
    assert data.get("world_size", 1) == after_kill and data["stand_in"] is False
    ranks = data.get("ranks", [])
    if after_kill > 1:
        assert [r["rank"] for r in ranks] == list(range(after_kill)) and not {r["pid"] for r in ranks} & set(pids)
        assert [r.get("loaded_step") for r in ranks] == [after] * after_kill, ranks
    assert job["metadata"]["policy"]["kind"] == "lm"
    # the Adam moments went on across the kill (and the change of process count): the last
    # checkpoint's optimizer has taken every step, not only those since the resume
    saved = torch.load(Path(job["artifacts"]["model_path"]) / "optimizer.pt", weights_only=True)
    assert {float(s["step"]) for s in saved["state"].values()} == {float(STEPS)}
    poll_until(lambda: not any(alive(r["pid"]) for r in ranks), timeout=30, what="the new ranks to exit")
