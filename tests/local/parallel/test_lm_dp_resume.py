"""A data-parallel `lm` job (`synth-tui backend --trainer lm --processes 2`) survives a
backend killed with SIGKILL: its ranks exit by their orphan guard, and the backend started
again on the same state file resumes the job from its last checkpoint, loaded by every rank,
with the same Adam moments; it succeeds with every step recorded once. The checkpoint does not
depend on the process count: one job is trained by two processes, killed, resumed in one,
killed again and resumed in two (one job serves every assertion: three rank launches instead of
the five three separate jobs took). docs/design/data-parallel.md."""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from app.local.parallel.launch import alive
from app.local.servers import ServerHandle
from support.lm_fixtures import press_payload
from support.pilot_waits import poll_until

from ..conftest import api_client, create_job, events_of, wait_terminal
from ..state.test_local_resume import backend_process
from .test_lm_dp import NEEDS_TRAINER, NEEDS_TWO_CORES

STEPS = 7


def _flags(processes: int) -> tuple[str, ...]:
    return ("--trainer", "lm", "--processes", str(processes))


def _policy_events(api: Any, job_id: str) -> list[dict[str, Any]]:
    return [e for e in events_of(api, job_id) if e["type"] == "rl.train.policy"]


def _failed(api: Any, job_id: str) -> bool:
    job = api.get(f"/rl/jobs/{job_id}").json()
    if job["status"] in ("failed", "cancelled"):
        pytest.fail(f"{job['status']}: {job.get('error')}; {[e['message'] for e in events_of(api, job_id)][-4:]}")
    return False


def _run_until_killed(db: Path, home: Path, processes: int, start: Any, run: int,
                      past_step: int) -> tuple[str, list[int]]:
    """The job's `run`-th backend (1 for the first), of `processes`, on the state file: `start(api)`
    gives the job id (creating it or resuming it); once `past_step` is committed the backend is
    killed with SIGKILL, and its ranks must exit by their orphan guard (and rank 0 remove the
    rendezvous folder). The job id and the ranks' pids."""
    with backend_process(db, home, *_flags(processes)) as (proc, server), api_client(server) as api:
        job_id = start(api)
        policy = poll_until(lambda: _policy_events(api, job_id)[run - 1:run] or _failed(api, job_id),
                            timeout=300, what="the policy to be ready")[0]
        pids = [r["pid"] for r in policy["data"].get("ranks", [])]
        assert len(set(pids)) == (processes if processes > 1 else 0) and all(alive(pid) for pid in pids), pids
        # the step recorded (its checkpoint may still be being written: the next run replays it)
        poll_until(lambda: any(e["type"] == "rl.train.step" and e["data"]["step"] >= past_step
                               for e in events_of(api, job_id)) or _failed(api, job_id),
                   timeout=300, what=f"step {past_step}")
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
    return job_id, pids


@NEEDS_TRAINER
@NEEDS_TWO_CORES
def test_a_data_parallel_job_survives_backend_kills_and_resumes_on_every_rank(
        tiny_model: Path, press_app: ServerHandle, tmp_path: Path) -> None:
    """2 processes, killed after step 2; 1 process, killed after step 4; 2 processes to the end."""
    import torch

    db = tmp_path / "state.sqlite3"
    body = press_payload(press_app.url, tiny_model, "full", steps=STEPS, lr=1e-2)
    job_id, first_pids = _run_until_killed(db, tmp_path, 2, lambda api: create_job(api, body), run=1, past_step=2)
    _run_until_killed(db, tmp_path, 1, lambda api: job_id, run=2, past_step=4)
    with backend_process(db, tmp_path, *_flags(2)) as (proc, server), api_client(server) as third:
        job = wait_terminal(third, job_id, timeout=300)
        events = events_of(third, job_id)
        assert job["status"] == "succeeded", (job, [e["message"] for e in events][-5:])
        points = third.get(f"/rl/jobs/{job_id}/metrics", params={"limit": 1000}).json()["points"]

    resumed = [e for e in events if e["type"] == "rl.train.resumed"]
    assert len(resumed) == 2, resumed
    afters = [e["data"]["step"] for e in resumed]  # where each run resumed: its last saved step
    # what each killed run had recorded: a step's checkpoint is written after its record, so the
    # kill may land between the two and the next run plays that step again (docs/embedded-policy.md)
    recorded = [e["data"]["step"] + e["data"]["replayed_steps"] for e in resumed]
    assert 2 <= recorded[0] < recorded[1] < STEPS and recorded[1] >= 4, recorded
    assert all(r - 1 <= a <= r for a, r in zip(afters, recorded, strict=True)), (afters, recorded)
    assert all(f"resumes after step {after}/{STEPS}" in e["message"] for after, e in zip(afters, resumed, strict=True))
    # every step once: none lost, none played twice
    steps = [e["data"] for e in events if e["type"] == "rl.train.step"]
    assert [d["step"] for d in steps] == list(range(1, STEPS + 1))
    per_step = Counter((p["step"], p["name"]) for p in points)
    # 0: the step-0 evaluation's point (every job has one: docs/embedded-policy.md#evaluation)
    assert set(per_step.values()) == {1} and sorted({s for s, _ in per_step}) == list(range(0, STEPS + 1))
    # each run's steps were trained by its processes: 2, then 1, then 2
    assert [d.get("world_size", 1) for d in steps] == \
        [2] * recorded[0] + [1] * (recorded[1] - recorded[0]) + [2] * (STEPS - recorded[1])
    # each resumed run's policy: new ranks, each of which loaded the checkpoint of the step before
    policies = [e for e in events if e["type"] == "rl.train.policy"]
    assert len(policies) == 3 and policies[1]["seq"] > resumed[0]["seq"] and policies[2]["seq"] > resumed[1]["seq"]
    one, two = policies[1]["data"], policies[2]["data"]
    assert one.get("world_size", 1) == 1 and one["stand_in"] is False and not one.get("ranks")
    ranks = two.get("ranks", [])
    assert two["world_size"] == 2 and two["stand_in"] is False
    assert [r["rank"] for r in ranks] == [0, 1] and not {r["pid"] for r in ranks} & set(first_pids)
    assert [r.get("loaded_step") for r in ranks] == [afters[1]] * 2, ranks
    assert job["metadata"]["policy"]["kind"] == "lm"
    # the Adam moments went on across both kills (and both changes of process count): the last
    # checkpoint's optimizer has taken every step, not only those since the last resume
    # (a step whose every group scored alike leaves the optimizer alone: docs/embedded-policy.md#the-objective).
    # A replayed step's event is its first play's; the optimizer took the replay, whose rollouts may
    # differ (another process count batches other rows together: other roundings, other draws),
    # so a replayed step may learn where its first play did not, or the other way round.
    learned = [d for d in steps if d["frac_reward_zero_std"] < 1.0]
    replayed = {step for after, last in zip(afters, recorded, strict=True) for step in range(after + 1, last + 1)}
    sure = [d for d in learned if d["step"] not in replayed]  # played once: the optimizer took that play
    saved = torch.load(Path(job["artifacts"]["model_path"]) / "optimizer.pt", weights_only=True)
    taken = {int(s["step"]) for s in saved["state"].values()}
    assert len(taken) == 1 and len(sure) <= taken.pop() <= len(sure) + len(replayed), (taken, learned, replayed)
    assert len(learned) >= 2
    poll_until(lambda: not any(alive(r["pid"]) for r in ranks), timeout=30, what="the new ranks to exit")
