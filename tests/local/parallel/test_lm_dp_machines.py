"""Ranks on two machines (docs/scaling.md#several-machines), played on one: the backend with a
multi-machine accelerate config (num_machines 2, machine_rank 0, main_process_ip 127.0.0.1) and
`--shared-dir`, and `synth-tui ranks-host --machine-rank 1` in a process of its own as the other
machine. torchrun's real multi-node static rendezvous joins them. A job trains across both;
a rank killed on machine 1 fails its job naming it; a cancel makes the host stop its ranks;
the refusals of the flags at start."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from app.cli.dispatch import main
from app.local.parallel import launch
from app.local.parallel.launch import TOKEN_FILE, alive, free_port
from app.local.policies.base import Parallel
from app.local.servers import ServerHandle, start_backend
from support.lm_fixtures import press_payload
from support.pilot_waits import poll_until

from ..conftest import API_KEY, ENV_KEY, api_client, create_job, events_of, wait_event, wait_terminal
from .test_lm_dp import NEEDS_TRAINER, NEEDS_TWO_CORES


def two_machines_config(folder: Path, port: int) -> Path:
    config = folder / "two-machines.yaml"
    config.write_text("distributed_type: MULTI_CPU\nnum_processes: 2\nnum_machines: 2\nmachine_rank: 0\n"
                      f"main_process_ip: 127.0.0.1\nmain_process_port: {port}\nrdzv_backend: static\n")
    return config


@contextmanager
def backend_and_host(root: Path) -> Iterator[tuple[ServerHandle, Path, Any]]:
    """The backend (machine 0) and a ranks host (machine 1) sharing a folder under `root`.

    Each machine sizes its ranks' threads to its cores: played on one machine, both would take
    every core (two threads each on two cores, about 3x slower a step: worker.py pin_to_share).
    So each gets one core, as two real one-core machines would: the host runs on the last one,
    and machine 0's launch sizes its threads to one (launch.launch_env)."""
    shared = root / "shared"
    shared.mkdir()
    config = two_machines_config(root, free_port())
    log = (root / "ranks-host.log").open("wb")
    last_core = max(os.sched_getaffinity(0))
    host = subprocess.Popen([sys.executable, "-c", f"import os, sys; os.sched_setaffinity(0, {{{last_core}}}); "
                             "from app.cli.dispatch import main; sys.exit(main())",
                             "ranks-host", "--shared-dir", str(shared), "--machine-rank", "1"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with pytest.MonkeyPatch.context() as patch, \
                start_backend(api_key=API_KEY, db_path=root / "state.sqlite3", env_api_keys=[ENV_KEY],
                              policy_kind="lm", parallel=Parallel(2, str(config), shared_dir=str(shared))) as backend:
            one_core = launch.launch_env
            patch.setattr(launch, "launch_env", lambda setup, processes, _cores: one_core(setup, processes, 1))
            yield backend, shared, host
    finally:
        if host.poll() is None:
            host.send_signal(signal.SIGTERM)
        try:
            host.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(host.pid, signal.SIGKILL)
        log.close()


@pytest.fixture(scope="module")
def two_machines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerHandle, Path, Any]]:
    with backend_and_host(tmp_path_factory.mktemp("two-machines")) as started:
        yield started


def _policy(api: Any, job_id: str) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        event = next((e for e in events_of(api, job_id) if e["type"] == "rl.train.policy"), None)
        if event is None and api.get(f"/rl/jobs/{job_id}").json()["status"] in ("failed", "cancelled"):
            pytest.fail(str([e["message"] for e in events_of(api, job_id)][-3:]))
        return event["data"] if event else None

    return poll_until(found, timeout=300, what=f"the ranks of {job_id} on both machines")


def _children(pid: int) -> set[int]:
    """Every descendant of `pid` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


@NEEDS_TRAINER
@NEEDS_TWO_CORES
def test_a_job_trains_across_two_machines_and_each_machines_ranks_are_its_own(
        tiny_model: Path, press_app: ServerHandle, two_machines: tuple[ServerHandle, Path, Any]) -> None:
    backend, shared, host = two_machines
    with api_client(backend) as api:
        job_id = create_job(api, press_payload(press_app.url, tiny_model, "full", steps=3, lr=1e-2))
        policy = _policy(api, job_id)
        ranks = {r["rank"]: r for r in policy["ranks"]}
        assert policy["world_size"] == 2 and policy["backend"] == "gloo"
        assert (ranks[0]["machine"], ranks[1]["machine"]) == (0, 1)
        assert ranks[1]["pid"] in _children(host.pid)  # machine 1's rank is the ranks host's
        assert ranks[0]["pid"] not in _children(host.pid)
        folder = next(shared.iterdir())
        assert (folder / TOKEN_FILE).stat().st_mode & 0o777 == 0o600
        job = wait_terminal(api, job_id, timeout=600)
        assert job["status"] == "succeeded", (job, [e["message"] for e in events_of(api, job_id)][-4:])
        steps = [e for e in events_of(api, job_id) if e["type"] == "rl.train.step"]
        assert len(steps) == 3 and all(e["data"]["world_size"] == 2 for e in steps)
    # the job ended: its folder is gone, and with it machine 1's rank
    poll_until(lambda: not any(shared.iterdir()), timeout=30, what="the job's folder to go")
    poll_until(lambda: not alive(ranks[1]["pid"]), timeout=30, what="machine 1's rank to exit")
    assert host.poll() is None  # the host waits for the next job


@NEEDS_TRAINER
@NEEDS_TWO_CORES
def test_a_rank_killed_on_the_other_machine_fails_its_job_by_name_and_cancel_reaches_it(
        tiny_model: Path, press_app: ServerHandle, two_machines: tuple[ServerHandle, Path, Any]) -> None:
    backend, shared, host = two_machines
    with api_client(backend) as api:
        job_id = create_job(api, press_payload(press_app.url, tiny_model, "full", steps=40, lr=1e-2))
        remote = next(r for r in _policy(api, job_id)["ranks"] if r["machine"] == 1)
        poll_until(lambda: any(e["type"] == "rl.train.step" for e in events_of(api, job_id)), timeout=300,
                   what="the first step")
        os.kill(remote["pid"], signal.SIGKILL)
        job = wait_terminal(api, job_id, timeout=120)
        assert job["status"] == "failed"
        assert f"rank 1 (pid {remote['pid']}) died: SIGKILL on machine 1" in job["error"], job["error"]
        assert api.get("/health").status_code == 200
        # a new job on both machines, cancelled: the host stops its rank
        again = create_job(api, press_payload(press_app.url, tiny_model, "full", steps=40, lr=1e-2))
        remote = next(r for r in _policy(api, again)["ranks"] if r["machine"] == 1)
        assert api.post(f"/rl/jobs/{again}/cancel").status_code == 200
        assert wait_terminal(api, again, timeout=60)["status"] == "cancelled"
    poll_until(lambda: not alive(remote["pid"]), timeout=30, what="machine 1's rank to exit")
    assert host.poll() is None


@NEEDS_TRAINER
@NEEDS_TWO_CORES
def test_a_killed_ranks_host_fails_its_job_naming_its_machine(tiny_model: Path, press_app: ServerHandle,
                                                              tmp_path: Path) -> None:
    """It failed quoting gloo's internals (`pair.cc:553 … GLHF!`), issue 41 item 7: machine 1's rank,
    orphaned, writes why into the job's folder before it exits, and the backend names machine 1."""
    with backend_and_host(tmp_path) as (backend, _shared, host), api_client(backend) as api:
        job_id = create_job(api, press_payload(press_app.url, tiny_model, "full", steps=40, lr=1e-2))
        remote = next(r for r in _policy(api, job_id)["ranks"] if r["machine"] == 1)
        poll_until(lambda: any(e["type"] == "rl.train.step" for e in events_of(api, job_id)), timeout=300,
                   what="the first step")
        host.send_signal(signal.SIGKILL)
        job = wait_terminal(api, job_id, timeout=120)
        assert job["status"] == "failed"
        assert f"the ranks of machine 1 stopped: its ranks host (pid {host.pid}) is gone" in job["error"], \
            job["error"]
        assert "pair.cc" not in job["error"] and api.get("/health").status_code == 200
    poll_until(lambda: not alive(remote["pid"]), timeout=30, what="machine 1's rank to exit")


def _launchers_of(folder: Path) -> list[int]:
    """The pids whose command line names `folder` (a job's launcher and ranks name their folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if str(folder).encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@NEEDS_TRAINER
def test_a_job_cancelled_while_waiting_for_the_other_machine_leaves_nothing(
        tiny_model: Path, press_app: ServerHandle, tmp_path: Path) -> None:
    """No ranks host runs: machine 0's launcher waits at the rendezvous, and the log says what
    for. A cancel then stops it at once (not when the ranks' start times out) and the job's folder,
    token and all, goes."""
    shared = tmp_path / "shared"
    shared.mkdir()
    config = two_machines_config(tmp_path, free_port())
    with start_backend(api_key=API_KEY, db_path=tmp_path / "state.sqlite3", env_api_keys=[ENV_KEY], policy_kind="lm",
                       parallel=Parallel(2, str(config), shared_dir=str(shared))) as backend, \
            api_client(backend) as api:
        job_id = create_job(api, press_payload(press_app.url, tiny_model, "full", steps=3, lr=1e-2))
        starting = wait_event(api, job_id, "rl.train.policy.starting", timeout=60)
        assert f"synth-tui ranks-host --shared-dir {shared} --machine-rank K" in starting["message"]
        poll_until(lambda: _launchers_of(shared), timeout=60, what="machine 0's launcher")
        assert api.post(f"/rl/jobs/{job_id}/cancel").status_code == 200
        assert wait_terminal(api, job_id, timeout=30)["status"] == "cancelled"
        poll_until(lambda: not _launchers_of(shared) and not any(shared.iterdir()), timeout=30,
                   what="the launcher and the job's folder to go")


@pytest.mark.parametrize(("flags", "said"), [
    (["--shared-dir", "{tmp}"], "--shared-dir is for ranks on several machines"),
    ([], "needs --shared-dir DIR"),
    (["--shared-dir", "{tmp}/missing"], "is not a folder this user can write in"),
])
def test_the_shared_folder_flag_is_checked_at_start(flags: list[str], said: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNTH_API_KEY", "sk_test_x")
    config = two_machines_config(tmp_path, 29555)
    if "several machines" in said:  # one machine's config with --shared-dir
        config.write_text("distributed_type: MULTI_CPU\nnum_processes: 2\n")
    argv = ["backend", "--trainer", "lm", "--processes", "2", "--accelerate-config", str(config),
            *[f.format(tmp=tmp_path) for f in flags]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


def test_a_ranks_host_refuses_a_folder_it_cannot_see(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ranks-host", "--shared-dir", str(tmp_path / "nope"), "--machine-rank", "1"]) == 2
    assert "is not a folder here" in capsys.readouterr().err
    assert main(["ranks-host", "--shared-dir", str(tmp_path), "--machine-rank", "0"]) == 2  # 0 is the backend's


@pytest.mark.usefixtures("cli_process")  # a real process: the slow tier
def test_a_ranks_host_stopped_with_ctrl_c_exits_130(tmp_path: Path) -> None:
    """docs/product.md: Ctrl+C ends a server command with 130; ranks-host exited 0 (issue 41 item 7)."""
    log = tmp_path / "host.log"
    with log.open("wb") as out:
        host = subprocess.Popen([sys.executable, "-c", "import sys; from app.cli.dispatch import main; "
                                 "sys.exit(main())", "ranks-host", "--shared-dir", str(tmp_path), "--machine-rank",
                                 "1"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        poll_until(lambda: "watching" in log.read_text(), timeout=120, what="the ranks host to start")
        host.send_signal(signal.SIGINT)
        assert host.wait(timeout=60) == 130, log.read_text()
        assert "Interrupted." in log.read_text()
    finally:
        if host.poll() is None:
            host.kill()
            host.wait(timeout=10)


def test_another_machines_launch_is_the_backends_with_its_machine_rank(tmp_path: Path) -> None:
    from app.local.parallel.hosts import address_towards, machine_launch, ready_jobs
    from app.local.parallel.launch import (
        CONFIG_FILE,
        HOST_ENV,
        LAUNCH_FILE,
        MACHINE_ENV,
        SETTINGS_FILE,
        TOKEN_ENV,
        build_launch,
        write_for_other_machines,
    )

    config = two_machines_config(tmp_path, 29556)
    folder = tmp_path / "synth-tui-dp-x"
    folder.mkdir()
    launch = build_launch(Parallel(2, str(config), shared_dir=str(tmp_path)), folder, python="/py")
    assert launch.config["machine_rank"] == 0 and launch.config["num_machines"] == 2
    assert "--main_process_port" not in launch.command  # the config's port: the same on every machine
    write_for_other_machines(folder, launch, "tok-" + "x" * 40)
    assert ready_jobs(tmp_path) == []  # the settings come last: not ready before
    (folder / SETTINGS_FILE).write_text("{}")
    assert ready_jobs(tmp_path) == [folder]
    theirs = machine_launch(folder, 1, None, python="/py")
    written = json.loads((folder / "accelerate-machine-1.yaml").read_text())
    assert written == {**json.loads((folder / CONFIG_FILE).read_text()), "machine_rank": 1} == theirs.config
    assert theirs.env[MACHINE_ENV] == "1" and theirs.env[HOST_ENV] == "127.0.0.1" == address_towards("127.0.0.1")
    assert TOKEN_ENV not in theirs.env and not any("tok-" in part for part in theirs.command)
    assert "tok-" not in (folder / LAUNCH_FILE).read_text()
    for machine in (0, 2):
        with pytest.raises(ValueError, match="not one of its others"):
            machine_launch(folder, machine, None)
