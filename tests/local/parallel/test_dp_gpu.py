"""The GPU side of the data-parallel `lm` trainer (app/local/parallel/accelerate.py, app/local/parallel/vllm.py),
tested where it can run without a GPU: configs read and written (checked with accelerate's own
reader), the launch command (parsed by accelerate's own parser), the refusal without CUDA, the
`trl vllm-serve` line (parsed by TRL's parser), GRPOConfig's fields, and the vLLM adapter driving
TRL's real VLLMClient against a fake vLLM server on loopback. docs/scaling.md."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.core.errors import ConfigError
from app.local.parallel.accelerate import (
    ACCELERATE_KEYS,
    AccelerateConfigError,
    AccelerateSetup,
    NoGpuError,
    accelerate_launch_command,
    accelerate_yaml,
    cuda_available,
    launch_env,
    needs_gpu,
    read_accelerate_config,
    refuse_without_gpu,
    sharded_parameters,
)
from app.local.parallel.vllm import VllmGenerator, VllmPlan, grpo_vllm_kwargs, vllm_serve_command

from ..fake_vllm import FakeVllm, serving, trls_client

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "configs" / "accelerate"
trainer_only = pytest.mark.usefixtures("trainer_extra")  # torch: the slow tier; fails, never skips, without it


def no_cuda() -> bool:
    return False


def write(tmp_path: Path, text: str, name: str = "accel.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# -- reading ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "kind", "backend"), [
    ("cpu-gloo.yaml", "MULTI_CPU", "gloo"), ("one-node-gpus.yaml", "MULTI_GPU", "nccl"),
    ("deepspeed-zero2.yaml", "DEEPSPEED", "nccl"), ("deepspeed-zero3.yaml", "DEEPSPEED", "nccl"),
    ("fsdp.yaml", "FSDP", "nccl"), ("multi-node.yaml", "MULTI_GPU", "nccl")])
def test_every_example_config_reads(name: str, kind: str, backend: str) -> None:
    setup = read_accelerate_config(EXAMPLES / name)
    assert (setup.distributed_type, setup.backend) == (kind, backend)
    assert setup.source == str(EXAMPLES / name)
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == sorted(
        ["cpu-gloo.yaml", "one-node-gpus.yaml", "deepspeed-zero2.yaml", "deepspeed-zero3.yaml", "fsdp.yaml",
         "multi-node.yaml"])


def test_the_examples_say_what_they_ask() -> None:
    zero3 = read_accelerate_config(EXAMPLES / "deepspeed-zero3.yaml", processes=4)
    assert zero3.deepspeed is not None and zero3.deepspeed.zero_stage == 3 and zero3.mixed_precision == "bf16"
    fsdp = read_accelerate_config(EXAMPLES / "fsdp.yaml")
    assert fsdp.fsdp is not None and (fsdp.fsdp.version, fsdp.fsdp.reshard_after_forward) == (2, True)
    multi = read_accelerate_config(EXAMPLES / "multi-node.yaml", processes=8)
    assert (multi.num_machines, multi.machine_rank, multi.main_process_ip, multi.main_process_port) == (
        2, 0, "10.0.0.1", 29500)


@trainer_only
@pytest.mark.parametrize("name", ["multi_gpu.yaml", "zero2.yaml", "zero3.yaml", "fsdp1.yaml", "fsdp2.yaml"])
def test_trls_own_accelerate_configs_read(name: str) -> None:
    """A user copies TRL's examples (trl/accelerate_configs/): they read as they are."""
    import trl

    setup = read_accelerate_config(Path(trl.__file__).parent / "accelerate_configs" / name, processes=8)
    assert setup.num_processes == 8 and not setup.on_cpu


@trainer_only
def test_trls_zero1_is_refused_with_the_fix() -> None:
    import trl

    with pytest.raises(AccelerateConfigError) as caught:
        read_accelerate_config(Path(trl.__file__).parent / "accelerate_configs" / "zero1.yaml")
    assert "deepspeed_config.zero_stage = 1" in str(caught.value)
    assert "set deepspeed_config.zero_stage to 2" in caught.value.fix


@pytest.mark.parametrize(("text", "field", "fix"), [
    ("distributed_type: TPU\n", "distributed_type = 'TPU'", "one of MULTI_GPU, MULTI_CPU, DEEPSPEED, FSDP, NO"),
    ("num_processes: 2\n", "distributed_type = None", "set distributed_type"),
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 1\n", "deepspeed_config.zero_stage = 1",
     "set deepspeed_config.zero_stage to 2"),
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n  offload_param_device: cpu\n",
     "deepspeed_config.offload_param_device = 'cpu'", "set zero_stage to 3"),
    ("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n  zero3_save_16bit_model: false\n",
     "deepspeed_config.zero3_save_16bit_model = False", "set deepspeed_config.zero3_save_16bit_model to true"),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 3\n", "fsdp_config.fsdp_version = 3", "fsdp_version to 2"),
    ("distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 1\n  fsdp_reshard_after_forward: HALF\n",
     "fsdp_config.fsdp_reshard_after_forward = 'HALF'", "FULL_SHARD"),
    ("distributed_type: MULTI_GPU\nnum_processes: 0\n", "num_processes = 0", "set num_processes to 1 or more"),
    ("distributed_type: MULTI_GPU\nmixed_precision: fp8\n", "mixed_precision = 'fp8'", "'bf16'"),
    ("distributed_type: MULTI_GPU\nnum_machines: 2\n", "main_process_ip = None", "set main_process_ip"),
    ("distributed_type: MULTI_GPU\nnum_machines: 2\nmachine_rank: 2\nmain_process_ip: 10.0.0.1\n",
     "machine_rank = 2", "from 0 to 1"),
    ("distributed_type: MULTI_GPU\nmain_process_port: 99999\n", "main_process_port = 99999", "free port"),
    ("distributed_type: MULTI_GPU\nnum_proceses: 2\n", "num_proceses = 2", "correct its spelling"),
    ("distributed_type: DEEPSPEED\nuse_cpu: true\n", "use_cpu = True", "set use_cpu to false"),
    ("distributed_type: 'NO'\nnum_processes: 2\n", "distributed_type = 'NO'", "MULTI_CPU"),
])
def test_a_bad_field_is_named_with_its_value_and_fix(tmp_path: Path, text: str, field: str, fix: str) -> None:
    with pytest.raises(AccelerateConfigError) as caught:
        read_accelerate_config(write(tmp_path, text))
    error = caught.value
    assert field in error.message and str(tmp_path) in error.message
    assert fix in error.fix and error.fix == error.hint
    assert any(field.startswith(p.field) for p in error.problems)


def test_zero3_and_fsdp_shard_the_parameters() -> None:
    """What needs a vLLM server to generate (dp_launch.launch_setup refuses it without one)."""
    assert sharded_parameters(None) is None
    for name in ("cpu-gloo.yaml", "one-node-gpus.yaml", "deepspeed-zero2.yaml", "multi-node.yaml"):
        assert sharded_parameters(read_accelerate_config(EXAMPLES / name)) is None, name
    assert sharded_parameters(read_accelerate_config(EXAMPLES / "deepspeed-zero3.yaml")) == "DeepSpeed ZeRO-3"
    assert sharded_parameters(read_accelerate_config(EXAMPLES / "fsdp.yaml")) == "FSDP 2"


def test_every_problem_is_named_at_once(tmp_path: Path) -> None:
    text = "distributed_type: DEEPSPEED\nnum_processes: -2\ndeepspeed_config:\n  zero_stage: 4\nmixed_precision: x\n"
    with pytest.raises(AccelerateConfigError) as caught:
        read_accelerate_config(write(tmp_path, text))
    assert {p.field for p in caught.value.problems} == {"num_processes", "deepspeed_config.zero_stage",
                                                         "mixed_precision"}


def test_one_process_and_accelerates_unset_count(tmp_path: Path) -> None:
    one = read_accelerate_config(write(tmp_path, "distributed_type: 'NO'\nnum_processes: 1\n"), processes=1)
    assert accelerate_yaml(one, 1)["distributed_type"] == "NO" and one.backend == "none"
    unset = read_accelerate_config(write(tmp_path, "distributed_type: MULTI_GPU\nnum_processes: -1\n"), processes=4)
    assert unset.num_processes is None and accelerate_yaml(unset, 4)["num_processes"] == 4


def test_processes_must_agree_with_the_file() -> None:
    with pytest.raises(AccelerateConfigError) as caught:
        read_accelerate_config(EXAMPLES / "one-node-gpus.yaml", processes=2)
    assert "num_processes = 4: disagrees with --processes 2" in caught.value.message
    assert "set num_processes to 2 in the file, or pass --processes 4" in caught.value.fix
    assert read_accelerate_config(EXAMPLES / "one-node-gpus.yaml", processes=4).num_processes == 4


@pytest.mark.parametrize(("content", "what"), [
    (None, "no such file"), ("distributed_type: [unclosed\n", "not readable YAML (ParserError"),
    ("- MULTI_GPU\n", "holds a list, not a mapping"), ("", "holds a NoneType, not a mapping"),
    (b"\xff\xfe\x00bad", "not readable YAML (UnicodeDecodeError")])
def test_a_file_that_is_not_a_config_is_refused(tmp_path: Path, content: str | bytes | None, what: str) -> None:
    path = tmp_path / "accel.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(AccelerateConfigError) as caught:
        read_accelerate_config(path)
    assert what in caught.value.message and "accelerate config YAML" in caught.value.fix
    assert isinstance(caught.value, ConfigError)  # the CLI's usage exit code and `Hint:` line


ALIAS_BOMB = (
    'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]'"\n"
    'b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]'"\n"
    'c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]'"\n"
    'd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]'"\n"
    'e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]'"\n"
    'f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]'"\n"
    'g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]'"\n"
    'h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]'"\n"
    'i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]'"\n"
)


def test_an_alias_bomb_is_refused_before_it_grows(tmp_path: Path) -> None:
    """Nine lines of YAML aliases are 9**9 strings once walked: issue 41 item 6 (docs/hardening.md#8)."""
    path = tmp_path / "bomb.yaml"
    path.write_text(ALIAS_BOMB, encoding="utf-8")
    assert len(ALIAS_BOMB.splitlines()) == 9 and "*h" in ALIAS_BOMB
    with pytest.raises(AccelerateConfigError) as caught:
        read_accelerate_config(path)
    assert "an alias (*name) is not taken here" in caught.value.message
    assert len(caught.value.message) < 600


def test_a_huge_value_is_shown_bounded(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("distributed_type: MULTI_CPU\ntypo: [" + ", ".join(["'" + "x" * 500 + "'"] * 1500) + "]\n",
                    encoding="utf-8")
    with pytest.raises(AccelerateConfigError) as caught:
        read_accelerate_config(path)
    assert "typo = ['xxx" in caught.value.message and "not a key accelerate knows" in caught.value.message
    assert len(caught.value.message) < 600


@pytest.mark.parametrize(("make", "what"), [
    (lambda tmp: Path("/dev/zero"), "is not a regular file (a device, a FIFO or a socket)"),
    (lambda tmp: tmp, "is a folder, not a file"),
    (lambda tmp: _sparse(tmp / "huge.yaml", 5 << 30), "is over 1024 KiB, far more than an accelerate config")])
def test_what_is_not_a_config_file_is_named(tmp_path: Path, make: Any, what: str) -> None:
    """/dev/zero and a folder said "no such file" (issue 41 item 7); a 5 GB file was read whole."""
    with pytest.raises(AccelerateConfigError) as caught:
        read_accelerate_config(make(tmp_path))
    assert what in caught.value.message and "no such file" not in caught.value.message


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as handle:
        handle.truncate(size)
    return path


@trainer_only
def test_our_key_list_is_accelerates() -> None:
    from accelerate.commands.config.config_args import ClusterConfig

    assert set(ClusterConfig.__dataclass_fields__) == ACCELERATE_KEYS


# -- GPUs ------------------------------------------------------------------------------------------

def test_gpu_requests_are_refused_in_one_sentence_without_cuda() -> None:
    zero3 = read_accelerate_config(EXAMPLES / "deepspeed-zero3.yaml")
    assert needs_gpu(zero3, None)
    with pytest.raises(NoGpuError) as caught:
        refuse_without_gpu(zero3, VllmPlan("server", "http://127.0.0.1:8000"), has_cuda=no_cuda)
    message = caught.value.message
    assert message.startswith("DeepSpeed ZeRO-3, bf16 mixed precision and vLLM generation (server) were asked by ")
    assert "no CUDA GPU was found" in message and "`--processes N` on CPU with gloo" in message
    assert message.count(". ") == 0 and message.endswith(".")
    refuse_without_gpu(zero3, None, has_cuda=lambda: True)  # with a GPU: no refusal


@pytest.mark.parametrize(("setup", "plan", "words"), [
    (AccelerateSetup("MULTI_GPU"), None, "NCCL across GPUs"),
    (AccelerateSetup("FSDP", fsdp=read_accelerate_config(EXAMPLES / "fsdp.yaml").fsdp), None, "FSDP 2"),
    (AccelerateSetup("MULTI_CPU", mixed_precision="bf16"), None, "bf16 mixed precision"),
    (None, VllmPlan("colocate"), "vLLM generation (colocate)")])
def test_each_gpu_request_is_named(setup: AccelerateSetup | None, plan: VllmPlan | None, words: str) -> None:
    with pytest.raises(NoGpuError, match=words.replace("(", r"\(").replace(")", r"\)")):
        refuse_without_gpu(setup, plan, has_cuda=no_cuda)


def test_the_cpu_layout_needs_no_gpu() -> None:
    for setup in (None, AccelerateSetup(), read_accelerate_config(EXAMPLES / "cpu-gloo.yaml"),
                  AccelerateSetup("MULTI_GPU", use_cpu=True)):
        assert not needs_gpu(setup, VllmPlan())
        refuse_without_gpu(setup, VllmPlan(), has_cuda=no_cuda)


@trainer_only
def test_cuda_is_asked_without_crashing(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    assert isinstance(cuda_available(), bool)
    real_import = builtins.__import__

    def no_torch(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "torch":
            raise ImportError("no torch")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torch)
    assert cuda_available() is False


# -- what we launch --------------------------------------------------------------------------------

def test_the_cpu_yaml_is_the_spikes_layout() -> None:
    out = accelerate_yaml(None, 2)
    assert (out["distributed_type"], out["use_cpu"], out["num_processes"], out["mixed_precision"]) == (
        "MULTI_GPU", False, 2, "no")
    env = launch_env(None, processes=2, cores=2)
    assert env["ACCELERATE_USE_CPU"] == "true" and env["OMP_NUM_THREADS"] == "1"
    assert launch_env(None, processes=4, cores=2)["OMP_NUM_THREADS"] == "1"
    gpu_env = launch_env(read_accelerate_config(EXAMPLES / "one-node-gpus.yaml"), processes=4, cores=32)
    assert "ACCELERATE_USE_CPU" not in gpu_env and gpu_env["OMP_NUM_THREADS"] == "8"


@pytest.mark.parametrize("name", ["cpu-gloo.yaml", "one-node-gpus.yaml", "deepspeed-zero2.yaml",
                                  "deepspeed-zero3.yaml", "fsdp.yaml", "multi-node.yaml"])
def test_the_yaml_we_write_reads_back_the_same(tmp_path: Path, name: str) -> None:
    import yaml

    setup = read_accelerate_config(EXAMPLES / name)
    processes = setup.num_processes or 2
    out = accelerate_yaml(setup, processes)
    path = write(tmp_path, yaml.safe_dump(out))
    again = read_accelerate_config(path, processes=processes)
    assert (again.num_machines, again.main_process_ip, again.mixed_precision) == (
        setup.num_machines, setup.main_process_ip, setup.mixed_precision if not setup.on_cpu else "no")
    for before, after in ((setup.deepspeed, again.deepspeed), (setup.fsdp, again.fsdp)):
        if before is None or after is None:
            assert before is after
            continue
        # the same choices; our defaults (e.g. the auto-wrap policy) are added, the user's extras kept
        assert dataclasses.replace(after, extra={}) == dataclasses.replace(before, extra={})  # type: ignore[arg-type]
        assert after.extra.items() >= before.extra.items()
    assert again.on_cpu == (name == "cpu-gloo.yaml") or again.distributed_type == "MULTI_GPU"


@trainer_only
@pytest.mark.parametrize("name", ["cpu-gloo.yaml", "one-node-gpus.yaml", "deepspeed-zero2.yaml",
                                  "deepspeed-zero3.yaml", "fsdp.yaml", "multi-node.yaml"])
def test_accelerate_loads_the_yaml_we_write(tmp_path: Path, name: str) -> None:
    import yaml
    from accelerate.commands.config.config_args import load_config_from_file

    setup = read_accelerate_config(EXAMPLES / name)
    out = accelerate_yaml(setup, setup.num_processes or 2)
    loaded = load_config_from_file(str(write(tmp_path, yaml.safe_dump(out))))
    assert loaded.num_processes == (setup.num_processes or 2)
    assert loaded.distributed_type.value == out["distributed_type"]
    assert loaded.deepspeed_config.get("zero_stage") == (setup.deepspeed.zero_stage if setup.deepspeed else None)
    assert loaded.fsdp_config.get("fsdp_version") == (setup.fsdp.version if setup.fsdp else None)
    assert loaded.use_cpu is False  # the torchrun launcher on CPU too


@trainer_only
def test_accelerate_parses_the_command_we_launch(tmp_path: Path) -> None:
    from accelerate.commands.launch import launch_command_parser

    command = accelerate_launch_command("/venv/bin/python", tmp_path / "a.yaml", 2, 41234,
                                        ["app.local.parallel.worker", "--rendezvous", str(tmp_path)])
    assert command[:3] == ["/venv/bin/python", "-m", "accelerate.commands.launch"]
    args = launch_command_parser().parse_args(command[3:])
    assert (args.config_file, args.num_processes, args.main_process_port, args.module) == (
        str(tmp_path / "a.yaml"), 2, 41234, True)
    assert (args.training_script, args.training_script_args) == ("app.local.parallel.worker", ["--rendezvous",
                                                                                          str(tmp_path)])
    several = accelerate_launch_command("python", "m.yaml", 8, None, ["app.local.parallel.worker"])
    assert "--main_process_port" not in several  # several machines: the YAML's port, the same everywhere


def test_no_secret_goes_on_the_launch_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """argv is readable by every user of the machine: a per-job token travels in the environment."""
    token = "tok_" + "x" * 24
    monkeypatch.setenv("SYNTH_TUI_RANK_TOKEN", token)
    command = accelerate_launch_command("python", "a.yaml", 2, 40000, ["app.local.parallel.worker", "--job", "j1"])
    assert token not in " ".join(command)
    assert not any(arg in launch_env(None, 2, cores=2).values() for arg in [token])
    for flag in ("--token", "--api-key=abc", "--secret", "--password"):
        with pytest.raises(ValueError, match="secret on the command line"):
            accelerate_launch_command("python", "a.yaml", 2, 40000, ["app.local.parallel.worker", flag, "abc"])


# -- vLLM ------------------------------------------------------------------------------------------

def test_vllm_plans_are_checked() -> None:
    assert VllmPlan().mode == "off"
    for bad in (dict(mode="server"), dict(mode="server", server_url="ftp://x"), dict(mode="off", server_url="http://x"),
                dict(mode="colocate", gpu_memory_utilization=1.5), dict(mode="colocate", tensor_parallel_size=0),
                dict(mode="fast")):
        with pytest.raises(ConfigError):
            VllmPlan(**bad)  # type: ignore[arg-type]


@trainer_only
def test_trls_parser_reads_our_vllm_serve_line() -> None:
    from trl.scripts.vllm_serve import build_command, make_parser

    command = vllm_serve_command("Qwen/Qwen3-0.6B", 8011, 2, gpu_memory_utilization=0.8, max_model_len=4096)
    assert command[:2] == ["trl", "vllm-serve"]
    (args,) = make_parser(prog="trl vllm-serve").parse_args_into_dataclasses(command[2:])
    assert (args.model, args.port, args.tensor_parallel_size, args.gpu_memory_utilization, args.max_model_len,
            args.host) == ("Qwen/Qwen3-0.6B", 8011, 2, 0.8, 4096, "127.0.0.1")
    served = build_command(args)  # what TRL 1.16 then runs: vLLM's own server, as TRL needs it
    assert served[served.index("serve") + 1] == "Qwen/Qwen3-0.6B" and "--weight-transfer-config" in served
    assert served[served.index("--tensor-parallel-size") + 1] == "2"


@trainer_only
@pytest.mark.parametrize(("plan", "config"), [
    (VllmPlan(), None), (VllmPlan("server", "http://10.0.0.5:8000"), "one-node-gpus.yaml"),
    (VllmPlan("colocate", gpu_memory_utilization=0.4, tensor_parallel_size=2), "deepspeed-zero3.yaml")])
def test_grpo_vllm_kwargs_are_grpoconfig_fields(tmp_path: Path, plan: VllmPlan, config: str | None) -> None:
    from trl import GRPOConfig

    setup = read_accelerate_config(EXAMPLES / config) if config else None
    kwargs = grpo_vllm_kwargs(plan, setup)
    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert set(kwargs) <= names
    assert kwargs["use_vllm"] is (plan.mode != "off") and kwargs["bf16"] is (config is not None)
    if plan.mode != "off":
        assert kwargs["vllm_mode"] == plan.mode
    if not kwargs["bf16"]:  # bf16 may need a GPU to construct; the CPU case is built for real
        made = GRPOConfig(output_dir=str(tmp_path), **kwargs)
        assert made.use_cpu and not made.use_vllm


def test_connect_is_refused_without_a_gpu() -> None:
    with pytest.raises(NoGpuError, match=r"vLLM generation \(server\) was asked, but no CUDA GPU was found"):
        VllmGenerator.connect(VllmPlan("server", "http://127.0.0.1:9"), has_cuda=no_cuda)
    with pytest.raises(NoGpuError, match=r"vLLM generation \(colocate\) was asked, but no CUDA GPU was found"):
        VllmGenerator.connect(VllmPlan("colocate"), has_cuda=no_cuda, start=lambda: None)
    with pytest.raises(ConfigError, match="needs a vLLM plan, server or colocate"):
        VllmGenerator.connect(VllmPlan(), has_cuda=no_cuda)


@pytest.fixture
def fake_vllm() -> Iterator[str]:
    with serving() as url:
        yield url


@trainer_only
def test_the_generator_drives_trls_client_against_a_fake_server(fake_vllm: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """TRL's real VLLMClient (its vLLM-installed check lifted) on loopback: our turn's request and
    the parsing of its answer; the weight push itself is NCCL and needs GPUs."""
    client = trls_client(fake_vllm, monkeypatch)
    generator = VllmGenerator(client, temperature=0.7, top_p=0.9, max_tokens=32)
    turn = generator.turn([1, 2, 3], seed=11, grammar='root ::= "a"')
    assert (turn.prompt_ids, turn.completion_ids, turn.logprobs) == ([1, 2, 3], [7, 8, 2], [-0.5, -0.25, -0.125])
    path, body = [(p, b) for p, b in FakeVllm.seen if p == "/v1/completions"][0]
    assert (body["prompt"], body["temperature"], body["top_p"], body["max_tokens"], body["seed"], body["n"]) == (
        [[1, 2, 3]], 0.7, 0.9, 32, 11, 1)
    assert body["structured_outputs"] == {"grammar": 'root ::= "a"'} and body["return_token_ids"] is True
    client.reset_prefix_cache()
    assert FakeVllm.seen[-1][0] == "/reset_prefix_cache"


def test_weights_are_pushed_then_the_prefix_cache_dropped() -> None:
    calls: list[str] = []

    class Client:
        def generate(self, prompts: list[list[int]], **kwargs: Any) -> dict[str, Any]:
            return {"prompt_ids": prompts, "completion_ids": [[5]], "logprobs": [[[None]]],
                    "logprob_token_ids": [[[5]]]}

        def update_model_params(self, model: Any) -> None:
            calls.append(f"update {model}")

        def reset_prefix_cache(self) -> None:
            calls.append("reset")

    generator = VllmGenerator(Client())
    generator.sync_weights("model")
    assert calls == ["update model", "reset"] and generator.weight_syncs == 1
    with pytest.raises(ValueError, match="no logprob for the token at position 0"):
        generator.turn([1])

    from app.local.policies.trl_compat import mark_weights_synced, synced_step

    class Trainer:
        vllm_generation = type("G", (), {"sync_weights": lambda self: calls.append("trainer sync")})()
        state = type("S", (), {"global_step": -1})()

    trainer = Trainer()
    mark_weights_synced(trainer)  # as GRPOTrainer starts: no step loaded
    trainer.state.global_step = 3
    generator.sync_through_trainer(trainer)
    assert calls[-1] == "trainer sync" and synced_step(trainer) == 3  # TRL's own sync then skipped
