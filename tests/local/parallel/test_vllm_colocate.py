"""Colocated vLLM (`synth-tui backend --trainer lm --vllm-colocate [FRACTION]`: TRL's
vllm_mode "colocate", the engine inside the trainer's process, on its GPU), tested up to the GPU:
the flag and its plan, the refusals on this machine (no CUDA, no vllm) at the backend's start and
at a job's, the GRPOConfig the policy builds, and the turns and weight syncs against a fake engine
shaped as TRL's VLLMGeneration and vLLM's outputs. app/local/parallel/vllm.py, docs/scaling.md."""

from __future__ import annotations

import functools
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from app.cli.dispatch import main
from app.cli.parser import build_parser
from app.core.errors import UsageError
from app.local.parallel.launch import check_flags, vllm_plan
from app.local.parallel.vllm import ColocatedVllm, GeneratedTurn, VllmGenerator, VllmPlan, refuse_colocated

COLOCATED_FIELDS = {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.5,
                    "vllm_tensor_parallel_size": 1, "vllm_enable_sleep_mode": False}


def test_the_flag_plans_colocated_vllm_with_trls_default_share() -> None:
    parse = build_parser().parse_args
    assert parse(["backend", "--vllm-colocate"]).vllm_colocate == 0.3  # TRL's vllm_gpu_memory_utilization
    assert parse(["backend", "--vllm-colocate", "0.5"]).vllm_colocate == 0.5
    assert parse(["backend"]).vllm_colocate is None
    assert vllm_plan(None, 0.5) == VllmPlan("colocate", gpu_memory_utilization=0.5)
    assert vllm_plan(None) == VllmPlan()
    with pytest.raises(UsageError, match="cannot both be given"):
        vllm_plan("http://127.0.0.1:8000", 0.3)
    assert "it needs --trainer lm" in (check_flags("tabular", 1, None, None, 0.3) or "")
    assert "choose one" in (check_flags("lm", 1, None, "http://127.0.0.1:8000", 0.3) or "")
    assert check_flags("lm", 1, None, None, 0.3) is None


@pytest.mark.parametrize("share", ["1.5", "0", "half"])
def test_a_share_that_is_not_one_is_a_usage_error(share: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        build_parser().parse_args(["backend", "--vllm-colocate", share])
    assert ended.value.code == 2
    assert "--vllm-colocate" in capsys.readouterr().err


def test_colocated_vllm_needs_the_vllm_package_and_one_gpu_per_engine() -> None:
    with pytest.raises(UsageError, match="the vllm package is not installed") as refused:
        refuse_colocated(VllmPlan("colocate"), has_cuda=lambda: True, has_vllm=lambda: False)
    assert "pip install '.[gpu]'" in (refused.value.hint or "")
    with pytest.raises(Exception, match="tensor_parallel_size must be 1"):
        refuse_colocated(VllmPlan("colocate", tensor_parallel_size=2), has_cuda=lambda: True, has_vllm=lambda: True)
    refuse_colocated(VllmPlan("colocate"), has_cuda=lambda: True, has_vllm=lambda: True)  # a GPU machine: none


@pytest.mark.usefixtures("trainer_extra")  # the refusal asks torch whether there is a GPU
@pytest.mark.parametrize("flags", [["--trainer", "lm", "--vllm-colocate"], ["--vllm-colocate", "0.4"]])
def test_the_backend_refuses_colocated_vllm_without_a_gpu_at_start(flags: list[str],
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNTH_API_KEY", "sk_test_x")
    assert main(["backend", *flags]) == 2
    err = capsys.readouterr().err
    assert "vLLM generation (colocate) was asked, but no CUDA GPU was found" in err
    assert "leave --vllm-colocate out" in err and "Traceback" not in err


def _settings(model: Path) -> Any:
    from app.local.policies.base import PolicySettings

    return PolicySettings(model=str(model), learning_rate=1e-5, seed=0, total_steps=2, batch_size=1, group_size=2,
                          options={"trainer_mode": "lora"})


def test_a_job_with_colocated_vllm_here_fails_at_its_start_in_a_sentence(tiny_model: Path) -> None:
    from app.local.policies import make_policy
    from app.local.policies.base import Parallel
    from app.local.policies.lm.model import ModelUnavailable

    with pytest.raises(ModelUnavailable) as refused:
        make_policy("lm", _settings(tiny_model), Parallel(vllm_colocate=0.3))
    said = str(refused.value)
    assert "vLLM generation (colocate) was asked, but no CUDA GPU was found" in said
    assert "leave --vllm-colocate out" in said and "Traceback" not in said


def test_the_policy_builds_trls_colocate_config_and_its_trainer_at_the_first_turn(tiny_model: Path) -> None:
    from app.local.policies.lm.policy import LmPolicy

    connect = functools.partial(VllmGenerator.connect, has_cuda=lambda: True, has_vllm=lambda: True)
    policy = LmPolicy(_settings(tiny_model), vllm=VllmPlan("colocate", gpu_memory_utilization=0.5), connect=connect)
    try:
        assert policy.generator is not None and isinstance(policy.generator.client, ColocatedVllm)
        assert policy.generator.trainer_kwargs() == COLOCATED_FIELDS
        config = policy.grpo_config()
        assert {key: getattr(config, key) for key in COLOCATED_FIELDS} == COLOCATED_FIELDS
        assert policy.describe().data["generation"] == "colocated vLLM (50% of the GPU's memory)"
        assert policy.generator.client.attach in policy.trainer_hooks  # the engine, once the trainer is built
        assert policy.training is None  # built by the first turn (TRL makes the engine in its constructor)
    finally:
        policy.close()


class _Recorded:
    """vLLM's SamplingParams and StructuredOutputsParams, as the adapter builds them."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Recorded) and type(self) is type(other) and self.kwargs == other.kwargs


class _Structured(_Recorded):
    pass


def _sample(token: int, logprob: float) -> dict[int, Any]:
    return {token: types.SimpleNamespace(logprob=logprob, rank=1)}


class _FakeLlm:
    """vLLM's offline LLM as TRL's colocate mode holds it: generate(prompts, sampling_params, use_tqdm)."""

    def __init__(self, client: ColocatedVllm) -> None:
        self.client, self.calls, self.resets = client, [], 0

    def generate(self, prompts: list[dict[str, Any]], sampling_params: Any, use_tqdm: bool) -> list[Any]:
        assert self.client.lock.locked()  # one caller at a time in the engine
        self.calls.append((prompts, sampling_params, use_tqdm))
        completion = types.SimpleNamespace(token_ids=[5, 6], logprobs=[_sample(5, -0.5), _sample(6, -0.25)])
        return [types.SimpleNamespace(prompt_token_ids=p["prompt_token_ids"], outputs=[completion]) for p in prompts]

    def reset_prefix_cache(self) -> None:
        self.resets += 1


@pytest.mark.usefixtures("trainer_extra")  # TRL's extract_logprobs reads the outputs
def test_turns_go_to_the_trainers_engine_and_syncs_wait_for_them(monkeypatch: pytest.MonkeyPatch) -> None:
    import trl.generation.vllm_generation  # noqa: F401 - imported before vLLM's stand-in (it asks whether vllm is there)

    from app.local.policies.trl_compat import synced_step

    vllm = types.ModuleType("vllm")
    vllm.SamplingParams = type("SamplingParams", (_Recorded,), {})  # type: ignore[attr-defined]
    params = types.ModuleType("vllm.sampling_params")
    params.StructuredOutputsParams = _Structured  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", params)

    syncs: list[bool] = []
    started: list[int] = []
    trainer = types.SimpleNamespace(state=types.SimpleNamespace(global_step=3))

    def start() -> None:  # the policy's: builds the trainer, whose hook hands over the engine
        started.append(1)
        client.attach(trainer)

    client = ColocatedVllm(start)
    llm = _FakeLlm(client)
    trainer.vllm_generation = types.SimpleNamespace(llm=llm, sync_weights=lambda: syncs.append(client.lock.locked()))
    generator = VllmGenerator(client, plan=VllmPlan("colocate"), temperature=0.7, top_p=0.9, max_tokens=12)

    turn = generator.turn([1, 2, 3], seed=4, grammar='root ::= "x"', max_tokens=8)
    assert (turn.prompt_ids, turn.completion_ids, turn.logprobs) == ([1, 2, 3], [5, 6], [-0.5, -0.25])
    assert isinstance(turn, GeneratedTurn) and started == [1]
    prompts, sampling, use_tqdm = llm.calls[0]
    assert prompts == [{"prompt_token_ids": [1, 2, 3]}] and use_tqdm is False
    assert sampling == vllm.SamplingParams(n=1, temperature=0.7, top_p=0.9, max_tokens=8, logprobs=0, seed=4,
                                           structured_outputs=_Structured(grammar='root ::= "x"'))
    generator.turn([1, 2], greedy=True)  # an evaluation's turn: temperature 0, no grammar
    assert started == [1] and llm.calls[1][1].kwargs["temperature"] == 0.0
    assert llm.calls[1][1].kwargs["structured_outputs"] is None and llm.calls[1][1].kwargs["max_tokens"] == 12

    generator.after_step(trainer)  # TRL's sync of the trainer's weights into the engine, under the engine's lock
    assert syncs == [True] and synced_step(trainer) == 3 and generator.weight_syncs == 1
    client.reset_prefix_cache()
    assert llm.resets == 1
