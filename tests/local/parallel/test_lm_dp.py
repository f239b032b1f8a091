"""The `lm` trainer data-parallel (`synth-tui backend --trainer lm --processes N`): the pure
parts (the launch command, who owns a correlation id, the batch split, the flags), and, with
the tiny model and the press task app in 2 rank processes, training, a killed rank and a
cancel. docs/design/data-parallel.md."""

from __future__ import annotations

import json
import os
import signal
import statistics
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from app.cli.dispatch import main
from app.core.runs.events import policy_badge
from app.local.parallel import launch
from app.local.parallel.launch import (
    TIMEOUT_ENV,
    alive,
    build_launch,
    check_flags,
    cores,
    death_of,
    open_port_warning,
    per_device_batch,
    root_cause,
)
from app.local.parallel.policy import RankMemo, owner_by_position, shares
from app.local.policies.base import Episode, Parallel, PolicySettings
from app.local.servers import ServerHandle, start_backend
from app.local.taskapps.press import PRESS_TOOL, SYSTEM_PROMPT, TOOL_CHOICE
from support.lm_fixtures import press_payload
from support.pilot_waits import poll_until

from ..conftest import API_KEY, ENV_KEY, api_client, create_job, events_of, wait_terminal

NEEDS_TRAINER = pytest.mark.usefixtures("trainer_extra")  # torch: the slow tier; fails, never skips, without it
NEEDS_TWO_CORES = pytest.mark.skipif(cores() < 2, reason="two rank processes need two cores")


# -- units ----------------------------------------------------------------------------------


def test_the_launch_command_and_our_accelerate_config(tmp_path: Path) -> None:
    launch = build_launch(Parallel(2), tmp_path, port=29611, python="/py")
    cmd = launch.command
    # one machine: accelerate's launcher with the rendezvous store on loopback (issue 41 item 5)
    assert cmd[:3] == ["/py", "-m", "app.local.parallel.loopback"]
    assert launch.env["GLOO_SOCKET_IFNAME"] == "lo" and open_port_warning(launch) is None
    assert cmd[cmd.index("--num_processes") + 1] == "2" and cmd[cmd.index("--main_process_port") + 1] == "29611"
    assert cmd[cmd.index("--module"):] == ["--module", "app.local.parallel.worker", "--rendezvous", str(tmp_path)]
    assert cmd[cmd.index("--monitor_interval") + 1] == "0.2"  # torchrun sees a dead rank within 0.2 s
    config = Path(cmd[cmd.index("--config_file") + 1])
    assert config.parent == tmp_path
    written = json.loads(config.read_text())  # JSON is YAML: accelerate reads it as such
    assert written == launch.config
    # torchrun's launcher (MULTI_GPU, use_cpu false); the ranks then pick MULTI_CPU and gloo
    assert written["distributed_type"] == "MULTI_GPU" and written["use_cpu"] is False
    assert launch.env["ACCELERATE_USE_CPU"] == "true" and launch.env["OMP_NUM_THREADS"] == str(max(1, cores() // 2))


def test_several_machines_meet_on_the_configs_port_and_are_warned(tmp_path: Path) -> None:
    config = tmp_path / "two.yaml"
    config.write_text("distributed_type: MULTI_CPU\nnum_machines: 2\nmachine_rank: 0\n"
                      "main_process_ip: 10.0.0.5\nmain_process_port: 29555\n", encoding="utf-8")
    shared = tmp_path / "shared"
    shared.mkdir()
    launch = build_launch(Parallel(2, accelerate_config=str(config), shared_dir=str(shared)), shared, python="/py")
    assert launch.command[:3] == ["/py", "-m", "accelerate.commands.launch"]  # the other machines reach its store
    assert "--main_process_port" not in launch.command and "GLOO_SOCKET_IFNAME" not in launch.env
    warning = open_port_warning(launch)
    assert warning is not None and "10.0.0.5:29555" in warning and "firewall" in warning


@NEEDS_TRAINER
def test_the_loopback_launcher_serves_the_rendezvous_store_on_loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's TCPStore listens on every interface whatever host it is given: anyone on the machine
    (or the network) could join with TCPStore(host, port).set(...). Ours listens on 127.0.0.1."""
    from datetime import timedelta

    from torch.distributed import TCPStore
    from torch.distributed.elastic.rendezvous import static_tcp_rendezvous as static

    from app.local.parallel.loopback import bind_store_to_loopback, loopback_socket

    with loopback_socket(0) as probe:
        port = probe.getsockname()[1]
    monkeypatch.setattr(static, "TCPStore", static.TCPStore)  # restored after the test
    bind_store_to_loopback()
    rendezvous = static.StaticTCPRendezvous("127.0.0.1", port, 0, 1, "job", 30)
    info = rendezvous.next_rendezvous()
    client = TCPStore("127.0.0.1", port, 1, False, timedelta(seconds=10))
    static.PrefixStore("job", client).set("k", "v")
    assert info.store.get("k") == b"v"  # the store serves
    assert listening_on(port) == {"127.0.0.1"}


def listening_on(port: int) -> set[str]:
    """The local addresses on which something listens on TCP `port` (from /proc/net/tcp and tcp6)."""
    return {address for address, at, _ in _listening() if at == port}


def listening_of(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket process `pid` listens on."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return {(address, port) for address, port, inode in _listening() if inode in inodes}


def _listening() -> list[tuple[str, int, str]]:
    found = []
    for name in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{name}").read_text().splitlines()[1:]:
            fields = line.split()
            address, _, hex_port = fields[1].rpartition(":")
            if fields[3] == "0A":
                found.append((_address(address), int(hex_port, 16), fields[9]))
    return found


def _address(hexed: str) -> str:
    raw = bytes.fromhex(hexed)
    if len(raw) == 4:
        return ".".join(str(b) for b in raw[::-1])
    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]  # /proc prints each 32-bit word in host order
    ip6 = b"".join(words)
    if ip6[:12] == b"\0" * 10 + b"\xff\xff":
        return ".".join(str(b) for b in ip6[12:])
    import ipaddress
    return str(ipaddress.IPv6Address(ip6))


def test_a_training_rollout_is_served_by_the_rank_that_trains_its_place() -> None:
    # 2 groups x 8 over 2 ranks: places 0-7 on rank 0, 8-15 on rank 1
    assert owner_by_position("trace_job_ab12:rl-3-0-0a1b2c3d4e5f", 8, 2) == 0
    assert owner_by_position("trace_job_ab12:rl-3-7-0a1b2c3d4e5f", 8, 2) == 0
    assert owner_by_position("trace_job_ab12:rl-3-8-0a1b2c3d4e5f", 8, 2) == 1
    assert owner_by_position("trace_job_ab12:rl-12-15-0a1b2c3d4e5f", 8, 2) == 1
    # evaluations and callers outside the job: no place (the least-loaded rank takes them)
    assert owner_by_position("trace_job_ab12:eval-3-1-0a1b2c3d4e5f", 8, 2) is None
    assert owner_by_position("someone", 8, 2) is None
    episodes = [Episode([RankMemo(i // 4, f"c{i}", f"k{i}")], float(i)) for i in range(8)]
    split = shares([episodes[:4], episodes[4:]], 2)
    assert [[p for p, _ in s] for s in split] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_the_ranks_step_figures_are_summed_and_the_restart_warning_passed_on_once() -> None:
    from types import SimpleNamespace

    from app.local.parallel.policy import DistributedLmPolicy

    warning = {"type": "rl.train.policy.warning", "level": "warning", "message": "An episode restarted", "data": {}}

    def answer(restarts: float, events: list[dict[str, Any]]) -> dict[str, Any]:
        return {"loss": 0.0, "entropy": 1.0, "extra": {"episode_restarts": restarts, "unfinished_calls": 0.0},
                "events": events, "allreduce_s": 0.01}

    policy = SimpleNamespace(world=2, restart_warned=False)
    first = DistributedLmPolicy._merged(policy, [answer(2.0, [warning]), answer(1.0, [warning])], 1.0)  # type: ignore[arg-type]
    assert first.extra["episode_restarts"] == 3.0 and first.events == [warning]  # each rank's own step figure
    later = DistributedLmPolicy._merged(policy, [answer(0.0, []), answer(1.0, [warning])], 1.0)  # type: ignore[arg-type]
    assert later.extra["episode_restarts"] == 1.0 and later.events == []  # the job was warned already


def test_the_ranks_token_counts_are_summed_and_the_entropy_weighted_by_sampled_tokens() -> None:
    """Issue 39: counts are sums; the entropy is the mean over every rank's sampled positions
    (rank 0 alone is not the step's); tokens/s add up (the ranks generate side by side)."""
    from types import SimpleNamespace

    from app.local.parallel.policy import DistributedLmPolicy

    def answer(sampled: float, forced: float, entropy: float, rate: float) -> dict[str, Any]:
        return {"loss": 0.0, "entropy": entropy, "events": [], "allreduce_s": 0.01,
                "extra": {"completion_tokens": sampled + forced, "sampled_tokens": sampled, "forced_tokens": forced,
                          "entropy_tokens": sampled, "generation_tokens_per_s": rate, "generation_seconds": 1.0}}

    policy = SimpleNamespace(world=2, restart_warned=False)
    merged = DistributedLmPolicy._merged(policy, [answer(2.0, 38.0, 1.0, 2.0), answer(6.0, 114.0, 0.2, 6.0)],  # type: ignore[arg-type]
                                         3.0)
    extra = merged.extra
    assert (extra["sampled_tokens"], extra["forced_tokens"], extra["completion_tokens"]) == (8.0, 152.0, 160.0)
    assert merged.entropy == pytest.approx((2 * 1.0 + 6 * 0.2) / 8)
    assert extra["generation_tokens_per_s"] == pytest.approx(8.0)


def test_a_batch_that_does_not_split_evenly_is_refused() -> None:
    assert per_device_batch(2, 8, 2) == 8
    assert per_device_batch(1, 4, 4) == 1
    with pytest.raises(ValueError, match=r"3 group\(s\) x 3 rollouts = 9 episodes cannot be split evenly over 2"):
        per_device_batch(3, 3, 2)


def test_the_flags_are_checked(tmp_path: Path) -> None:
    assert check_flags("lm", 1, None) is None and check_flags("tabular", 1, None) is None
    assert "needs --trainer lm" in (check_flags("tabular", 2, None) or "")
    assert check_flags("auto", 2, None) is None  # auto with several processes means lm
    assert f"more than the {cores()} cores" in (check_flags("lm", cores() + 1, None) or "")
    assert "with --processes N (N > 1) only" in (check_flags("lm", 1, "x.yaml") or "")


ZERO2 = "distributed_type: DEEPSPEED\nnum_processes: 2\nmixed_precision: bf16\ndeepspeed_config:\n  zero_stage: 2\n"
ZERO3 = "distributed_type: DEEPSPEED\nnum_processes: 4\nmixed_precision: bf16\ndeepspeed_config:\n  zero_stage: 3\n"
FSDP = "distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n  fsdp_version: 2\n"
SHARDED = "shards the model's parameters across the ranks"


@pytest.mark.usefixtures("trainer_extra")  # the refusal asks torch whether there is a GPU
@pytest.mark.parametrize(("text", "vllm", "said"), [
    (None, False, "no such file"),
    ("- a\n- b\n", False, "mapping"),
    ("a: [b\n", False, "YAML"),
    ("distributed_type: MULTI_GPU\nnum_processes: 2\n", False, "no CUDA GPU was found"),
    ("distributed_type: MULTI_CPU\nnum_processes: 4\n", False, "num_processes"),
    # ZeRO-2 is accepted: only this machine's lack of a GPU stops it
    (ZERO2, False, "DeepSpeed ZeRO-2 and bf16 mixed precision were asked"),
    # sharded parameters need a vLLM server: said first, before fixes (num_processes, a GPU)
    # that would only lead to it, with the fix
    (ZERO3, False, f"DeepSpeed ZeRO-3 ({{config}}) {SHARDED}"),
    (FSDP, False, f"FSDP 2 ({{config}}) {SHARDED}"),
    # with one, only this machine's lack of a GPU stops them
    (ZERO3, True, "DeepSpeed ZeRO-3, bf16 mixed precision and vLLM generation (server) were asked"),
    (FSDP, True, "FSDP 2 and vLLM generation (server) were asked"),
])
def test_an_accelerate_config_that_cannot_run_here_is_refused_at_start(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        text: str | None, vllm: bool, said: str) -> None:
    monkeypatch.setenv("SYNTH_API_KEY", "sk_test_x")
    config = tmp_path / "accelerate.yaml"
    if text is not None:
        config.write_text(text)
    server = ["--vllm-server", "http://127.0.0.1:8000"] if vllm else []
    assert main(["backend", "--trainer", "lm", "--processes", "2", "--accelerate-config", str(config), *server]) == 2
    err = capsys.readouterr().err
    assert said.format(config=config) in err and "Traceback" not in err
    if SHARDED in said:
        assert "add --vllm-server URL" in err and "or use DeepSpeed ZeRO-2" in err


def test_a_cpu_config_of_the_users_is_launched_as_ours(tmp_path: Path) -> None:
    """A MULTI_CPU file given to accelerate itself would start one process: the config we
    launch with is always written from the user's, read strictly."""
    user = tmp_path / "cpu.yaml"
    user.write_text("distributed_type: MULTI_CPU\nnum_processes: 2\n")
    (tmp_path / "r").mkdir()
    launch = build_launch(Parallel(2, str(user)), tmp_path / "r", port=29612, python="/py")
    assert launch.config["distributed_type"] == "MULTI_GPU" and launch.config["use_cpu"] is False
    assert launch.env["ACCELERATE_USE_CPU"] == "true"
    assert launch.command[launch.command.index("--config_file") + 1] == str(tmp_path / "r" / "accelerate.yaml")


def test_the_backend_command_refuses_bad_flags_with_exit_2(capsys: pytest.CaptureFixture[str],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNTH_API_KEY", "sk_test_x")
    assert main(["backend", "--trainer", "tabular", "--processes", "2"]) == 2
    assert "needs --trainer lm" in capsys.readouterr().err
    assert main(["backend", "--trainer", "lm", "--processes", str(cores() + 1)]) == 2
    assert "cores this backend may use" in capsys.readouterr().err
    assert main(["backend", "--trainer", "lm", "--processes", "0"]) == 2  # argparse: not from 1


def test_a_rank_death_is_named_from_torchruns_root_cause() -> None:
    log = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
app.local.parallel.worker FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-05_14:01:02
  host      : box
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 4242)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-05_14:01:02
  host      : box
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 4343)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4343
============================================================"""
    assert root_cause(log) == (1, -9, 4343)
    assert death_of(1, 4343, -9) == "rank 1 (pid 4343) died: SIGKILL"
    assert death_of(0, 7, 1) == "rank 0 (pid 7) died: exit code 1"
    assert root_cause("no failure here") is None


def test_the_dashboard_badge_says_lm_times_n() -> None:
    from app.core.api.wire import JobEvent

    def badge(data: dict[str, Any]) -> tuple[str, bool] | None:
        return policy_badge([JobEvent(seq=1, type="rl.train.policy", message="", data=data)])

    assert badge({"policy": "lm", "stand_in": False, "world_size": 2}) == ("lm × 2", False)
    assert badge({"policy": "lm", "stand_in": False}) == ("lm", False)  # one process: as before
    assert badge({"policy": "lm", "stand_in": False, "world_size": 1}) == ("lm", False)


# -- two rank processes ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def dp_backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    """One backend for the module's multi-process tests: its jobs run one after another."""
    db = tmp_path_factory.mktemp("dp-backend") / "state.sqlite3"
    with start_backend(api_key=API_KEY, db_path=db, env_api_keys=[ENV_KEY], policy_kind="lm",
                       parallel=Parallel(2)) as backend:
        yield backend


def _payload(task_url: str, model: Path, steps: int) -> dict[str, Any]:
    return press_payload(task_url, model, "full", steps=steps, lr=1e-2)


def _ranks(api: Any, job_id: str, timeout: float = 240) -> list[dict[str, Any]]:
    event = poll_until(lambda: next((e for e in events_of(api, job_id) if e["type"] == "rl.train.policy"), None)
                       or (api.get(f"/rl/jobs/{job_id}").json()["status"] in ("failed", "cancelled") and
                           pytest.fail(str([e["message"] for e in events_of(api, job_id)][-3:]))),
                       timeout=timeout, what=f"the ranks of {job_id} to be ready")
    ranks: list[dict[str, Any]] = event["data"]["ranks"]
    return ranks


def _a_job_past_its_first_step(api: Any, press_app: ServerHandle, tiny_model: Path) -> tuple[str, list[int]]:
    """A long job, once its first step is done: its id and its ranks' pids."""
    job_id = create_job(api, _payload(press_app.url, tiny_model, 40))
    pids = [r["pid"] for r in _ranks(api, job_id)]
    poll_until(lambda: any(e["type"] == "rl.train.step" for e in events_of(api, job_id)), timeout=240,
               what="the first step")
    return job_id, pids



def _holds_torch(pid: int) -> bool:
    try:
        return "/torch/lib/libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@NEEDS_TRAINER
@NEEDS_TWO_CORES
def test_two_processes_train_the_tiny_model_and_its_score_rises(tiny_model: Path, press_app: ServerHandle,
                                                                dp_backend: ServerHandle) -> None:
    steps = 8
    with api_client(dp_backend) as api:
        job_id = create_job(api, _payload(press_app.url, tiny_model, steps))
        ranks = _ranks(api, job_id)
        pids = [r["pid"] for r in ranks]
        # two rank processes, neither the backend, hold torch at the same time
        assert len(set(pids)) == 2 and os.getpid() not in pids
        assert all(_holds_torch(pid) for pid in pids), pids
        # the launcher's rendezvous store, gloo's and the ranks' own ports: loopback only (issue 41 item 5)
        launcher = int(Path(f"/proc/{pids[0]}/stat").read_text().rpartition(")")[2].split()[1])
        ports = {pid: listening_of(pid) for pid in [launcher, *pids]}
        assert ports[launcher] and all(ports[pid] for pid in pids), ports
        assert {address for found in ports.values() for address, _ in found} == {"127.0.0.1"}, ports
        job = wait_terminal(api, job_id, timeout=600)
        events = events_of(api, job_id)
        assert job["status"] == "succeeded", (job, [e["message"] for e in events][-5:])
        policy = next(e for e in events if e["type"] == "rl.train.policy")["data"]
        assert policy["world_size"] == 2 and policy["backend"] == "gloo" and policy["stand_in"] is False
        assert [r["rank"] for r in policy["ranks"]] == [0, 1]
        assert all(r["device"] == "cpu" and r["threads"] >= 1 for r in policy["ranks"])
        assert job["metadata"]["policy"]["kind"] == "lm"
        points = api.get(f"/rl/jobs/{job_id}/metrics", params={"limit": 1000}).json()["points"]
    train = [p["value"] for p in points if p["name"] == "train.mean_score"]
    assert len(train) == steps
    first, last = sum(train[:3]) / 3, sum(train[-3:]) / 3
    assert last - first >= 0.3, train
    step_data = [e["data"] for e in events if e["type"] == "rl.train.step"]
    assert all(d["world_size"] == 2 and d["allreduce_s"] > 0 for d in step_data), step_data[-1]
    assert all(d["rank0_generation_tokens_per_s"] > 0 and d["rank1_generation_tokens_per_s"] > 0 for d in step_data)
    assert "train.allreduce_s" in {p["name"] for p in points}
    # the job ended: its ranks are gone
    poll_until(lambda: not any(alive(pid) for pid in pids), timeout=30, what="the ranks to exit")
    print(f"\n2 processes: GRPO step (update) median of steps 2+: "
          f"{statistics.median(d['step_seconds'] for d in step_data[1:]):.3f} s; all: "
          f"{[d['step_seconds'] for d in step_data]}; allreduce_s: {[d['allreduce_s'] for d in step_data]}")


@NEEDS_TRAINER
@NEEDS_TWO_CORES
def test_a_killed_rank_fails_its_job_by_name_and_cancel_stops_every_rank(tiny_model: Path, press_app: ServerHandle,
                                                                         dp_backend: ServerHandle) -> None:
    with api_client(dp_backend) as api:
        job_id, pids = _a_job_past_its_first_step(api, press_app, tiny_model)
        os.kill(pids[1], signal.SIGKILL)
        job = wait_terminal(api, job_id, timeout=60)
        assert job["status"] == "failed"
        died = f"rank 1 (pid {pids[1]}) died: SIGKILL"
        assert died in job["error"], job["error"]
        assert any(died in e["message"] and e["level"] == "error" for e in events_of(api, job_id))
        poll_until(lambda: not any(alive(pid) for pid in pids), timeout=30, what="the other rank to exit")
        # the backend goes on: it answers, and trains a new job
        assert api.get("/health").status_code == 200
        again = create_job(api, _payload(press_app.url, tiny_model, 40))
        new_pids = [r["pid"] for r in _ranks(api, again)]
        assert api.post(f"/rl/jobs/{again}/cancel").status_code == 200
        assert wait_terminal(api, again, timeout=30)["status"] == "cancelled"
        poll_until(lambda: not any(alive(pid) for pid in new_pids), timeout=30, what="both ranks to exit")


@NEEDS_TRAINER
@NEEDS_TWO_CORES
def test_a_stopped_rank_is_named_hung_after_the_collective_timeout(tiny_model: Path, press_app: ServerHandle,
                                                                   dp_backend: ServerHandle,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TIMEOUT_ENV, "15")  # read by the ranks (launched now) and the backend
    # A stopped rank cannot act on SIGTERM: stopping the group waits out its whole grace (10 s)
    # before the SIGKILL this test waits for. The same path, with a second's grace.
    monkeypatch.setattr(launch, "STOP_GRACE_S", 1.0)
    with api_client(dp_backend) as api:
        job_id, pids = _a_job_past_its_first_step(api, press_app, tiny_model)
        os.kill(pids[1], signal.SIGSTOP)
        try:
            job = wait_terminal(api, job_id, timeout=120)
            assert job["status"] == "failed"
            assert f"rank 1 (pid {pids[1]}) hung" in job["error"], job["error"]
            assert api.get("/health").status_code == 200
            # both ranks are stopped, the stopped one too (SIGKILL after the grace)
            poll_until(lambda: not any(alive(pid) for pid in pids), timeout=60, what="both ranks to exit")
        finally:
            if alive(pids[1]):
                os.kill(pids[1], signal.SIGKILL)


@NEEDS_TRAINER
@NEEDS_TWO_CORES
def test_a_group_split_between_ranks_is_one_group_and_every_rank_saves_into_the_store_folder(
        tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """3 groups of 2 over 2 ranks: rank 0 trains episodes 0-2, rank 1 episodes 3-5, so the middle
    group straddles them. TRL gathers the rewards in rank order before it groups them: with each
    episode in its place, the two groups of equal scores are the zero-std ones (4 of 6 samples);
    any episode out of place across a group's edge breaks one. Step 1's episodes were played on
    the ranks that train them (training ids); step 2's by whichever rank was least loaded, so
    half of them are shipped to the other rank for the update.

    Then the same ranks save (one rank launch serves both halves: each costs about 10 s of two
    processes importing torch). A save is a collective (under ZeRO-3/FSDP the weights are
    gathered and each rank writes its optimizer shards): every rank is called at once with the
    checkpoint store's temporary folder; rank 0 writes the checkpoint, private, which a
    one-process policy resumes from."""
    import random
    import stat

    import torch

    from app.local.parallel.policy import DistributedLmPolicy
    from app.local.policies.lm.policy import LmPolicy
    from app.local.state.checkpoints import Checkpoints

    settings = PolicySettings(model=str(tiny_model), learning_rate=1e-2, seed=0, total_steps=2, batch_size=3,
                              group_size=2, options={"trainer_mode": "full", "max_tokens": 48})
    policy = DistributedLmPolicy(settings, Parallel(2))
    calls: list[tuple[int, str, Any]] = []
    real = policy._post

    def spied(rank: int, path: str, body: dict[str, Any], timeout: float = 3600.0) -> dict[str, Any]:
        calls.append((rank, path, body.get("folder")))
        return real(rank, path, body, timeout)  # the real call: the rank updates or saves

    monkeypatch.setattr(policy, "_post", spied)
    scores = [1.0, 0.0, 0.5, 0.5, 0.25, 0.25]  # the straddling group and the last: zero std
    rng = random.Random(0)
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "Press A."}]
    try:
        for step, ids in enumerate(([f"j:rl-0-{i}-ab{i}" for i in range(6)], [f"j:eval-{i}" for i in range(6)])):
            acts = [policy.act(messages, [PRESS_TOOL], TOOL_CHOICE, cid, rng) for cid in ids]
            ranks = [a.memo.rank for a in acts]
            assert ranks == ([0, 0, 0, 1, 1, 1] if step == 0 else [0, 1, 0, 1, 0, 1]), ranks
            groups = [[Episode([acts[i].memo], scores[i]), Episode([acts[i + 1].memo], scores[i + 1])]
                      for i in (0, 2, 4)]
            stats = policy.update(groups)
            assert stats.extra["reward_mean"] == pytest.approx(statistics.fmean(scores))
            # the mean of the groups' stds (issue 39): 0.7071, 0 and 0
            assert stats.extra["reward_std"] == pytest.approx(statistics.stdev(scores[:2]) / 3, abs=1e-4)
            assert stats.extra["frac_reward_zero_std"] == pytest.approx(4 / 6), stats.extra
        target = Checkpoints(tmp_path / "checkpoints").save("job_dp", 2, policy)
    finally:
        policy.close()
    saves = [(rank, folder) for rank, path, folder in calls if path == "/save"]
    assert sorted(rank for rank, _ in saves) == [0, 1]
    folders = {folder for _, folder in saves}
    assert len(folders) == 1 and Path(folders.pop()).name.startswith(".tmp-000002-")  # the store's, renamed after
    names = {p.name for p in target.iterdir()}
    assert {"policy.json", "model.safetensors", "optimizer.pt", "tokenizer_config.json"} <= names, names
    assert "training_args.bin" not in names and "engine-state" not in names  # DDP: optimizer.pt
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in target.iterdir())
    saved = torch.load(target / "optimizer.pt", weights_only=True)
    assert {float(s["step"]) for s in saved["state"].values()} == {2.0}  # each step had a group to learn from
    # the same checkpoint in one process (one group a step: its batch): the moments go on
    one = LmPolicy(replace(settings, batch_size=1))
    one.load(target)
    assert one.steps_done == 2
    rng = random.Random(7)
    try:
        one.update([[Episode([one.act(messages, [PRESS_TOOL], TOOL_CHOICE, f"c{i}", rng).memo], float(i))
                     for i in range(2)]])
        assert one.training is not None
        steps = {float(s["step"]) for s in one.training.trainer.optimizer.state_dict()["state"].values()}
    finally:
        one.close()
    assert steps == {3.0}
