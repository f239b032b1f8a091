"""`synth-tui ranks-host --shared-dir DIR --machine-rank K`: the ranks of a data-parallel `lm`
job that run on a machine other than the backend's (docs/scaling.md#several-machines).

The backend makes each job's folder in the shared folder (launch.write_for_other_machines):
its accelerate config (machine_rank 0), the launcher's environment, the job's token (0600) and,
last, the job's settings. This host sees the folder, writes the same config with its own
machine_rank, and starts `accelerate launch` on it (in a session of its own, like the backend's
launcher) with the token in the environment; its ranks serve the backend on this machine's
address and write their rendezvous files beside the others'. When the folder goes (the job
ended: the backend removes it) the host stops its ranks; when its launcher ends first, it writes
why (torchrun's root cause) into the folder for the backend to name the rank.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.local.parallel.accelerate import accelerate_launch_command
from app.local.parallel.launch import (
    CONFIG_FILE,
    FOLDER_PREFIX,
    HOST_ENV,
    LAUNCH_FILE,
    MACHINE_ENV,
    SETTINGS_FILE,
    TOKEN_FILE,
    WORKER_MODULE,
    Launch,
    RankGroup,
    RankInfo,
    cores,
    machine_exit_file,
    open_port_warning,
    read_ranks,
    root_cause,
)
from app.local.policies.base import write_json_atomically

POLL_S = 0.5


@dataclass
class HostedJob:
    folder: Path
    group: RankGroup


def address_towards(ip: str) -> str:
    """This machine's address on the route to `ip` (no packet is sent: a UDP socket's connect
    only picks the route). Loopback for a loopback ip."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect((ip, 9))
            return str(sock.getsockname()[0])
        except OSError:
            return socket.gethostbyname(socket.gethostname())


def machine_launch(folder: Path, machine: int, host: str | None, python: str = sys.executable) -> Launch:
    """The launch of this machine's ranks of the job in `folder`: the backend's config with this
    machine's machine_rank, the backend's environment (this machine's cores), this host's address."""
    config: dict[str, Any] = json.loads((folder / CONFIG_FILE).read_text(encoding="utf-8"))
    machines, processes = int(config.get("num_machines", 1)), int(config["num_processes"])
    if not 0 < machine < machines:
        raise ValueError(f"the job in {folder.name} runs on {machines} machine(s): machine_rank {machine} is not "
                         f"one of its others (1 to {machines - 1})")
    mine = {**config, "machine_rank": machine}
    path = folder / f"accelerate-machine-{machine}.yaml"
    path.write_text(json.dumps(mine, indent=1), encoding="utf-8")  # JSON is YAML
    env = dict(json.loads((folder / LAUNCH_FILE).read_text(encoding="utf-8"))["env"])
    env["OMP_NUM_THREADS"] = str(max(cores() // max(processes // machines, 1), 1))
    env[MACHINE_ENV] = str(machine)
    env[HOST_ENV] = host or address_towards(str(config.get("main_process_ip") or "127.0.0.1"))
    command = accelerate_launch_command(python, path, processes, None, [WORKER_MODULE, "--rendezvous", str(folder)],
                                        launcher_args=["--monitor_interval", "0.2"])
    return Launch(command, env, mine)


def ready_jobs(shared: Path) -> list[Path]:
    """The jobs' folders whose settings are written (the backend writes them last)."""
    return sorted(p for p in shared.glob(f"{FOLDER_PREFIX}*")
                  if (p / SETTINGS_FILE).is_file() and (p / TOKEN_FILE).is_file() and (p / LAUNCH_FILE).is_file())


class RanksHost:
    """Starts this machine's ranks of each job that appears in the shared folder; stops them when
    the job's folder goes; says why when they end first."""

    def __init__(self, shared: Path, machine: int, host: str | None = None,
                 say: Callable[[str], None] = print) -> None:
        self.shared = shared
        self.machine = machine
        self.host = host
        self.say = say
        self.running: dict[Path, HostedJob] = {}
        self.seen: set[Path] = set()
        self.stopping = threading.Event()

    def run(self) -> None:
        self.say(f"ranks host for machine {self.machine}: watching {self.shared} (Ctrl+C stops it and its ranks)")
        try:
            while not self.stopping.wait(POLL_S):
                self.tick()
        finally:
            for job in list(self.running.values()):
                self._stop(job, "this ranks host is stopping")

    def tick(self) -> None:
        for folder in ready_jobs(self.shared):
            if folder not in self.seen:
                self.seen.add(folder)
                if not (folder / machine_exit_file(self.machine)).exists():  # ended under an earlier host
                    self._start(folder)
        for job in list(self.running.values()):
            if not job.folder.is_dir():
                self._stop(job, "the job ended")
            elif job.group.proc is not None and job.group.proc.poll() is not None:
                self._ended(job)
        self.seen &= {p for p in self.seen if p.is_dir()}

    def _start(self, folder: Path) -> None:
        try:
            launch = machine_launch(folder, self.machine, self.host)
            token = (folder / TOKEN_FILE).read_text(encoding="utf-8").strip()
        except (OSError, ValueError, KeyError) as exc:
            self.say(f"{folder.name}: not started: {exc}")
            return
        local = int(launch.config["num_processes"]) // int(launch.config["num_machines"])
        group = RankGroup(local, folder, launch, log_name=f"launcher-machine-{self.machine}.log",
                          machine=self.machine)
        try:
            group.start(token)
        except OSError as exc:  # the job's folder went meanwhile, or the launcher cannot start
            self.say(f"{folder.name}: not started: {exc}")
            return
        assert group.proc is not None
        self.running[folder] = HostedJob(folder, group)
        self.say(f"{folder.name}: started {local} rank(s) of machine {self.machine} on {launch.env[HOST_ENV]} "
                 f"(launcher pid {group.proc.pid}); {open_port_warning(launch)}")

    def _stop(self, job: HostedJob, why: str) -> None:
        job.group.ranks = self._ranks(job.folder)  # stop() signals this machine's among them
        job.group.stop()
        self.running.pop(job.folder, None)
        self.say(f"{job.folder.name}: stopped machine {self.machine}'s ranks ({why})")

    def _ended(self, job: HostedJob) -> None:
        proc = job.group.proc
        assert proc is not None
        log = job.group.log_path.read_text(encoding="utf-8", errors="replace") if job.group.log_path.exists() else ""
        cause = root_cause(log)
        said = {"machine": self.machine, "exitcode": proc.returncode, "cause": list(cause) if cause else None}
        if job.folder.is_dir():
            write_json_atomically(job.folder / machine_exit_file(self.machine), said)
        self.running.pop(job.folder, None)
        self.say(f"{job.folder.name}: machine {self.machine}'s ranks ended (launcher exit code {proc.returncode})")

    @staticmethod
    def _ranks(folder: Path) -> list[RankInfo]:
        try:
            return read_ranks(folder)
        except (OSError, ValueError, KeyError):
            return []


def wait_forever_until_signalled(host: RanksHost) -> bool:
    """Run the host in this thread; SIGTERM and Ctrl+C stop it (and its ranks) cleanly. True when
    Ctrl+C stopped it: the command then exits 130, as every server command (docs/product.md)."""
    import signal

    def stop(signum: int, frame: Any) -> None:
        host.stopping.set()

    before = signal.signal(signal.SIGTERM, stop)
    try:
        host.run()
    except KeyboardInterrupt:
        host.stopping.set()
        return True
    finally:
        signal.signal(signal.SIGTERM, before)
    return False
