"""The accelerate side of the data-parallel `lm` policy: a user's accelerate config read strictly,
the YAML and environment we launch with, the `accelerate launch` command line, and the refusal
of GPU-only requests (NCCL, DeepSpeed, FSDP, bf16, vLLM) on a machine without CUDA.

Pure functions and frozen dataclasses (docs/scaling.md). vLLM generation is in vllm.py.
Written to accelerate 1.16's config format (accelerate/commands/config/config_args.py
ClusterConfig) and launcher (accelerate/commands/launch.py); only the CPU (gloo) layout has run here.
"""

from __future__ import annotations

import importlib
import os
import reprlib
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.errors import ConfigError, UsageError

DISTRIBUTED_TYPES = ("MULTI_GPU", "MULTI_CPU", "DEEPSPEED", "FSDP", "NO")
MIXED_PRECISION = ("no", "fp16", "bf16")
OFFLOAD_DEVICES = ("none", "cpu", "nvme")
FSDP_SHARDING = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
# accelerate 1.16's ClusterConfig fields (a test compares them with accelerate's own): any other key
# is a typo, which accelerate itself would refuse at launch.
ACCELERATE_KEYS = frozenset({
    "compute_environment", "distributed_type", "mixed_precision", "use_cpu", "debug", "num_processes",
    "machine_rank", "num_machines", "gpu_ids", "main_process_ip", "main_process_port", "rdzv_backend",
    "same_network", "main_training_function", "enable_cpu_affinity", "fp8_config", "deepspeed_config",
    "fsdp_config", "parallelism_config", "megatron_lm_config", "mpirun_config", "downcast_bf16", "tpu_name",
    "tpu_zone", "tpu_use_cluster", "tpu_use_sudo", "command_file", "commands", "tpu_vm", "tpu_env",
    "dynamo_config"})
# Flags whose values are secrets: never on a command line (any user on the machine can read argv).
SECRET_FLAGS = ("--token", "--api-key", "--api_key", "--secret", "--password", "--key")
VLLM_CPU_HINT = "leave --vllm-server out (each process then generates with the model itself)"
MAX_CONFIG_BYTES = 1 << 20  # an accelerate config is a few hundred bytes; /dev/zero or a 5 GB file is not one
CPU_HINT = ("run `--processes N` on CPU with gloo (no --accelerate-config, or "
            "--accelerate-config configs/accelerate/cpu-gloo.yaml)")


@dataclass(frozen=True)
class Problem:
    """One thing wrong in an accelerate config: the field, the value found, what is wrong, the fix."""

    field: str
    value: Any
    what: str
    fix: str

    def sentence(self) -> str:
        return f"{self.field} = {shown(self.value)}: {self.what}"


_SHOWN = reprlib.Repr()  # Python 3.11's Repr takes no keywords
_SHOWN.maxlevel, _SHOWN.maxdict, _SHOWN.maxlist, _SHOWN.maxstring, _SHOWN.maxother = 2, 4, 4, 80, 80
SHOWN_CHARS = 200


def shown(value: Any) -> str:
    """A value from the user's file as a refusal quotes it: bounded in depth and length, so a
    huge or deeply nested value costs nothing to show (docs/hardening.md#8)."""
    text = _SHOWN.repr(value)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 1] + "…"


class AccelerateConfigError(ConfigError):
    """An accelerate config that cannot be used; `.problems` names each field, `.hint` the fixes."""

    def __init__(self, source: str, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        words = "; ".join(p.sentence() for p in self.problems)
        super().__init__(f"the accelerate config {source} cannot be used: {words}",
                         hint="; ".join(dict.fromkeys(p.fix for p in self.problems)))

    @property
    def fix(self) -> str:
        return self.hint or ""


class NoGpuError(UsageError):
    """A GPU-only request (NCCL, DeepSpeed, FSDP, bf16, vLLM) on a machine without a CUDA device."""


@dataclass(frozen=True)
class DeepSpeedSetup:
    zero_stage: int = 2
    offload_optimizer_device: str = "none"
    offload_param_device: str = "none"
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class FsdpSetup:
    version: int = 2
    # FSDP 1: a sharding strategy name; FSDP 2: true/false (reshard after forward, i.e. ZeRO-3-like or not).
    reshard_after_forward: str | bool = True
    offload_params: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AccelerateSetup:
    """What a run asks of accelerate. The default is this machine's layout: CPU processes, gloo."""

    distributed_type: str = "MULTI_CPU"
    num_processes: int | None = None
    num_machines: int = 1
    machine_rank: int = 0
    main_process_ip: str | None = None
    main_process_port: int | None = None
    mixed_precision: str = "no"
    use_cpu: bool = False
    gpu_ids: str | None = None
    deepspeed: DeepSpeedSetup | None = None
    fsdp: FsdpSetup | None = None
    source: str | None = None

    @property
    def on_cpu(self) -> bool:
        return self.distributed_type == "MULTI_CPU" or self.use_cpu

    @property
    def backend(self) -> str:
        """The process group's backend: gloo on CPU, NCCL on GPUs, none for one process (NO)."""
        if self.distributed_type == "NO":
            return "none"
        return "gloo" if self.on_cpu else "nccl"

    @property
    def multi_node(self) -> bool:
        return self.num_machines > 1


# -- reading a user's config ----------------------------------------------------------------------

def read_accelerate_config(path: str | Path, processes: int | None = None) -> AccelerateSetup:
    """Read an accelerate YAML strictly (every problem named with its field, value and fix);
    `processes` (the `--processes` given) must agree with its num_processes when both are set."""
    source = str(path)
    data = _load_yaml(Path(path))
    problems: list[Problem] = []
    unknown = sorted(set(data) - ACCELERATE_KEYS)
    for key in unknown:
        problems.append(Problem(key, data[key], "not a key accelerate knows",
                                f"remove {key!r} or correct its spelling (accelerate's keys: `accelerate config`)"))
    kind = _distributed_type(data, problems)
    deepspeed = _deepspeed(data, problems) if kind == "DEEPSPEED" else None
    fsdp = _fsdp(data, problems) if kind == "FSDP" else None
    setup = AccelerateSetup(
        distributed_type=kind, num_processes=_count(data, "num_processes", problems, None),
        num_machines=_count(data, "num_machines", problems, 1) or 1,
        machine_rank=_rank(data, problems), main_process_ip=_text(data, "main_process_ip", problems),
        main_process_port=_port(data, problems), mixed_precision=_precision(data, problems),
        use_cpu=_flag(data, "use_cpu", problems), gpu_ids=_gpu_ids(data), deepspeed=deepspeed, fsdp=fsdp,
        source=source)
    problems += _consistency(setup, processes)
    if problems:
        raise AccelerateConfigError(source, problems)
    return setup


def _load_yaml(path: Path) -> dict[str, Any]:
    # PyYAML: accelerate's own dependency, so present wherever the trainer extra is. Imported by name:
    # it ships no type information, and mypy checks this module with or without it installed.
    try:
        yaml = importlib.import_module("yaml")
    except ImportError:
        raise AccelerateConfigError(str(path), [Problem("file", str(path), "cannot be read without PyYAML",
                                                        "pip install 'synth-tui[trainer]'")]) from None
    fix = "give the path of an accelerate config YAML (`accelerate config` writes one; examples: configs/accelerate/)"
    if (what := _not_a_config_file(path)) is not None:
        raise AccelerateConfigError(str(path), [Problem("file", str(path), what, fix)])
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            what = f"is over {MAX_CONFIG_BYTES // 1024} KiB, far more than an accelerate config"
            raise AccelerateConfigError(str(path), [Problem("file", str(path), what, fix)])
        data = yaml.load(raw.decode("utf-8"), Loader=_loader_without_aliases(yaml))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        what = f"not readable YAML ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})"
        raise AccelerateConfigError(str(path), [Problem("file", str(path), what, fix)]) from None
    if not isinstance(data, dict):
        what = f"holds a {type(data).__name__}, not a mapping of accelerate's keys"
        raise AccelerateConfigError(str(path), [Problem("file", str(path), what, fix)])
    return {str(key): value for key, value in data.items()}


def _not_a_config_file(path: Path) -> str | None:
    """Why `path` cannot be a config file (missing, a folder, a device or a FIFO), or None."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "no such file"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or type(exc).__name__})"
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    if not stat.S_ISREG(mode):
        return "is not a regular file (a device, a FIFO or a socket)"
    return None


def _loader_without_aliases(yaml: Any) -> Any:
    """PyYAML's safe loader refusing anchors and aliases: accelerate's configs use none, and nine
    lines of aliases expand into gigabytes once anything walks the value (docs/hardening.md#8)."""

    class NoAliases(yaml.SafeLoader):  # type: ignore[misc]
        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(None, None, "an alias (*name) is not taken here: write the "
                                                  "value out", event.start_mark)
            return super().compose_node(parent, index)

    return NoAliases


def _distributed_type(data: Mapping[str, Any], problems: list[Problem]) -> str:
    value = data.get("distributed_type")
    if isinstance(value, str) and value.upper() in DISTRIBUTED_TYPES:
        return value.upper()
    problems.append(Problem("distributed_type", value, "missing or not one the lm policy runs",
                            f"set distributed_type to one of {', '.join(DISTRIBUTED_TYPES)}"))
    return "NO"


def _count(data: Mapping[str, Any], key: str, problems: list[Problem], default: int | None) -> int | None:
    value = data.get(key, default)
    if value is None or value == default or (key == "num_processes" and value == -1):
        return default  # -1: accelerate's "given on the command line", which we always do
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problems.append(Problem(key, value, "must be a whole number of at least 1", f"set {key} to 1 or more"))
        return default
    return value


def _rank(data: Mapping[str, Any], problems: list[Problem]) -> int:
    value = data.get("machine_rank", 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        problems.append(Problem("machine_rank", value, "must be a whole number from 0",
                                "set machine_rank to this machine's index: 0 on the main machine"))
        return 0
    return value


def _port(data: Mapping[str, Any], problems: list[Problem]) -> int | None:
    value = data.get("main_process_port")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        problems.append(Problem("main_process_port", value, "not a TCP port",
                                "set main_process_port to a free port from 1024 to 65535, or remove it"))
        return None
    return value


def _text(data: Mapping[str, Any], key: str, problems: list[Problem]) -> str | None:
    value = data.get(key)
    if value is None or (isinstance(value, str) and value.strip()):
        return value.strip() if isinstance(value, str) else None
    problems.append(Problem(key, value, "must be a host name or IP address", f"set {key} to the main machine's IP"))
    return None


def _precision(data: Mapping[str, Any], problems: list[Problem]) -> str:
    value = data.get("mixed_precision", "no")
    value = "no" if value is None or value is False else value
    if isinstance(value, str) and value.lower() in MIXED_PRECISION:
        return value.lower()
    problems.append(Problem("mixed_precision", value, "not a precision the lm policy runs",
                            "set mixed_precision to 'no', 'bf16' (GPUs) or 'fp16'"))
    return "no"


def _flag(data: Mapping[str, Any], key: str, problems: list[Problem]) -> bool:
    value = data.get(key, False)
    if isinstance(value, bool):
        return value
    problems.append(Problem(key, value, "must be true or false", f"set {key} to true or false"))
    return False


def _gpu_ids(data: Mapping[str, Any]) -> str | None:
    value = data.get("gpu_ids")
    return None if value is None else str(value)


def _section(data: Mapping[str, Any], key: str, problems: list[Problem]) -> dict[str, Any]:
    value = data.get(key) or {}
    if isinstance(value, dict):
        return {str(k): v for k, v in value.items()}
    problems.append(Problem(key, value, "must be a mapping", f"write {key} as a YAML mapping (`key: value` lines)"))
    return {}


def _deepspeed(data: Mapping[str, Any], problems: list[Problem]) -> DeepSpeedSetup:
    section = _section(data, "deepspeed_config", problems)
    stage = section.pop("zero_stage", 2)
    if stage not in (2, 3) or isinstance(stage, bool):
        problems.append(Problem("deepspeed_config.zero_stage", stage, "the lm policy runs ZeRO stage 2 or 3",
                                "set deepspeed_config.zero_stage to 2 (optimizer and gradients sharded) "
                                "or 3 (parameters too)"))
        stage = 2
    offloads = []
    for key in ("offload_optimizer_device", "offload_param_device"):
        value = section.pop(key, "none")
        value = "none" if value is None else value
        if value not in OFFLOAD_DEVICES:
            problems.append(Problem(f"deepspeed_config.{key}", value, "not an offload device",
                                    f"set deepspeed_config.{key} to none, cpu or nvme"))
            value = "none"
        offloads.append(str(value))
    if stage == 2 and offloads[1] != "none":
        problems.append(Problem("deepspeed_config.offload_param_device", offloads[1],
                                "parameters are offloaded by ZeRO stage 3 only",
                                "set zero_stage to 3, or offload_param_device to none"))
    if stage == 3 and section.get("zero3_save_16bit_model") is False:
        problems.append(Problem("deepspeed_config.zero3_save_16bit_model", False,
                                "each checkpoint must hold the model's weights (loadable with from_pretrained)",
                                "set deepspeed_config.zero3_save_16bit_model to true, or remove it"))
    return DeepSpeedSetup(int(stage), offloads[0], offloads[1], section)


def _fsdp(data: Mapping[str, Any], problems: list[Problem]) -> FsdpSetup:
    section = _section(data, "fsdp_config", problems)
    version = section.pop("fsdp_version", 2)
    if version not in (1, 2) or isinstance(version, bool):
        problems.append(Problem("fsdp_config.fsdp_version", version, "FSDP comes in versions 1 and 2",
                                "set fsdp_config.fsdp_version to 2 (or 1)"))
        version = 2
    strategy = section.pop("fsdp_sharding_strategy", None)
    reshard = section.pop("fsdp_reshard_after_forward", strategy if strategy is not None else
                          (True if version == 2 else "FULL_SHARD"))
    if version == 2 and not isinstance(reshard, bool):
        problems.append(Problem("fsdp_config.fsdp_reshard_after_forward", reshard,
                                "FSDP 2 takes true or false here", "set it to true (shard like ZeRO-3) or false"))
        reshard = True
    if version == 1 and reshard not in FSDP_SHARDING:
        problems.append(Problem("fsdp_config.fsdp_reshard_after_forward", reshard, "not an FSDP 1 sharding strategy",
                                f"set it to one of {', '.join(FSDP_SHARDING)}"))
        reshard = "FULL_SHARD"
    offload = section.pop("fsdp_offload_params", False)
    return FsdpSetup(int(version), reshard, bool(offload), section)


def _consistency(setup: AccelerateSetup, processes: int | None) -> list[Problem]:
    problems = []
    if processes is not None and setup.num_processes is not None and processes != setup.num_processes:
        problems.append(Problem("num_processes", setup.num_processes, f"disagrees with --processes {processes}",
                                f"set num_processes to {processes} in the file, or pass --processes "
                                f"{setup.num_processes}"))
    if setup.distributed_type == "NO" and (processes or setup.num_processes or 1) > 1:
        problems.append(Problem("distributed_type", "NO", "runs one process, but more were asked",
                                "set distributed_type to MULTI_GPU (GPUs) or MULTI_CPU (CPU), or use one process"))
    if setup.use_cpu and setup.distributed_type in ("DEEPSPEED", "FSDP"):
        problems.append(Problem("use_cpu", True, f"{setup.distributed_type} needs GPUs here",
                                f"set use_cpu to false for {setup.distributed_type}, or distributed_type to MULTI_CPU"))
    if setup.multi_node and not setup.main_process_ip:
        problems.append(Problem("main_process_ip", None, f"num_machines is {setup.num_machines}, so every machine "
                                "must know the main machine's address",
                                "set main_process_ip to the IP of the machine with machine_rank 0"))
    if setup.machine_rank >= setup.num_machines:
        problems.append(Problem("machine_rank", setup.machine_rank, f"must be below num_machines "
                                f"({setup.num_machines})", f"set machine_rank from 0 to {setup.num_machines - 1}"))
    return problems


def check_processes(setup: AccelerateSetup, processes: int) -> None:
    """Raise AccelerateConfigError when a config already read cannot run `processes` ranks
    (what `read_accelerate_config(path, processes)` checks, without reading the file again)."""
    problems = _consistency(setup, processes)
    if problems:
        raise AccelerateConfigError(setup.source or "given", problems)


def sharded_parameters(setup: AccelerateSetup | None) -> str | None:
    """The engine that shards the model's parameters across the ranks (DeepSpeed ZeRO-3, FSDP),
    in words, or None (DDP, ZeRO-2: every rank holds the whole model). With sharded parameters
    a rank cannot generate its episodes alone: each forward pass would be a collective."""
    if setup is None:
        return None
    if setup.distributed_type == "DEEPSPEED" and setup.deepspeed is not None and setup.deepspeed.zero_stage == 3:
        return "DeepSpeed ZeRO-3"
    if setup.distributed_type == "FSDP":
        return f"FSDP {setup.fsdp.version}" if setup.fsdp is not None else "FSDP"
    return None


# -- GPUs -----------------------------------------------------------------------------------------

def cuda_available() -> bool:
    """Whether torch sees a CUDA device; False when torch is not installed or cannot tell."""
    try:
        import torch
    except ImportError:
        return False
    try:
        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken driver is "no GPU" here, said by the refusal
        return False


def gpu_requests(setup: AccelerateSetup | None, generation: Any = None) -> list[str]:
    """What in a run needs a GPU, in words (empty: it runs on CPU). `generation` is a VllmPlan or None."""
    asked: list[str] = []
    if setup is not None:
        if setup.distributed_type == "DEEPSPEED" and setup.deepspeed is not None:
            asked.append(f"DeepSpeed ZeRO-{setup.deepspeed.zero_stage}")
        elif setup.distributed_type == "FSDP" and setup.fsdp is not None:
            asked.append(f"FSDP {setup.fsdp.version}")
        elif setup.distributed_type == "MULTI_GPU" and not setup.use_cpu:
            asked.append("NCCL across GPUs (distributed_type MULTI_GPU)")
        if setup.mixed_precision in ("bf16", "fp16"):
            asked.append(f"{setup.mixed_precision} mixed precision")
    mode = getattr(generation, "mode", "off")
    if mode != "off":
        asked.append(f"vLLM generation ({mode})")
    return asked


def needs_gpu(setup: AccelerateSetup | None, generation: Any = None) -> bool:
    return bool(gpu_requests(setup, generation))


def refuse_without_gpu(setup: AccelerateSetup | None, generation: Any = None, *,
                       has_cuda: Callable[[], bool] = cuda_available) -> None:
    """Raise NoGpuError, one sentence, when the run asks for a GPU and this machine has none."""
    asked = gpu_requests(setup, generation)
    if not asked or has_cuda():
        return
    what = ", ".join(asked[:-1]) + (" and " if len(asked) > 1 else "") + asked[-1]
    where = f" by {setup.source}" if setup is not None and setup.source else ""
    instead = [CPU_HINT] if gpu_requests(setup) else []
    mode = getattr(generation, "mode", "off")
    if mode != "off":
        instead.append(VLLM_CPU_HINT if mode == "server" else VLLM_CPU_HINT.replace("--vllm-server", "--vllm-colocate"))
    raise NoGpuError(f"{what} {'was' if len(asked) == 1 else 'were'} asked{where}, but no CUDA GPU was found "
                     f"(torch.cuda.is_available() is false); here, {' and '.join(instead)}.",
                     hint="on a machine with GPUs, install the CUDA build of torch and `pip install '.[gpu]'`")


# -- what we launch -------------------------------------------------------------------------------

def accelerate_yaml(setup: AccelerateSetup | None, processes: int) -> dict[str, Any]:
    """The accelerate config we write for `processes` ranks (None: this machine's CPU layout).

    On CPU: distributed_type MULTI_GPU with use_cpu false, which selects accelerate's torchrun
    launcher (use_cpu true takes its one-process "simple" launcher), and ACCELERATE_USE_CPU=true
    in the environment (launch_env), with which accelerate picks MULTI_CPU and gloo."""
    setup = setup or AccelerateSetup(num_processes=processes)
    out: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE", "debug": False,
        "distributed_type": "MULTI_GPU" if setup.on_cpu else setup.distributed_type,
        "num_processes": processes, "num_machines": setup.num_machines, "machine_rank": setup.machine_rank,
        "main_training_function": "main", "mixed_precision": "no" if setup.on_cpu else setup.mixed_precision,
        "rdzv_backend": "static", "same_network": not setup.multi_node, "use_cpu": False,
        "gpu_ids": setup.gpu_ids or "all"}
    if setup.multi_node:
        out["main_process_ip"] = setup.main_process_ip
    if setup.main_process_port is not None:
        out["main_process_port"] = setup.main_process_port
    if setup.deepspeed is not None:
        out["deepspeed_config"] = _deepspeed_yaml(setup.deepspeed, setup.multi_node)
        out.pop("gpu_ids")
    if setup.fsdp is not None:
        out["fsdp_config"] = _fsdp_yaml(setup.fsdp)
        out.pop("gpu_ids")
    return out


def _deepspeed_yaml(ds: DeepSpeedSetup, multi_node: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"deepspeed_multinode_launcher": "standard", "zero_stage": ds.zero_stage,
                           "offload_optimizer_device": ds.offload_optimizer_device,
                           "offload_param_device": ds.offload_param_device,
                           "zero3_init_flag": ds.zero_stage == 3}
    if ds.zero_stage == 3:
        out["zero3_save_16bit_model"] = True  # a checkpoint folder loadable with from_pretrained
    return {**out, **ds.extra}


def _fsdp_yaml(fsdp: FsdpSetup) -> dict[str, Any]:
    out: dict[str, Any] = {"fsdp_version": fsdp.version, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                           "fsdp_state_dict_type": "FULL_STATE_DICT", "fsdp_cpu_ram_efficient_loading": True,
                           "fsdp_offload_params": fsdp.offload_params,
                           "fsdp_reshard_after_forward": fsdp.reshard_after_forward}
    return {**out, **fsdp.extra}


def launch_env(setup: AccelerateSetup | None, processes: int = 1, cores: int | None = None) -> dict[str, str]:
    """The variables the launcher gets besides the backend's own environment: ACCELERATE_USE_CPU
    on CPU, OMP_NUM_THREADS (this machine's cores shared among its ranks, at least 1)."""
    setup = setup or AccelerateSetup()
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    local = max(processes // max(setup.num_machines, 1), 1)
    env = {"OMP_NUM_THREADS": str(max(cores // local, 1)), "TRL_EXPERIMENTAL_SILENCE": "1", "PYTHONUNBUFFERED": "1"}
    if setup.on_cpu:
        env["ACCELERATE_USE_CPU"] = "true"
    return env


ACCELERATE_LAUNCHER = "accelerate.commands.launch"


def accelerate_launch_command(python: str, yaml_path: str | Path, processes: int, port: int | None,
                              module_args: Sequence[str], *, launcher_args: Sequence[str] = (),
                              launcher: str = ACCELERATE_LAUNCHER) -> list[str]:
    """`python -m accelerate.commands.launch … --module <module> <args>`: what the backend starts.
    `port`: the rendezvous port (one machine: a free one per job; several machines: None, the YAML's
    main_process_port, the same on every machine). `processes` counts every rank of every machine.
    `launcher`: accelerate's, or app.local.parallel.loopback (the same, its store on loopback).
    No secret goes on it (argv is readable by every user of the machine): a per-job token travels
    in the environment; a flag named like a secret is refused."""
    if not module_args:
        raise ValueError("module_args must name the rank's module, e.g. ['app.local.parallel.worker', ...]")
    secret = [arg for arg in module_args if arg.split("=", 1)[0].lower() in SECRET_FLAGS]
    if secret:
        raise ValueError(f"{secret[0].split('=', 1)[0]} would put a secret on the command line; "
                         "pass it in the environment")
    if processes < 1 or (port is not None and not 0 < port < 65536):
        raise ValueError(f"processes must be at least 1 and port a TCP port (got {processes}, {port})")
    rendezvous = [] if port is None else ["--main_process_port", str(port)]
    return [python, "-m", launcher, "--config_file", str(yaml_path),
            "--num_processes", str(processes), *rendezvous, *launcher_args, "--module", *module_args]
