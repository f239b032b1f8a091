"""The `lm` policy generating through a vLLM server (`synth-tui backend --vllm-server URL`):
TRL's real VLLMClient against the fake vLLM server on loopback (tests/local/fake_vllm.py), the
tiny model trained by TRL's GRPOTrainer on what vLLM sampled. What needs a GPU (the weight push
over NCCL, vLLM itself) is refused here, and that refusal is tested. docs/scaling.md."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pytest

from app.cli.dispatch import main
from app.local.parallel.vllm import VllmGenerator, VllmPlan
from app.local.policies.base import Episode, PolicyCannotAct
from app.local.taskapps.press import PRESS_TOOL, TOOL_CHOICE

from ..fake_vllm import FakeVllm, serving, trls_client
from ..policies.test_lm_policy import press_messages, settings

PRESS_C = '<tool_call>\n{"name": "press", "arguments": {"label": "C"}}\n</tool_call><|im_end|>'


class RecordingGenerator(VllmGenerator):
    """The real adapter on TRL's real client; only the weight push (NCCL, GPUs) is recorded."""

    steps: list[int]

    def after_step(self, trainer: Any) -> None:
        self.steps.append(int(trainer.state.global_step))


def policy_on(url: str, tiny_model: Path, monkeypatch: pytest.MonkeyPatch, **options: Any) -> Any:
    from app.local.policies.lm.policy import LmPolicy

    def connect(plan: VllmPlan, **sampling: Any) -> VllmGenerator:
        generator = RecordingGenerator(trls_client(plan.server_url or "", monkeypatch), **sampling)
        generator.steps = []
        return generator

    return LmPolicy(settings(tiny_model, **options), vllm=VllmPlan("server", url), connect=connect)


def encoded(tiny_model: Path, text: str) -> list[int]:
    from transformers import AutoTokenizer

    return list(AutoTokenizer.from_pretrained(tiny_model)(text, add_special_tokens=False)["input_ids"])


def test_a_turn_is_vllms_sample_with_its_logprobs_and_the_forced_tokens_masked(
        tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = encoded(tiny_model, PRESS_C)
    logprobs = [-0.01 * (i + 1) for i in range(len(ids))]
    with serving(lambda prompt: (ids, logprobs)) as url:
        policy = policy_on(url, tiny_model, monkeypatch, max_tokens=64)
        act = policy.act(press_messages("C"), [PRESS_TOOL], TOOL_CHOICE, "trace_j:r1", random.Random(0))
    call = act.message["tool_calls"][0]["function"]
    assert (call["name"], call["arguments"]) == ("press", '{"label": "C"}')
    sequence = act.memo.sequence
    assert sequence.ids[-len(ids):] == ids and sequence.logprobs[-len(ids):] == logprobs
    # the grammar forced the scaffold (one token allowed: masked); the label was a choice
    chosen = sequence.mask[-len(ids):]
    assert 1 <= sum(chosen) < len(ids)
    label_at = next(i for i in range(len(ids)) if "C" in policy.tokenizer.decode(ids[i:i + 1]))
    assert chosen[label_at] == 1
    body = next(b for p, b in FakeVllm.seen if p == "/v1/completions")
    assert body["prompt"] == [sequence.ids[:sequence.prompt_len]] and body["max_tokens"] == 64
    assert isinstance(body["seed"], int) and body["n"] == 1
    grammar = body["structured_outputs"]["grammar"]
    # the tool call's grammar as EBNF in xgrammar's dialect (vLLM's default structured-output backend)
    import xgrammar as xgr

    assert 'press' in grammar and str(xgr.Grammar.from_ebnf(grammar)) == grammar
    assert policy.describe().data["generation"] == f"vLLM server at {url}"


def test_turns_reach_the_server_side_by_side_not_one_at_a_time(tiny_model: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM batches the turns in flight: the policy must not hold the model's lock around them."""
    ids = encoded(tiny_model, PRESS_C)
    both_in = threading.Barrier(2, timeout=60)

    def answer(prompt: list[int]) -> tuple[list[int], list[float]]:
        both_in.wait()  # a broken barrier (the second turn never came) answers 500
        return ids, [-0.1] * len(ids)

    with serving(answer) as url:
        policy = policy_on(url, tiny_model, monkeypatch)
        results: dict[str, Any] = {}

        def turn(cid: str) -> None:
            try:
                results[cid] = policy.act(press_messages("C"), [PRESS_TOOL], TOOL_CHOICE, cid, random.Random(1))
            except PolicyCannotAct as exc:
                results[cid] = exc

        threads = [threading.Thread(target=turn, args=(cid,)) for cid in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    assert all(not isinstance(results[cid], Exception) for cid in ("a", "b")), results


def test_a_server_that_fails_a_turn_is_the_turns_problem_in_a_sentence(
        tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(prompt: list[int]) -> tuple[list[int], list[float]]:
        raise RuntimeError("out of KV cache")

    with serving(refuse) as url:
        policy = policy_on(url, tiny_model, monkeypatch)
        with pytest.raises(PolicyCannotAct, match="the vLLM server did not generate this turn"):
            policy.act(press_messages("C"), [PRESS_TOOL], TOOL_CHOICE, "x", random.Random(2))


def test_grpo_trains_on_vllms_samples_and_pushes_the_weights_after_each_step(
        tiny_model: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    ids = {label: encoded(tiny_model, PRESS_C.replace('"C"', f'"{label}"')) for label in "AC"}
    answers = iter([ids["A"], ids["C"], ids["C"], ids["A"]])
    with serving(lambda prompt: (ids_ := next(answers), [-1.0] * len(ids_))) as url:
        policy = policy_on(url, tiny_model, monkeypatch)
        try:
            for step in (1, 2):
                group = []
                for i in range(2):
                    act = policy.act(press_messages("C"), [PRESS_TOOL], TOOL_CHOICE, f"s{step}-{i}",
                                     random.Random(step * 10 + i))
                    label = act.message["tool_calls"][0]["function"]["arguments"]
                    group.append(Episode([act.memo], 1.0 if '"C"' in label else 0.0))
                stats = policy.update([group])
                assert stats.extra["reward_mean"] == pytest.approx(0.5) and stats.loss == stats.loss
                # pushed in the training thread before update returned: the next turns see the new weights
                assert policy.generator.steps == list(range(1, step + 1))
            assert not policy.training.trainer.args.use_vllm  # a client made by hand: no NCCL push here
            policy.save(tmp_path)
        finally:
            policy.close()
        # a resumed job: the loaded weights go to the server before its first rollouts, not after a step
        resumed = policy_on(url, tiny_model, monkeypatch)
        try:
            resumed.load(tmp_path)
            assert resumed.generator.steps == [0] and resumed.steps_done == 2
        finally:
            resumed.close()


@pytest.mark.usefixtures("trainer_extra")
def test_a_server_plans_trainer_fields_are_grpoconfigs() -> None:
    from trl import GRPOConfig

    generator = VllmGenerator(object(), plan=VllmPlan("server", "http://u:pw@10.0.0.5:8000"))  # type: ignore[arg-type]
    kwargs = generator.trainer_kwargs()
    assert kwargs == {"use_vllm": True, "vllm_mode": "server", "vllm_server_base_url": "http://u:pw@10.0.0.5:8000",
                      "vllm_server_timeout": 240.0}
    assert set(kwargs) <= {f.name for f in __import__("dataclasses").fields(GRPOConfig)}
    assert generator.describe() == "vLLM server at http://10.0.0.5:8000"  # no user:password in an event


@pytest.mark.usefixtures("trainer_extra")  # the refusal asks torch whether there is a GPU
@pytest.mark.parametrize(("flags", "said"), [
    (["--trainer", "lm", "--vllm-server", "http://127.0.0.1:8000"],
     "vLLM generation (server) was asked, but no CUDA GPU was found"),
    (["--vllm-server", "http://127.0.0.1:8000"], "vLLM generation (server) was asked"),  # auto means lm
    (["--trainer", "lm", "--vllm-server", "ftp://host"], "--vllm-server 'ftp://host' is not a vLLM server's http"),
    (["--trainer", "lm", "--vllm-server", "u:hunter2@host"], "--vllm-server is not a vLLM server's http(s) URL"),
    (["--trainer", "tabular", "--vllm-server", "http://127.0.0.1:8000"], "it needs --trainer lm"),
])
def test_the_backend_refuses_vllm_without_a_gpu_at_start(flags: list[str], said: str,
                                                         capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SYNTH_API_KEY", "sk_test_x")
    monkeypatch.setattr("app.local.parallel.accelerate.cuda_available", lambda: False)
    assert main(["backend", *flags]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and "hunter2" not in err
    if "CUDA" in said:
        assert "leave --vllm-server out" in err and "--processes N` on CPU" not in err
