"""The `lm` policy (app/local/policies/lm/: policy.py and its parts): a real (tiny) language model
acting through the chat endpoint and trained with TRL's GRPOTrainer. CPU, offline, seeded; needs the trainer extra.
docs/embedded-policy.md#the-lm-policy."""

from __future__ import annotations

import json
import os
import random
import re
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from app.local.policies.base import Episode, PolicySettings
from app.local.servers import ServerHandle, start_backend
from app.local.taskapps.press import PRESS_TOOL, SYSTEM_PROMPT, TOOL_CHOICE
from support.cli import run_cli
from support.lm_fixtures import press_payload

from ..conftest import API_KEY, ENV_KEY, api_client, create_job, events_of, wait_terminal
from ..state.test_local_resume import backend_process, job_killed_at_step

pytestmark = pytest.mark.usefixtures("trainer_extra")  # torch: the slow tier; fails, never skips, without it


def settings(model: Path, **options: Any) -> PolicySettings:
    return PolicySettings(model=str(model), learning_rate=1e-2, seed=0, total_steps=2, batch_size=1, group_size=2,
                          options={"trainer_mode": "full", **options})


def press_messages(label: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"Press {label}."}]


# -- units ----------------------------------------------------------------------------------


def test_the_episode_is_one_sequence_and_env_mask_covers_the_task_apps_tokens(tiny_model: Path) -> None:
    from app.local.policies.lm.policy import LmPolicy

    policy = LmPolicy(settings(tiny_model))
    assert policy.template_kind.startswith("TRL's training variant")  # Qwen3's own is not prefix-preserving
    rng = random.Random(0)
    messages = press_messages("C")
    first = policy.act(messages, [PRESS_TOOL], TOOL_CHOICE, "trace_j:r1", rng)
    messages = [*messages, first.message, {"role": "tool", "tool_call_id": first.call_id, "content": "Right."}]
    second = policy.act(messages, [PRESS_TOOL], TOOL_CHOICE, "trace_j:r1", rng)
    sequence = second.memo.sequence
    assert first.memo.sequence is sequence and policy.restarts == 0
    tok = policy.tokenizer
    full = policy._render([*messages, second.message], [PRESS_TOOL])
    # the joined sequence is the text the template renders for the whole episode
    assert full.startswith(tok.decode(sequence.ids, skip_special_tokens=False))
    prompt = sequence.ids[:sequence.prompt_len]
    assert tok.decode(prompt, skip_special_tokens=False) == policy._render(press_messages("C"), [PRESS_TOOL])
    one, two = first.memo, second.memo
    assert one.end - one.tokens == sequence.prompt_len  # the first completion follows the first prompt
    between = slice(one.end, two.end - two.tokens)  # what the template added: the task app's tokens
    assert tok.decode(sequence.ids[between], skip_special_tokens=False) == (
        "\n<|im_start|>user\n<tool_response>\nRight.\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert set(sequence.mask[:sequence.prompt_len]) == {0} and set(sequence.mask[between]) == {0}
    for memo in (one, two):
        completion = slice(memo.end - memo.tokens, memo.end)
        text = tok.decode(sequence.ids[completion], skip_special_tokens=False)
        assert text.startswith("<tool_call>") and text.endswith("</tool_call><|im_end|>")
        # the model chose the label; the grammar forced the scaffold (masked: no choice, no gradient)
        assert 1 <= sum(sequence.mask[completion]) < memo.tokens
    # history the task app edited: the episode starts again, counted, without failing
    edited = [*press_messages("D"), *messages[2:]]
    policy.act(edited, [PRESS_TOOL], TOOL_CHOICE, "trace_j:r1", rng)
    assert policy.restarts == 1


def test_constrained_calls_always_parse_and_match_the_schema(tiny_model: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from app.local.policies.lm.policy import LmPolicy

    tool = {"type": "function", "function": {"name": "move", "parameters": {
        "type": "object", "properties": {"steps": {"type": "integer", "minimum": 1, "maximum": 3},
                                         "direction": {"type": "string", "enum": ["up", "down"]}},
        "required": ["steps", "direction"], "additionalProperties": False}}}
    policy = LmPolicy(settings(tiny_model, max_tokens=96))
    rng = random.Random(1)
    for i in range(8):
        act = policy.act(press_messages("A"), [PRESS_TOOL, tool], "required", f"c{i}", rng)
        call = act.message["tool_calls"][0]["function"]
        schema = (tool if call["name"] == "move" else PRESS_TOOL)["function"]["parameters"]
        jsonschema.validate(json.loads(call["arguments"]), schema)
    assert policy.unfinished_calls == 0


def test_save_and_load_round_trip(tiny_model: Path, tmp_path: Path) -> None:
    import torch

    from app.local.policies import load
    from app.local.policies.lm.policy import LmPolicy

    for mode in ("full", "lora"):
        policy = LmPolicy(settings(tiny_model, trainer_mode=mode))
        with torch.no_grad():
            for p in policy.model.parameters():
                if p.requires_grad:
                    p.add_(0.01)
        folder = tmp_path / mode
        folder.mkdir()
        policy.save(folder)
        again = load(folder, settings(tiny_model, trainer_mode=mode))
        for (name, a), b in zip(policy.model.state_dict().items(), again.model.state_dict().values(), strict=True):
            assert torch.equal(a, b), name


def test_a_checkpoint_is_private_whatever_the_umask(tiny_model: Path, tmp_path: Path) -> None:
    """A saved policy is the user's fine-tuned model: every file 0600 and folder 0700, the
    weights and tokenizer that transformers writes included, under the common umask 022."""
    import stat

    from app.local.policies.lm.policy import LmPolicy
    from app.local.policies.tabular.policy import TabularPolicy
    from app.local.state.checkpoints import Checkpoints

    old = os.umask(0o022)
    try:
        saved = [Checkpoints(tmp_path / "checkpoints").save("job_a", 3, TabularPolicy()),
                 Checkpoints(tmp_path / "checkpoints").save(
                     "job_b", 1, LmPolicy(settings(tiny_model, trainer_mode="lora")))]
    finally:
        os.umask(old)
    wrong = []
    for target in saved:
        for folder, _dirs, files in os.walk(target):
            for path in [Path(folder)] + [Path(folder) / f for f in files]:
                expected = 0o700 if path.is_dir() else 0o600
                if stat.S_IMODE(path.stat().st_mode) != expected:
                    wrong.append(f"{path.relative_to(tmp_path)}: {oct(path.stat().st_mode)}")
    assert len(list(saved[1].iterdir())) > 1 and not wrong, wrong


def test_auto_falls_back_to_the_stand_in_saying_why_and_lm_fails_at_once(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from app.local.policies import make_policy
    from app.local.policies.lm.model import ModelUnavailable

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    missing = PolicySettings(model="synth-tui-tests/no-such-model", learning_rate=1e-5, seed=0)
    policy, warning = make_policy("auto", missing)
    assert policy.kind == "tabular" and warning is not None
    assert "hf download synth-tui-tests/no-such-model" in warning and "synth-tui[trainer]" in warning
    with pytest.raises(ModelUnavailable, match="hf download synth-tui-tests/no-such-model"):
        make_policy("lm", missing)
    with pytest.raises(ModelUnavailable, match="without a model"):
        make_policy("lm", PolicySettings(model=str(tmp_path), learning_rate=1e-5, seed=0))
    (tmp_path / "config.json").write_text("{}")  # a folder copied in part: said, not transformers' error
    with pytest.raises(ModelUnavailable, match=r"has config.json but lacks weights .* and tokenizer files"):
        make_policy("lm", PolicySettings(model=str(tmp_path), learning_rate=1e-5, seed=0))


def test_auto_trains_the_model_when_it_is_here(tiny_model: Path) -> None:
    from app.local.policies import lm_unavailable, make_policy

    assert lm_unavailable(settings(tiny_model)) is None
    policy, warning = make_policy("auto", settings(tiny_model))
    assert policy.kind == "lm" and warning is None
    info = policy.describe()
    assert info.stand_in is False and info.label == f"lm {tiny_model}"
    assert 100_000 < info.data["parameters"] < 200_000 and info.data["device"] == "cpu"
    assert set(info.data["versions"]) == {"torch", "transformers", "trl", "peft", "xgrammar"}


def test_a_job_whose_model_is_missing_fails_at_once_saying_how_to_get_it(press_app: ServerHandle, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    body = press_payload(press_app.url, tmp_path / "x", "full", steps=2, lr=1e-2)
    body["data"]["base_model"] = body["data"]["config"]["model"]["base"] = "synth-tui-tests/no-such-model"
    with start_backend(api_key=API_KEY, db_path=tmp_path / "state.sqlite3", env_api_keys=[ENV_KEY],
                       policy_kind="lm") as backend, api_client(backend) as api:
        job_id = create_job(api, body)
        job = wait_terminal(api, job_id, timeout=60)
        events = events_of(api, job_id)
    assert job["status"] == "failed"
    assert "hf download synth-tui-tests/no-such-model" in job["error"]
    assert not [e for e in events if e["type"] in ("rl.train.step", "rl.train.policy")]  # nothing trained instead


def test_an_update_runs_a_grpo_step_with_the_practitioners_numbers(tiny_model: Path) -> None:
    from app.local.policies.lm.policy import LmPolicy

    policy = LmPolicy(settings(tiny_model))
    rng = random.Random(2)
    try:
        group = []
        for i, score in enumerate((0.0, 1.0)):
            act = policy.act(press_messages("B"), [PRESS_TOOL], TOOL_CHOICE, f"u{i}", rng)
            group.append(Episode([act.memo], score))
        stats = policy.update([group])
        for key in ("reward_mean", "reward_std", "clip_ratio", "completion_tokens", "generation_tokens_per_s",
                    "step_seconds"):
            assert key in stats.extra, key
        assert stats.extra["reward_mean"] == pytest.approx(0.5)
        assert stats.entropy > 0
    finally:
        policy.close()
    assert policy.training is None


def _step(policy: Any, rng: random.Random, label: str) -> None:
    group = []
    for i, score in enumerate((0.0, 1.0)):
        act = policy.act(press_messages("B"), [PRESS_TOOL], TOOL_CHOICE, f"{label}-{i}", rng)
        group.append(Episode([act.memo], score))
    policy.update([group])


def _adam_steps(state: dict[str, Any]) -> set[float]:
    return {float(s["step"]) for s in state["state"].values()}


def test_the_trainer_makes_its_own_adamw_as_the_policy_did(tiny_model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No optimizer is handed to GRPOTrainer (DeepSpeed and FSDP take the trainer's own): the
    trainer makes torch's AdamW with the numbers the policy's own had, and a constant schedule."""
    import torch
    import trl

    from app.local.policies.lm.policy import LmPolicy

    built: list[dict[str, Any]] = []

    class Spied(trl.GRPOTrainer):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            built.append(kwargs)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(trl, "GRPOTrainer", Spied)
    policy = LmPolicy(settings(tiny_model, trainer_mode="lora"))
    config = policy.grpo_config()
    assert (config.optim, config.adam_beta1, config.adam_beta2, config.adam_epsilon, config.weight_decay) == (
        "adamw_torch", 0.9, 0.999, 1e-8, 0.0)
    assert config.lr_scheduler_type == "constant" and config.learning_rate == 1e-2
    try:
        _step(policy, random.Random(3), "o")
        _step(policy, random.Random(4), "p")
        assert policy.training is not None
        trainer = policy.training.trainer
    finally:
        policy.close()
    assert len(built) == 1 and "optimizers" not in built[0]
    inner = trainer.optimizer.optimizer  # accelerate's wrapper around the trainer's own
    assert type(inner) is torch.optim.AdamW
    for group in inner.param_groups:
        assert (group["lr"], group["betas"], group["eps"], group["weight_decay"]) == (1e-2, (0.9, 0.999), 1e-8, 0.0)
        assert not group["fused"] and not group["amsgrad"]
    trained = {id(p) for p in policy.model.parameters() if p.requires_grad}
    assert {id(p) for g in inner.param_groups for p in g["params"]} == trained  # the adapter only
    assert trainer.lr_scheduler.get_last_lr() == [1e-2, 1e-2]


def test_a_resumed_policy_goes_on_with_the_saved_adam_moments(tiny_model: Path, tmp_path: Path) -> None:
    import torch

    from app.local.policies.lm.checkpoint import OPTIMIZER
    from app.local.policies.lm.policy import LmPolicy

    rng = random.Random(5)
    first = LmPolicy(settings(tiny_model))
    try:
        _step(first, rng, "a")
        _step(first, rng, "b")
        first.save(tmp_path)
    finally:
        first.close()
    saved = torch.load(tmp_path / OPTIMIZER, weights_only=True)
    assert _adam_steps(saved) == {2.0} and not (tmp_path / "training_args.bin").exists()
    second = LmPolicy(replace(settings(tiny_model), total_steps=3))
    second.load(tmp_path)
    try:
        _step(second, rng, "c")
        assert second.training is not None
        now = second.training.trainer.optimizer.state_dict()
    finally:
        second.close()
    assert _adam_steps(now) == {3.0}  # the moments went on: a fresh AdamW would be at step 1


@pytest.mark.parametrize("damage", ["garbage", "sparse 5 GB"])
def test_a_damaged_checkpoint_says_it_could_not_be_read(tiny_model: Path, tmp_path: Path, damage: str) -> None:
    """It said "Internal error in the embedded backend at step N: SafetensorError…" (issue 41 item 7);
    the tabular job's words: "could not resume: its checkpoint could not be read (…)"."""
    from app.local.policies.lm.model import ModelUnavailable
    from app.local.policies.lm.policy import LmPolicy

    first = LmPolicy(settings(tiny_model))
    try:
        first.save(tmp_path)
    finally:
        first.close()
    weights = tmp_path / "model.safetensors"
    with open(weights, "r+b") as handle:
        if damage == "garbage":
            handle.write(b"\xff" * 64)
        else:
            handle.truncate(5 << 30)  # sparse: no disk used
    second = LmPolicy(settings(tiny_model))
    try:
        with pytest.raises(ModelUnavailable, match=r"^could not resume: its checkpoint could not be read \("):
            second.load(tmp_path)
    finally:
        second.close()


def test_a_checkpoint_without_its_optimizer_state_says_so_in_the_jobs_events(tiny_model: Path,
                                                                              tmp_path: Path) -> None:
    """A deleted optimizer.pt resumed "from its checkpoint" with Adam reset, said only in the server's
    log and blamed there on another layout (issue 41 item 7): the job's policy now warns."""
    from app.local.policies.lm.checkpoint import OPTIMIZER
    from app.local.policies.lm.policy import LmPolicy

    first = LmPolicy(settings(tiny_model))
    try:
        first.save(tmp_path)  # before any step: the model, no optimizer state
    finally:
        first.close()
    assert not (tmp_path / OPTIMIZER).exists()
    second = LmPolicy(settings(tiny_model))
    try:
        assert second.describe().warnings == ()
        second.load(tmp_path)
        warnings = second.describe().warnings
    finally:
        second.close()
    assert len(warnings) == 1 and "optimizer.pt is missing" in warnings[0] and "Adam moments" in warnings[0]


def test_the_engines_save_and_load_through_accelerate_on_the_real_trainer(
        tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSpeed and FSDP do not run without CUDA; their branch does: chosen here for this
    one-process trainer (accelerate's distributed type NO counted as an engine), the save goes
    through accelerate's save_state into engine-state/ (no optimizer.pt) and the resume through
    load_state on the real, prepared trainer, with the Adam moments going on."""
    from app.local.policies.lm import checkpoint
    from app.local.policies.lm import policy as lm

    monkeypatch.setattr(checkpoint, "ENGINES", (*checkpoint.ENGINES, "NO"))
    rng = random.Random(6)
    first = lm.LmPolicy(settings(tiny_model, trainer_mode="lora"))
    try:
        _step(first, rng, "e")
        _step(first, rng, "f")
        assert first.training is not None and checkpoint.uses_engine(first.training.trainer)
        first.save(tmp_path)
    finally:
        first.close()
    names = {p.name for p in tmp_path.iterdir()}
    assert {"adapter_model.safetensors", "policy.json", checkpoint.ENGINE_STATE} <= names
    assert checkpoint.OPTIMIZER not in names
    assert (tmp_path / checkpoint.ENGINE_STATE / "optimizer.bin").is_file()
    second = lm.LmPolicy(replace(settings(tiny_model, trainer_mode="lora"), total_steps=3))
    second.load(tmp_path)
    try:
        _step(second, rng, "g")
        assert second.training is not None
        now = second.training.trainer.optimizer.state_dict()
    finally:
        second.close()
    assert _adam_steps(now) == {3.0}


def test_an_optimizer_state_saved_in_one_group_follows_its_parameters() -> None:
    """optimizer.pt written by the policy's own AdamW (one group, the model's order) loads into
    the trainer's (two groups: with and without weight decay): each parameter keeps its moments."""
    import torch

    from app.local.policies.lm.checkpoint import regrouped

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 2))
    params = list(model.parameters())
    old = torch.optim.AdamW(params, lr=0.1, weight_decay=0.0)
    model(torch.randn(5, 3)).sum().backward()
    old.step()
    decay = [p for p in params if p.dim() > 1]
    new = torch.optim.AdamW([{"params": decay, "weight_decay": 0.0},
                             {"params": [p for p in params if p.dim() == 1], "weight_decay": 0.0}], lr=0.1)
    new.load_state_dict(regrouped(old.state_dict(), new, params))
    for p in params:
        assert torch.equal(new.state[p]["exp_avg"], old.state[p]["exp_avg"])
        assert torch.equal(new.state[p]["exp_avg_sq"], old.state[p]["exp_avg_sq"])
    same = new.state_dict()
    assert regrouped(same, new, params) is same  # the same groups: as it is
    with pytest.raises(ValueError, match="covers 6 parameters, the model trains 5"):
        regrouped(old.state_dict(), new, params[:5])


# -- end to end -----------------------------------------------------------------------------


def _train(model: Path, app: ServerHandle, tmp_path: Path, mode: str, steps: int, lr: float) -> dict[str, Any]:
    with start_backend(api_key=API_KEY, db_path=tmp_path / "state.sqlite3", env_api_keys=[ENV_KEY],
                       policy_kind="lm") as backend, api_client(backend) as api:
        job_id = create_job(api, press_payload(app.url, model, mode, steps=steps, lr=lr))
        job = wait_terminal(api, job_id, timeout=600)
        events = events_of(api, job_id)
        assert job["status"] == "succeeded", (job, [e["message"] for e in events][-5:])
        points = api.get(f"/rl/jobs/{job_id}/metrics", params={"limit": 1000}).json()["points"]
        return {"job": job, "events": events, "train": [p["value"] for p in points if p["name"] == "train.mean_score"],
                "names": {p["name"] for p in points}}


@pytest.mark.parametrize(("mode", "steps", "lr"), [("full", 8, 1e-2), ("lora", 8, 1e-2)])
def test_the_backend_trains_the_tiny_model_and_its_score_rises(tiny_model: Path, press_app: ServerHandle,
                                                              tmp_path: Path, mode: str, steps: int, lr: float) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    run = _train(tiny_model, press_app, tmp_path, mode, steps, lr)
    assert "torch" in sys.modules  # the backend ran in this process: the model really was loaded
    policy_event = next(e for e in run["events"] if e["type"] == "rl.train.policy")
    assert policy_event["data"]["stand_in"] is False and policy_event["data"]["trainer_mode"] == mode
    assert run["job"]["metadata"]["policy"]["kind"] == "lm"
    train = run["train"]
    assert len(train) == steps
    # What a GRPO practitioner reads, as metrics (the dashboard's grid, the export).
    assert {"train.reward_std", "train.clip_ratio", "train.completion_tokens", "train.generation_tokens_per_s",
            "train.step_seconds", "train.loss", "train.entropy"} <= run["names"], run["names"]
    first, last = sum(train[:3]) / 3, sum(train[-3:]) / 3
    assert last - first >= 0.3, train
    folder = Path(run["job"]["artifacts"]["model_path"])
    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    if mode == "lora":
        from peft import PeftModel

        trained = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), folder).merge_and_unload()
    else:
        trained = AutoModelForCausalLM.from_pretrained(folder)
    changed = [name for name, w in trained.state_dict().items() if not torch.equal(w, base.state_dict()[name])]
    assert changed


def test_an_lm_job_killed_mid_run_resumes_from_its_last_step(tiny_model: Path, press_app: ServerHandle,
                                                             tmp_path: Path) -> None:
    total = 5
    db = tmp_path / "state.sqlite3"
    body = press_payload(press_app.url, tiny_model, "full", steps=total, lr=1e-2)
    job_id = job_killed_at_step(db, tmp_path, body, 2, "--trainer", "lm", timeout=300)
    with backend_process(db, tmp_path, "--trainer", "lm") as (proc, server), api_client(server) as second:
        job = wait_terminal(second, job_id, timeout=300)
        events = events_of(second, job_id)
        assert job["status"] == "succeeded", (job, [e["message"] for e in events][-5:])
        points = second.get(f"/rl/jobs/{job_id}/metrics", params={"limit": 1000}).json()["points"]
    assert [e["type"] for e in events].count("rl.train.resumed") == 1
    assert [e["data"]["step"] for e in events if e["type"] == "rl.train.step"] == list(range(1, total + 1))
    assert set(Counter((p["step"], p["name"]) for p in points).values()) == {1}
    folder = Path(job["artifacts"]["model_path"])
    manifest = json.loads((folder / "policy.json").read_text())
    assert manifest["kind"] == "lm" and manifest["steps_done"] == total
    assert (folder / "model.safetensors").is_file() and (folder / "optimizer.pt").is_file()
    import torch

    # the Adam moments went on across the kill: every step counted, not only those after it; a step
    # whose every group scored alike skips the optimizer (docs/embedded-policy.md#the-objective)
    learned = [e for e in events if e["type"] == "rl.train.step" and e["data"]["frac_reward_zero_std"] < 1.0]
    assert _adam_steps(torch.load(folder / "optimizer.pt", weights_only=True)) == {float(len(learned))}
    assert len(learned) >= 2


def test_train_with_the_embedded_backend_trains_the_model(tiny_model: Path, press_app: ServerHandle,
                                                       tmp_path: Path) -> None:
    """`synth-tui train --backend local --trainer lm` with [model] base = the model's folder."""
    config = Path(__file__).resolve().parents[3] / "configs" / "rl" / "demo.toml"
    text = config.read_text().replace('base = "Qwen/Qwen3-0.6B"', f'base = "{tiny_model}"')
    for key, value in (("trainer_mode", '"full"'), ("num_epochs", "1"), ("iterations_per_epoch", "3"),
                       ("batch_size", "2"), ("max_turns", "2"), ("learning_rate", "1e-2"), ("instances", "4")):
        text = re.sub(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
    (tmp_path / "press.toml").write_text(text)
    env = {"ENVIRONMENT_API_KEY": ENV_KEY, "HOME": str(tmp_path), "SYNTH_TUI_STATE_DIR": str(tmp_path / "state")}
    done = run_cli("train", "--backend", "local", "--trainer", "lm", "--config", str(tmp_path / "press.toml"),
                   "--task-url", press_app.url, "--no-tui", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Final status: succeeded" in done.stdout
    assert '"kind": "lm"' in done.stdout and '"stand_in": false' in done.stdout
    # The steps' scores as the command printed them, and the model it saved.
    scores = [float(m) for m in re.findall(r"Step \d+/\d+: mean score ([0-9.]+)", done.stdout)]
    assert len(scores) == 3 and scores[-1] - scores[0] >= 0.3, scores
    import torch
    from transformers import AutoModelForCausalLM

    # The run's embedded backend kept its state in the state folder: the last step's model is there.
    saved = sorted((tmp_path / "state").glob("local/**/checkpoints/*/step-*/model.safetensors"))
    assert len(saved) == 1, saved
    base = AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()
    trained = AutoModelForCausalLM.from_pretrained(saved[0].parent).state_dict()
    assert any(not torch.equal(w, base[name]) for name, w in trained.items())


def test_the_tiny_model_learns_on_a_task_app_built_with_synth_ai_050(tiny_model: Path, tmp_path: Path,
                                                                      sdk_python: str) -> None:
    """The whole promise: `--trainer lm` trains the tiny model (LoRA) against a context-free task
    app written on synth-ai 0.5.0's own framework (tests/local/sdk_taskapps, served by a Python
    with synth-ai 0.5.0): the job succeeds, the train mean score rises by at least 0.3, torch is
    loaded by the backend, and artifacts.model_path loads with new weights. The app names button
    1 every turn of 4; its tool offers 1 to 4 (random play: 0.25). Full fine-tuning learns the
    same way on our press app (test_the_backend_trains_the_tiny_model_and_its_score_rises)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from ..sdk_taskapps.harness import SdkTaskApp

    turns = 4  # context_free.TURNS (that module imports synth_ai, which only the app's Python has)
    mode = "lora"
    with SdkTaskApp("context_free", python=sdk_python, env_api_key=ENV_KEY, workdir=tmp_path,
                    settings={"CONTEXT_FREE_BUTTONS": "1"}).start() as app, \
            start_backend(api_key=API_KEY, db_path=tmp_path / "state.sqlite3", env_api_keys=[ENV_KEY],
                          policy_kind="lm") as backend, api_client(backend) as api:
        payload = press_payload(app.url, tiny_model, mode, steps=8, lr=1e-2)
        config = payload["data"]["config"]
        config["rollout"].update(env_name="press-the-button", max_turns=turns)
        config["training"]["max_turns"] = turns
        job_id = create_job(api, payload)
        job = wait_terminal(api, job_id, timeout=900)
        events = events_of(api, job_id)
        assert job["status"] == "succeeded", (job, [e["message"] for e in events][-5:])
        points = api.get(f"/rl/jobs/{job_id}/metrics", params={"limit": 1000}).json()["points"]
    assert "torch" in sys.modules  # the backend ran in this process and loaded the model
    assert next(e for e in events if e["type"] == "rl.train.policy")["data"]["stand_in"] is False
    train = [p["value"] for p in points if p["name"] == "train.mean_score"]
    # The first step's episodes are played before any update: that is where it starts from.
    first, last = train[0], sum(train[-2:]) / 2
    assert len(train) == 8 and last - first >= 0.3, train
    base = AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()
    folder = Path(job["artifacts"]["model_path"])
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), folder).merge_and_unload()
    assert any(not torch.equal(w, base[name]) for name, w in model.state_dict().items())


def test_a_real_pretrained_model_calls_tools_that_parse_and_takes_a_grpo_step() -> None:
    """SmolLM2-135M-Instruct, pretrained, offline (tests/support/smollm2.py: the registry's GGUF,
    dequantized and saved once as a Hugging Face folder, with a tool-calling template): its
    required calls parse and match the tool's schema, an `auto` answer comes back as a message,
    and one GRPO step runs with LoRA on two-turn episodes that never restart (the history echoes
    the wire answer's JSON-string arguments; Qwen2.5's template renders them `| tojson`)."""
    import jsonschema

    from app.local.policies.lm.policy import LmPolicy
    from support.smollm2 import smollm2_folder

    settings_ = PolicySettings(model=str(smollm2_folder()), learning_rate=1e-5, seed=0, total_steps=2, batch_size=1,
                               group_size=2, options={"trainer_mode": "lora", "max_tokens": 48})
    policy = LmPolicy(settings_)
    rng = random.Random(0)
    try:
        group = []
        for i in range(2):
            messages, memos = press_messages("C"), []
            for said in ("Right. Press D.", "Right."):
                act = policy.act(messages, [PRESS_TOOL], TOOL_CHOICE, f"smol{i}", rng)
                call = act.message["tool_calls"][0]["function"]
                assert call["name"] == "press"
                jsonschema.validate(json.loads(call["arguments"]), PRESS_TOOL["function"]["parameters"])
                memos.append(act.memo)
                messages = [*messages, act.message, {"role": "tool", "tool_call_id": act.call_id, "content": said}]
            assert memos[0].sequence is memos[1].sequence  # one sequence: both turns carry loss
            group.append(Episode(memos, float(i)))
        assert policy.restarts == 0
        free = policy.act(press_messages("C"), [PRESS_TOOL], "auto", "smol-auto", rng)
        assert free.message["role"] == "assistant" and (free.message.get("content") or free.message.get("tool_calls"))
        stats = policy.update([group])
        assert stats.extra["reward_mean"] == pytest.approx(0.5) and stats.extra["completion_tokens"] > 0
        assert policy.describe().data["parameters"] > 100_000_000
    finally:
        policy.close()


@pytest.mark.parametrize("mode", ["full", "lora"])
def test_a_kl_coefficient_measures_the_distance_to_the_reference(tiny_model: Path, mode: str) -> None:
    """[training] kl_coef > 0: TRL keeps the reference (the base model; for LoRA, the adapter
    switched off) and the step reports KL, 0 before the first update moves the policy."""
    from app.local.policies.lm.policy import LmPolicy

    policy = LmPolicy(PolicySettings(model=str(tiny_model), learning_rate=1e-2, seed=0, total_steps=2, batch_size=1,
                                     group_size=2, options={"trainer_mode": mode, "kl_coef": 0.1}))
    rng = random.Random(0)
    try:
        kls = []
        for step in range(2):
            group = [Episode([policy.act(press_messages("B"), [PRESS_TOOL], TOOL_CHOICE, f"kl{step}-{i}", rng).memo],
                             float(i)) for i in range(2)]
            kls.append(policy.update([group]).extra["kl"])
        assert kls[0] == pytest.approx(0.0, abs=1e-6) and kls[1] > 0, kls
    finally:
        policy.close()
