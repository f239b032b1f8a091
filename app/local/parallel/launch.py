"""Start, watch and stop the rank processes of a data-parallel `lm` job (`--processes N`).

The ranks are `python -m app.local.parallel.worker` launched by `accelerate launch` (torchrun
underneath): gloo on CPU. Each rank writes `rank-<r>.json` into the job's private rendezvous
folder once it serves its loopback port (worker.py). The backend process keeps the HTTP
server, the job store and the events; policy.DistributedLmPolicy talks to the ranks.

`build_launch` is the ONE place where the accelerate config and the launch command are made
(a GPU layout plugs in there). docs/design/data-parallel.md.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.errors import ConfigError, UsageError
from app.core.paths import open_private
from app.core.processes import signal_group
from app.local.parallel.accelerate import (
    ACCELERATE_LAUNCHER,
    AccelerateSetup,
    accelerate_launch_command,
    accelerate_yaml,
    check_processes,
    launch_env,
    read_accelerate_config,
    refuse_without_gpu,
    sharded_parameters,
)
from app.local.parallel.vllm import VllmPlan, refuse_colocated
from app.local.policies.base import Parallel

TOKEN_ENV = "SYNTH_TUI_DP_TOKEN"  # the per-job secret every call to a rank carries (header TOKEN_HEADER)
TOKEN_HEADER = "X-Synth-Tui-Rank-Token"
BACKEND_PID_ENV = "SYNTH_TUI_DP_BACKEND_PID"  # the ranks' orphan guard watches it
TIMEOUT_ENV = "SYNTH_TUI_DP_TIMEOUT_S"  # the collectives' timeout (a hung rank is found after it)
DEFAULT_TIMEOUT_S = 300
READY_TIMEOUT_S = 600.0  # imports, the model and grammar compilers, N times on shared cores
STOP_GRACE_S = 10.0
SETTINGS_FILE = "settings.json"
LOG_FILE = "launcher.log"
CONFIG_FILE = "accelerate.yaml"
# Several machines (docs/scaling.md#several-machines): the job's folder is on a file system every
# machine shares; each other machine's `synth-tui ranks-host` starts that machine's ranks from it.
TOKEN_FILE = "token"  # the job's token (0600) for the other machines' ranks: never on a command line
LAUNCH_FILE = "launch.json"  # the launcher's environment (no secret in it)
HOST_ENV = "SYNTH_TUI_DP_HOST"  # the address a rank serves on, and the backend reaches it at
MACHINE_ENV = "SYNTH_TUI_DP_MACHINE"  # the machine_rank of the machine a rank runs on (0: the backend's)
LOOPBACK = "127.0.0.1"


FOLDER_PREFIX = "synth-tui-dp-"


def write_for_other_machines(rendezvous: Path, launch: Launch, token: str) -> None:
    """The token (0600) and the launcher's environment, for the other machines' ranks hosts."""
    with open_private(rendezvous / TOKEN_FILE, "w", encoding="utf-8") as handle:
        handle.write(token)
    (rendezvous / LAUNCH_FILE).write_text(json.dumps({"env": launch.env}), encoding="utf-8")


def machine_exit_file(machine: int) -> str:
    """What another machine's ranks host writes when its launcher ends: {machine, exitcode, cause}."""
    return f"machine-{machine}.exit.json"


class LaunchError(RuntimeError):
    """The ranks could not be started (the message says why, with the launcher's last words)."""


def cores() -> int:
    """The cores this process may use (its affinity), which the ranks share."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def per_device_batch(batch_size: int, group_size: int, processes: int) -> int:
    """Each rank's share of a step's B*G episodes; refused unless it divides evenly."""
    total = batch_size * group_size
    if processes < 1 or total % processes:
        raise ValueError(f"a step's {batch_size} group(s) x {group_size} rollouts = {total} episodes cannot be split "
                         f"evenly over {processes} processes: choose batch_size * group_size divisible by "
                         f"{processes}, or another --processes")
    return total // processes


def check_flags(policy_kind: str, processes: int, accelerate_config: str | None,
                vllm_server: str | None = None, vllm_colocate: float | None = None) -> str | None:
    """Why `synth-tui backend`'s --processes / --accelerate-config / --vllm-server /
    --vllm-colocate cannot be used, or None. The config file's content (and --shared-dir with it),
    this machine's share of the ranks, the GPU and vllm are checked by `launch_setup`."""
    if processes < 1:
        return f"--processes must be 1 or more (got {processes})"
    if processes > 1 and policy_kind not in ("lm", "auto"):  # auto, N processes: lm (commands/foreground)
        return (f"--processes {processes} trains the language model in several processes: it needs --trainer lm "
                f"(got --trainer {policy_kind})")
    if vllm_server is not None and vllm_colocate is not None:
        return ("--vllm-server and --vllm-colocate are two places to generate: choose one (a vLLM server on GPUs of "
                "its own, or vLLM inside the trainer on its GPU)")
    for flag, value in (("--vllm-server", vllm_server), ("--vllm-colocate", vllm_colocate)):
        if value is not None and policy_kind not in ("lm", "auto"):
            return f"{flag} generates for the language model: it needs --trainer lm (got --trainer {policy_kind})"
    if processes > cores() and accelerate_config is None:
        return (f"--processes {processes} is more than the {cores()} cores this backend may use; each process "
                f"needs a core of its own (choose at most {cores()})")
    if accelerate_config is not None and processes == 1:
        return "--accelerate-config is used with --processes N (N > 1) only"
    return None


def vllm_plan(vllm_server: str | None, vllm_colocate: float | None = None) -> VllmPlan:
    """The generation plan of `--vllm-server URL` or `--vllm-colocate [FRACTION]` (neither: the
    model's own forward passes)."""
    if vllm_colocate is not None:
        if vllm_server is not None:
            raise UsageError("--vllm-server and --vllm-colocate cannot both be given.", "choose one of them")
        try:
            return VllmPlan("colocate", gpu_memory_utilization=vllm_colocate)
        except ConfigError as exc:
            raise UsageError(f"--vllm-colocate {vllm_colocate:g}: {exc.message}.",
                             "e.g. --vllm-colocate 0.3 (TRL's default share of the GPU's memory)") from None
    if vllm_server is None:
        return VllmPlan()
    try:
        return VllmPlan("server", vllm_server)
    except ConfigError as exc:
        shown = f" {vllm_server!r}" if "@" not in vllm_server else ""  # user:password@ is never echoed
        raise UsageError(f"--vllm-server{shown} is not a vLLM server's http(s) URL.",
                         "e.g. --vllm-server http://127.0.0.1:8000 (where `trl vllm-serve` listens)") from exc


def launch_setup(parallel: Parallel) -> AccelerateSetup | None:
    """The user's accelerate config read strictly (None: none given, this machine's CPU layout),
    with the generation plan checked against this machine. Raises AccelerateConfigError (each
    field named), UsageError (ZeRO-3 or FSDP without vLLM; colocated vLLM without vllm installed) or
    NoGpuError (a GPU layout or vLLM, no GPU here); all are usage errors with their fixes."""
    plan = vllm_plan(parallel.vllm_server, parallel.vllm_colocate)
    layout = None
    if parallel.accelerate_config is not None:
        layout = read_accelerate_config(parallel.accelerate_config)
        sharded = sharded_parameters(layout)
        if sharded is not None and plan.mode == "off":
            # Said first, before the GPU check: a GPU would not make this layout run without vLLM.
            raise UsageError(f"{sharded} ({parallel.accelerate_config}) shards the model's parameters across the "
                             "ranks, so a rank cannot generate its episodes from its shard (each forward pass would "
                             "be a collective): it needs vLLM to generate",
                             hint="add --vllm-server URL (a `trl vllm-serve` on GPUs of its own; docs/scaling.md) or "
                                  "--vllm-colocate (vLLM on each rank's GPU), "
                                  "or use DeepSpeed ZeRO-2 (configs/accelerate/deepspeed-zero2.yaml), which keeps the "
                                  "whole model on every GPU")
    refuse_without_gpu(layout, plan)
    if plan.mode == "colocate":
        refuse_colocated(plan)
    if layout is not None:
        check_processes(layout, parallel.processes)
        here = -(-parallel.processes // layout.num_machines)  # this machine's share of the ranks
        if layout.on_cpu and here > cores():
            raise UsageError(f"{here} of the {parallel.processes} processes would run on this machine, which has "
                             f"{cores()} cores for them; each process needs a core of its own",
                             hint=f"choose at most {cores() * layout.num_machines} processes")
    check_shared_dir(parallel, layout)
    return layout


def check_shared_dir(parallel: Parallel, layout: AccelerateSetup | None) -> None:
    """Several machines need --shared-dir (the jobs' folders, on a file system they all share);
    one machine has no use for it."""
    several = layout is not None and layout.multi_node
    shared = parallel.shared_dir
    if layout is not None and several and not shared:
        raise UsageError(f"{parallel.accelerate_config} spreads the ranks over {layout.num_machines} machines "
                         "(num_machines): the backend needs --shared-dir DIR, a folder on a file system every "
                         "machine mounts at the same path",
                         hint="e.g. --shared-dir /nfs/synth-tui; then on each other machine: synth-tui ranks-host "
                              "--shared-dir /nfs/synth-tui --machine-rank K")
    if shared and not several:
        raise UsageError("--shared-dir is for ranks on several machines (an accelerate config with "
                         "num_machines > 1); one machine keeps its jobs' folders private in /tmp",
                         hint="leave --shared-dir out, or give --accelerate-config a multi-machine file")
    if shared and not (Path(shared).is_dir() and os.access(shared, os.W_OK | os.X_OK)):
        raise UsageError(f"--shared-dir {shared} is not a folder this user can write in",
                         hint="create it on the shared file system (mkdir -p), with the same path on every machine")


def collective_timeout_s() -> int:
    try:
        return max(10, int(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)))
    except ValueError:
        return DEFAULT_TIMEOUT_S


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Launch:
    command: list[str]
    env: dict[str, str]
    config: dict[str, Any]  # what was written to CONFIG_FILE


WORKER_MODULE = "app.local.parallel.worker"
LOOPBACK_LAUNCHER = "app.local.parallel.loopback"  # accelerate's launcher, the rendezvous store on loopback


def build_launch(parallel: Parallel, rendezvous: Path, *, port: int | None = None,
                 python: str = sys.executable) -> Launch:
    """The accelerate config and the `accelerate launch` command of N ranks: the one place
    they are made (app/local/parallel/accelerate.py writes each layout).

    We always write the config we launch with, from the user's (read strictly) or from this
    machine's CPU layout: on CPU that is `distributed_type: MULTI_GPU` with `use_cpu: false`
    (accelerate's torchrun launcher; `use_cpu: true` would start ONE process) and
    ACCELERATE_USE_CPU=true in the ranks' environment, with which they pick gloo."""
    setup = launch_setup(parallel)  # read again: the file may have changed since the backend started
    processes = parallel.processes
    config = accelerate_yaml(setup, processes)
    config_path = rendezvous / CONFIG_FILE
    config_path.write_text(json.dumps(config, indent=1), encoding="utf-8")  # JSON is YAML
    # Several machines meet at the config's main_process_port; one machine takes a free port.
    rendezvous_port = None if setup is not None and setup.multi_node else (port or free_port())
    one_machine = rendezvous_port is not None
    command = accelerate_launch_command(python, config_path, processes, rendezvous_port,
                                        [WORKER_MODULE, "--rendezvous", str(rendezvous)],
                                        launcher_args=["--monitor_interval", "0.2"],
                                        # one machine: the rendezvous store on loopback (docs/hardening.md#8)
                                        launcher=LOOPBACK_LAUNCHER if one_machine else ACCELERATE_LAUNCHER)
    env = {**launch_env(setup, processes, cores()), "TOKENIZERS_PARALLELISM": "false"}
    if one_machine and (setup is None or setup.on_cpu):
        env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo's own connections between the ranks: loopback too
    return Launch(command, env, config)


def open_port_warning(launch: Launch) -> str | None:
    """What a multi-machine job says when it starts: its rendezvous port takes anyone who reaches it."""
    if int(launch.config.get("num_machines", 1) or 1) < 2:
        return None
    port = launch.config.get("main_process_port") or 29500  # accelerate's default
    return (f"the ranks meet on {launch.config.get('main_process_ip')}:{port}, which torch serves on every "
            f"interface without a key: only the job's machines may reach that port (a firewall rule; "
            f"docs/scaling.md#several-machines)")


@dataclass(frozen=True)
class RankInfo:
    rank: int
    pid: int  # on its machine
    port: int
    device: str
    threads: int
    backend: str
    host: str = LOOPBACK  # where the backend reaches it
    machine: int = 0  # its machine_rank: 0 is the backend's machine


def read_ranks(rendezvous: Path) -> list[RankInfo]:
    """The ranks that wrote their rendezvous files so far, in rank order."""
    infos = []
    for path in sorted(rendezvous.glob("rank-*.json")):
        i = json.loads(path.read_text(encoding="utf-8"))
        infos.append(RankInfo(int(i["rank"]), int(i["pid"]), int(i["port"]), str(i["device"]), int(i["threads"]),
                              str(i["backend"]), str(i.get("host", LOOPBACK)), int(i.get("machine", 0))))
    return sorted(infos, key=lambda r: r.rank)


_ROOT_CAUSE = re.compile(r"rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)\s*\(pid:\s*(\d+)\)", re.DOTALL)


def death_of(rank: int, pid: int, exitcode: int | None) -> str:
    """ "rank 1 (pid 1234) died: SIGKILL" (a negative exit code is the signal's number)."""
    if exitcode is None:
        return f"rank {rank} (pid {pid}) died"
    if exitcode < 0:
        try:
            how = signal.Signals(-exitcode).name
        except ValueError:
            how = f"signal {-exitcode}"
    else:
        how = f"exit code {exitcode}"
    return f"rank {rank} (pid {pid}) died: {how}"


def root_cause(log: str) -> tuple[int, int, int] | None:
    """(rank, exit code, pid) of the first failure torchrun's agent reports, if it did."""
    at = log.rfind("Root Cause")
    match = _ROOT_CAUSE.search(log, at if at >= 0 else 0)
    return (int(match.group(1)), int(match.group(2)), int(match.group(3))) if match else None


def _state(pid: int) -> str | None:
    """The process's state letter (R, S, T stopped, Z zombie...), None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Whether `pid` runs: a zombie (killed, not yet reaped by its parent) does not."""
    state = _state(pid)
    if state is not None:
        return state != "Z"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class RankGroup:
    """The launcher of one job's ranks and what they reported."""

    processes: int
    rendezvous: Path
    launch: Launch
    proc: subprocess.Popen[bytes] | None = None
    ranks: list[RankInfo] = field(default_factory=list)
    failure: tuple[str, dict[str, Any]] | None = None
    checking: threading.Lock = field(default_factory=threading.Lock)
    stopped_since: dict[int, float] = field(default_factory=dict)  # rank -> when it was first seen stopped
    log_name: str = LOG_FILE  # another machine's ranks host logs beside the backend's launcher
    machine: int = 0  # the machine this group's launcher runs on (the backend's: 0)

    @property
    def log_path(self) -> Path:
        return self.rendezvous / self.log_name

    @property
    def machines(self) -> int:
        return int(self.launch.config.get("num_machines", 1) or 1)

    def local_ranks(self) -> list[RankInfo]:
        """The ranks on this machine: the only pids this process may look at or signal."""
        return [r for r in self.ranks if r.machine == self.machine]

    def start(self, token: str) -> None:
        env = {**os.environ, **self.launch.env, TOKEN_ENV: token, BACKEND_PID_ENV: str(os.getpid())}
        with open(self.log_path, "ab") as log:
            # A session of its own: the launcher and whatever it starts are signalled as one.
            self.proc = subprocess.Popen(self.launch.command, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def log_tail(self, chars: int = 600) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return " ".join(text[-chars:].split())

    def wait_ready(self, timeout: float = READY_TIMEOUT_S, stop: threading.Event | None = None) -> list[RankInfo]:
        """Every rank's rendezvous file, in rank order; LaunchError if the launcher ends first,
        or `stop` is set (the job ended while its ranks were starting)."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            found = read_ranks(self.rendezvous)
            if len(found) >= self.processes:
                self.ranks = found
                return self.ranks
            if stop is not None and stop.is_set():
                raise LaunchError(f"the job ended while its {self.processes} rank processes were starting")
            if self.proc.poll() is not None:
                raise LaunchError(f"the {self.processes} rank processes did not start (the launcher exited with "
                                  f"{self.proc.returncode}): {self.log_tail()}")
            if time.monotonic() > deadline:
                raise LaunchError(f"the {self.processes} rank processes were not ready after {timeout:.0f} s "
                                  f"({len(found)} were){self._others_hint()}: {self.log_tail()}")
            time.sleep(0.2)

    def _others_hint(self) -> str:
        if self.machines < 2:
            return ""
        return (f"; the ranks of machines 1 to {self.machines - 1} are started there by `synth-tui ranks-host "
                f"--shared-dir {self.rendezvous.parent} --machine-rank K`: is it running on each")

    def check(self) -> tuple[str, dict[str, Any]] | None:
        """Why the group cannot go on (a rank or the launcher died), or None. The first answer
        is kept: what the job fails with."""
        with self.checking:  # the watcher and the calls that failed ask at once: one answer
            return self._check()

    def _check(self) -> tuple[str, dict[str, Any]] | None:
        if self.failure is not None or self.proc is None:
            return self.failure
        dead = next((r for r in self.local_ranks() if not alive(r.pid)), None)
        remote = self._remote_exit()
        if dead is None and self.proc.poll() is None and remote is None:
            self.failure = self._stopped_too_long()
            return self.failure
        # torchrun's agent (watching every 0.2 s) stops the other ranks and names the first failure.
        try:
            self.proc.wait(timeout=10.0 if remote is None else 0.0)
        except subprocess.TimeoutExpired:
            pass
        cause = root_cause(self.log_path.read_text(encoding="utf-8", errors="replace")) \
            if self.log_path.exists() else None
        if self.machines > 1 and (cause is None or cause[1] >= 0):
            # A rank killed on another machine breaks this machine's collectives too: the killed one
            # is the cause, once its machine's ranks host has said so (it looks every half second).
            remote = remote or self._remote_exit(wait_s=3.0)
            if remote is not None:
                self.failure = remote
                return self.failure
        if cause is not None:
            rank, code, pid = cause
            self.failure = (death_of(rank, pid, code), {"rank": rank, "pid": pid, "exitcode": code})
        elif dead is not None:
            self.failure = (death_of(dead.rank, dead.pid, None), {"rank": dead.rank, "pid": dead.pid})
        else:
            self.failure = (f"the launcher of the ranks (pid {self.proc.pid}) exited with {self.proc.returncode}",
                            {"launcher_exitcode": self.proc.returncode})
        return self.failure

    def _remote_exit(self, wait_s: float = 0.0) -> tuple[str, dict[str, Any]] | None:
        """Another machine's ranks ended (its ranks host wrote why), or None."""
        deadline = time.monotonic() + wait_s
        while True:
            for machine in range(1, self.machines):
                try:
                    said = json.loads((self.rendezvous / machine_exit_file(machine)).read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    continue
                cause, why = said.get("cause"), said.get("why")
                if isinstance(why, str):  # its ranks host was killed: one of its ranks says so (worker.py)
                    return (f"the ranks of machine {machine} stopped: {why}",
                            {"machine": machine, "ranks_host_gone": True})
                if isinstance(cause, list) and len(cause) == 3:
                    rank, code, pid = (int(x) for x in cause)
                    return (f"{death_of(rank, pid, code)} on machine {machine}",
                            {"rank": rank, "pid": pid, "exitcode": code, "machine": machine})
                return (f"the ranks of machine {machine} ended (their launcher exited with {said.get('exitcode')})",
                        {"machine": machine, "launcher_exitcode": said.get("exitcode")})
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.2)

    def _stopped_too_long(self) -> tuple[str, dict[str, Any]] | None:
        """A rank stopped (SIGSTOP) longer than the collectives' timeout is hung: whatever it
        was doing (a collective, or a chat turn, which no timeout of torch's covers)."""
        now, limit = time.monotonic(), collective_timeout_s()
        for r in self.local_ranks():
            if _state(r.pid) != "T":
                self.stopped_since.pop(r.rank, None)
                continue
            since = self.stopped_since.setdefault(r.rank, now)
            if now - since >= limit:
                return (f"rank {r.rank} (pid {r.pid}) hung: stopped for more than {limit} s",
                        {"rank": r.rank, "pid": r.pid, "hung": True})
        return None

    def pids(self) -> list[int]:
        """This machine's ranks' pids (another machine's are its ranks host's to stop)."""
        return [r.pid for r in self.local_ranks()]

    def stop(self, grace: float | None = None) -> None:
        """SIGTERM to the launcher's session (torchrun forwards it to the ranks), SIGKILL to the
        session and every rank after `grace` (STOP_GRACE_S, read at the call: a test shortens it
        where a stopped rank waits out all of it). Idempotent; blocking."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            signal_group(self.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + (STOP_GRACE_S if grace is None else grace)
        while time.monotonic() < deadline and (self.proc.poll() is None or any(alive(p) for p in self.pids())):
            time.sleep(0.1)
        signal_group(self.proc.pid, signal.SIGKILL)
        for pid in self.pids():  # torchrun starts each rank in a session of its own
            if alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        try:
            self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass
