"""The embedded backend's model check (POST /api/rl/verify_model, app/local/server/model_check.py) and
what a job says while its model loads: issue 37, "A new user's first real model".

The route's shape, its refusals and its time bound are quick (a tabular backend never reads the
model); what it finds in a model (its template, its size) needs transformers, so torch: those
tests use the tiny model or SmolLM2 (the slow tier)."""

from __future__ import annotations

import json
import re
import shutil
import struct
import threading
from pathlib import Path

import pytest

from app.local.policies.lm.chat_templates import chat_template_text, trl_template_names
from app.local.policies.lm.model import (
    ModelUnavailable,
    gguf_of,
    learning_rate_warning,
    parameter_count,
    resolve,
    size_words,
)
from app.local.server import model_check
from app.local.servers import start_backend
from support.lm_fixtures import press_payload

from ..conftest import API_KEY, ENV_KEY, api_client, create_job, events_of, wait_terminal

SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"
# SmolLM2-135M-Instruct's own template, as its tokenizer_config.json ships it: it ignores tools and
# adds `message['content']` to a string, which a tool call's message (content null, or none) breaks.
SMOLLM2_OWN_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


# --------------------------------------------------------------------------- the route (quick)


def test_the_route_answers_what_a_tabular_backend_trains_without_reading_the_model(api):
    answer = api.post("/rl/verify_model", json={"model": SMOL, "learning_rate": 1e-2})
    assert answer.status_code == 200
    body = answer.json()
    assert body["ok"] is True and body["trains"] == "tabular" and body["problems"] == []
    assert body["model"] == SMOL and body["path"] is None and body["seconds"] < 5


@pytest.mark.parametrize("body", [{}, {"model": ""}, {"model": "   "}, {"model": 3},
                                  {"model": "x/y", "chat_template": 1}])
def test_a_request_without_a_model_is_refused_saying_what_to_send(api, body):
    answer = api.post("/rl/verify_model", json=body)
    assert answer.status_code == 422
    text = json.dumps(answer.json())
    assert "Invalid model check" in text and "Traceback" not in text
    assert "must be the model to check" in text or "must be the name of a template TRL ships" in text


def test_the_route_needs_the_key(backend):
    with api_client(backend, key="sk_wrong_0123456789") as api:
        assert api.post("/rl/verify_model", json={"model": SMOL}).status_code == 401


async def test_a_check_that_takes_too_long_is_answered_in_time_as_a_warning(monkeypatch):
    """A slow disk or the first import of the trainer's libraries: the route still answers
    within its bound, and says the job checks the model again as it loads it."""
    release = threading.Event()

    def slow_check(*_args: object) -> model_check.ModelReport:
        release.wait(10)
        return model_check.ModelReport(model=SMOL, trains="lm")

    monkeypatch.setattr(model_check, "check_model", slow_check)
    try:
        answer = await model_check.check_model_bounded(SMOL, None, None, "lm", timeout=0.2)
    finally:
        release.set()
    assert answer["ok"] is True and answer["problems"] == []
    assert "did not finish within 0.2 s" in answer["warnings"][0]["message"]
    assert "retry (r)" in answer["warnings"][0]["fix"]


def test_the_check_never_downloads_a_model_the_job_would(monkeypatch):
    """With SYNTH_TUI_MODEL_DOWNLOAD=1 a job downloads a model missing from the cache; the
    check, bounded in seconds, does not: it says the job will, as a warning."""
    import huggingface_hub

    from app.local import policies

    downloads: list[str] = []

    def snapshot_download(repo_id: str, local_files_only: bool = False, **_kwargs: object) -> str:
        if not local_files_only:
            downloads.append(repo_id)
        raise FileNotFoundError(repo_id)  # not in the cache; and no network in a test

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(policies, "trainer_extra_missing", lambda: None)
    monkeypatch.setenv("SYNTH_TUI_MODEL_DOWNLOAD", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    report = model_check.check_model(SMOL, None, None, "lm")
    assert downloads == []
    assert report.problems == [] and report.trains == "lm"
    assert f"{SMOL!r} is not in the local Hugging Face cache: the job downloads it" in report.warnings[0].message
    assert f"hf download {SMOL}" in (report.warnings[0].fix or "")


# --------------------------------------------------------------------------- the parts (quick)


def test_a_pretrained_model_given_the_tiny_models_rate_is_warned():
    warning = learning_rate_warning(1e-2, 134_515_008)
    assert warning is not None and "learning_rate 0.01 is far too high for a pretrained model of 135M" in warning
    assert "lm_press.toml" not in warning  # a copy of any name gets it: the words name no file
    assert learning_rate_warning(5e-5, 134_515_008) is None  # a rate for a pretrained model
    assert learning_rate_warning(1e-2, 130_000) is None  # the tiny random model: its rate
    assert learning_rate_warning(1e-2, None) is None  # unknown size: no guess


def test_parameters_are_read_from_the_safetensors_header_without_loading(tmp_path):
    header = json.dumps({"__metadata__": {"format": "pt"},
                         "a.weight": {"dtype": "F32", "shape": [1000, 64], "data_offsets": [0, 256000]},
                         "b.bias": {"dtype": "F32", "shape": [64], "data_offsets": [256000, 256256]}}).encode()
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 256256)
    assert parameter_count(tmp_path) == 64_064
    (tmp_path / "model.safetensors").write_bytes(b"not a header")
    assert parameter_count(tmp_path) is None
    assert [size_words(n) for n in (538_000_000, 93_000_000, 1_200_000_000)] == ["538 MB", "93 MB", "1.2 GB"]


def test_a_gguf_file_is_a_model_and_another_file_is_refused(tmp_path):
    gguf = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.write_bytes(b"GGUF")
    assert resolve(str(gguf)) == gguf
    assert gguf_of(gguf) == (tmp_path, gguf.name)
    text = tmp_path / "notes.txt"
    text.write_text("")
    # the client's words (issue 41 item 7: the backend said "does not exist", the client "is not a folder")
    with pytest.raises(ModelUnavailable, match="is a file, not a model folder"):
        resolve(str(text))
    with pytest.raises(ModelUnavailable, match=f"is inside '{re.escape(str(text))}', which is a file, not a model"):
        resolve(str(text / "model"))


def test_chat_template_names_a_template_trl_ships_or_a_jinja_file(tmp_path):
    text, words = chat_template_text("qwen2_5")
    assert "<tool_call>" in text and words == "qwen2_5 (TRL's)"
    assert "qwen2_5" in trl_template_names() and "llama3_2" in trl_template_names()
    with pytest.raises(ModelUnavailable, match="is not a template TRL ships .*TRL ships: .*qwen2_5"):
        chat_template_text("qwen9")
    own = tmp_path / "tools.jinja"
    own.write_text("{{ messages }}")
    assert chat_template_text(str(own)) == ("{{ messages }}", str(own))
    with pytest.raises(ModelUnavailable, match="does not exist"):
        chat_template_text(str(tmp_path / "missing.jinja"))
    secrets = tmp_path / ".env"
    secrets.write_text("SYNTH_API_KEY={{ sk_live_0123456789 abc }}")
    with pytest.raises(ModelUnavailable, match="is not a .jinja file") as caught:
        chat_template_text(str(secrets))
    assert "sk_live" not in str(caught.value)


def test_a_trainer_mode_the_lm_trainer_does_not_know_is_a_problem_of_the_check(api, tiny_model):
    """Issue 37 walk: `trainer_mode = "half"` passed the checks and failed the job as it loaded the
    model. The lm policy's check names it; the tabular stand-in (which ignores it) does not."""
    report = model_check.check_model(str(tiny_model), None, None, "lm", "half")
    assert [p.fix for p in report.problems] == ['set [model] trainer_mode = "full" or "lora"']
    assert "'half'" in report.problems[0].message
    assert model_check.check_model(str(tiny_model), None, None, "lm", "Full").problems == []
    answer = api.post("/rl/verify_model", json={"model": str(tiny_model), "trainer_mode": "half"})
    assert answer.status_code == 200 and answer.json()["problems"] == []  # this backend trains the stand-in
    assert api.post("/rl/verify_model", json={"model": "x", "trainer_mode": 3}).status_code == 422


def test_a_path_is_never_told_to_hf_download_and_an_id_is(tmp_path, monkeypatch):
    """Issue 37 walk: a folder with only config.json was told `hf download ./walk/notok`."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notok").mkdir()
    (tmp_path / "notok" / "config.json").write_text("{}")
    for model in ("./notok", str(tmp_path / "notok")):
        report = model_check.check_model(model, None, None, "lm")
        assert len(report.problems) == 1 and "lacks weights" in report.problems[0].message
        assert "hf download ID --local-dir DIR" in report.problems[0].fix
        assert f"hf download {model}" not in report.problems[0].fix
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    report = model_check.check_model("someone/not-here-model", None, None, "lm")
    [problem] = report.problems
    assert (problem.message + problem.fix).count("`hf download someone/not-here-model`") == 1, problem


# --------------------------------------------------------------------------- what it finds (torch)


def with_template(model: Path, folder: Path, template: str) -> Path:
    """A copy of `model` whose tokenizer's own chat template is `template`."""
    shutil.copytree(model, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "chat_template.jinja").write_text(template)
    return folder


def test_the_tiny_model_passes_with_what_it_acts_with(tiny_model):
    report = model_check.check_model(str(tiny_model), None, 1e-2, "lm")
    assert report.answer()["ok"], report.problems
    assert report.trains == "lm" and report.source == "folder" and report.architecture == "Qwen3ForCausalLM"
    assert 100_000 < (report.parameters or 0) < 200_000 and report.bytes
    assert report.template == "TRL's training variant (the model's own is not prefix-preserving)"
    assert report.warnings == []  # 1e-2 is the tiny random model's rate


def test_a_template_that_cannot_render_a_tool_call_is_a_problem_with_its_fix(tiny_model, tmp_path):
    """Issue 37: SmolLM2's own template fails on the tool call's message ('content' missing or
    null): found in seconds by the check, not 43 s into a job; [model] chat_template fixes it."""
    folder = with_template(tiny_model, tmp_path / "smol-like", SMOLLM2_OWN_TEMPLATE)
    report = model_check.check_model(str(folder), None, None, "lm")
    assert [p.message for p in report.problems] == [
        f"the chat template of {folder} cannot render a tool-calling conversation "
        f"({report.problems[0].message.split('(', 1)[1]}"]
    assert "Error" in report.problems[0].message
    assert report.problems[0].fix == ('set [model] chat_template = "qwen2_5" (TRL\'s, in the ChatML tokens this '
                                      "model was trained on)")
    fixed = model_check.check_model(str(folder), "qwen2_5", None, "lm")
    assert fixed.problems == [] and fixed.template == "qwen2_5: as written (prefix-preserving)"
    # auto trains the model when it is here: the same problem stops it
    assert model_check.check_model(str(folder), None, None, "auto").problems


def test_a_template_that_ignores_tools_is_a_problem(tiny_model, tmp_path):
    ignores = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] or '' }}<|im_end|>\n{% endfor %}"
               "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    folder = with_template(tiny_model, tmp_path / "no-tools", ignores)
    report = model_check.check_model(str(folder), None, None, "lm")
    assert any("ignores tools" in p.message for p in report.problems), report.problems


def test_a_model_that_is_not_here_is_a_problem_for_lm_and_a_warning_for_auto(trainer_extra):
    missing = "synth-tui-tests/no-such-model"
    lm = model_check.check_model(missing, None, None, "lm")
    assert lm.problems and (lm.problems[0].message + lm.problems[0].fix).count(f"hf download {missing}") == 1
    auto = model_check.check_model(missing, None, None, "auto")
    assert auto.problems == [] and auto.trains == "tabular"
    assert "the tabular stand-in trains in its place" in auto.warnings[0].message


def test_smollm2_with_the_tiny_models_rate_is_warned(trainer_extra):
    """The pretrained SmolLM2-135M (tests/support/smollm2.py) given lm_press.toml's 1e-2."""
    from support.smollm2 import smollm2_folder

    report = model_check.check_model(str(smollm2_folder()), None, 1e-2, "lm")
    assert report.problems == [] and 130_000_000 < (report.parameters or 0) < 140_000_000
    assert "far too high for a pretrained model of 135M parameters" in report.warnings[0].message
    assert report.seconds < model_check.MODEL_CHECK_TIMEOUT_S


def test_a_job_says_when_its_model_starts_loading_and_when_it_is_loaded(tiny_model, press_app, tmp_path,
                                                                       monkeypatch):
    """And warns when the learning rate would wreck a pretrained model: the tiny model is taken
    for one here (the bar lowered below its 130k parameters) to see the warning in a quick job."""
    from app.local.policies.lm import model as lm_model

    monkeypatch.setattr(lm_model, "PRETRAINED_MIN_PARAMETERS", 100_000)
    with start_backend(api_key=API_KEY, db_path=tmp_path / "state.sqlite3", env_api_keys=[ENV_KEY],
                       policy_kind="lm") as backend, api_client(backend) as api:
        job_id = create_job(api, press_payload(press_app.url, tiny_model, "full", steps=1, lr=1e-2))
        job = wait_terminal(api, job_id, timeout=120)
        events = events_of(api, job_id)
    assert job["status"] == "succeeded", job
    types = [e["type"] for e in events]
    loading = events[types.index("rl.train.policy.loading")]
    loaded = events[types.index("rl.train.policy.loaded")]
    assert types.index("rl.train.policy.loading") < types.index("rl.train.policy.loaded") < types.index(
        "rl.train.step")
    assert loading["message"].startswith(f"Loading {tiny_model} (model.safetensors, ")
    assert loading["message"].endswith(" kB): the first step waits for it")
    assert loading["data"]["bytes"] > 0 and loaded["data"]["seconds"] >= 0
    assert loaded["message"].startswith(f"Loaded {tiny_model} in ") and loaded["message"].endswith(" s")
    warning = next(e for e in events if e["type"] == "rl.train.policy.warning")
    assert warning["level"] == "warning" and "learning_rate 0.01 is far too high" in warning["message"]
    assert "Set [training] learning_rate to 1e-5 to 1e-4" in warning["message"]


def test_the_policy_refuses_a_template_that_cannot_act_before_the_weights_load(tiny_model, tmp_path, monkeypatch):
    """A job whose verification was skipped (the API called directly) still fails at once with
    the fix, not after the weights loaded; [model] chat_template = "qwen2_5" makes it act."""
    import random

    from app.local.policies.base import PolicySettings
    from app.local.policies.lm import policy as lm_policy
    from app.local.taskapps.press import PRESS_TOOL, SYSTEM_PROMPT, TOOL_CHOICE

    folder = with_template(tiny_model, tmp_path / "smol-like", SMOLLM2_OWN_TEMPLATE)
    loads: list[Path] = []
    real_load = lm_policy.load
    monkeypatch.setattr(lm_policy, "load", lambda path, template=None: loads.append(path) or real_load(path, template))

    def settings(**options: object) -> PolicySettings:
        return PolicySettings(model=str(folder), learning_rate=1e-2, seed=0, total_steps=1, batch_size=1,
                              group_size=2, options={"trainer_mode": "full", **options})

    with pytest.raises(ModelUnavailable, match='cannot render a tool-calling conversation .*chat_template = "qwen2_5"'):
        lm_policy.LmPolicy(settings())
    assert loads == []  # refused before the weights were read
    policy = lm_policy.LmPolicy(settings(chat_template="qwen2_5"))
    assert policy.template_kind.startswith("[model] chat_template 'qwen2_5'")
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "Press A."}]
    action = policy.act(messages, [PRESS_TOOL], TOOL_CHOICE, "trace_j:r1", random.Random(0))
    assert action.message["tool_calls"][0]["function"]["name"] == "press"


def test_a_gguf_file_as_base_with_chat_template_is_checked_and_acts(tiny_model, tmp_path):
    """Issue 37: `base` = a .gguf file (the README names SmolLM2's) is accepted by the config,
    its own template (SmolLM2's, which cannot call tools) fails the check with the fix, and with
    chat_template = "qwen2_5" it passes and the policy loads the file and calls the tool."""
    import random

    from app.core.config.rl import validate_rl_text
    from app.local.policies.base import PolicySettings
    from app.local.policies.lm.policy import LmPolicy
    from app.local.taskapps.press import PRESS_TOOL, SYSTEM_PROMPT, TOOL_CHOICE
    from support.tiny_gguf import write_tiny_gguf

    gguf_file = write_tiny_gguf(tmp_path / "smol" / "tiny.F32.gguf", tiny_model, SMOLLM2_OWN_TEMPLATE)
    config = (Path(__file__).resolve().parents[3] / "configs" / "rl" / "lm_press.toml").read_text()
    assert validate_rl_text(config.replace('base = "./tiny-qwen3"', f'base = "{gguf_file}"')).ok

    own = model_check.check_model(str(gguf_file), None, 5e-5, "lm")
    assert own.source == "gguf" and own.path == str(gguf_file) and own.architecture
    assert own.parameters and own.parameters > 60_000 and own.bytes == gguf_file.stat().st_size
    assert len(own.problems) == 1 and "cannot render a tool-calling conversation" in own.problems[0].message
    assert 'chat_template = "qwen2_5"' in (own.problems[0].fix or "")
    assert model_check.check_model(str(gguf_file), "qwen2_5", 5e-5, "lm").problems == []

    policy = LmPolicy(PolicySettings(model=str(gguf_file), learning_rate=5e-5, seed=0, total_steps=1, batch_size=1,
                                     group_size=2, options={"trainer_mode": "full", "chat_template": "qwen2_5"}))
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "Press A."}]
    action = policy.act(messages, [PRESS_TOOL], TOOL_CHOICE, "trace_j:r1", random.Random(0))
    assert action.message["tool_calls"][0]["function"]["name"] == "press"


def test_a_job_that_downloads_its_model_says_so_before(trainer_extra, press_app, tmp_path, monkeypatch):
    import huggingface_hub

    def snapshot_download(repo_id: str, local_files_only: bool = False, **_kwargs: object) -> str:
        raise FileNotFoundError(repo_id)  # not in the cache, and the hub out of reach: no network in a test

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setenv("SYNTH_TUI_MODEL_DOWNLOAD", "1")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    body = press_payload(press_app.url, tmp_path / "x", "full", steps=1, lr=5e-5)
    body["data"]["base_model"] = body["data"]["config"]["model"]["base"] = SMOL
    with start_backend(api_key=API_KEY, db_path=tmp_path / "state.sqlite3", env_api_keys=[ENV_KEY],
                       policy_kind="lm") as backend, api_client(backend) as api:
        job_id = create_job(api, body)
        job = wait_terminal(api, job_id, timeout=60)
        events = events_of(api, job_id)
    assert job["status"] == "failed" and "could not be downloaded" in job["error"]
    loading = next(e for e in events if e["type"] == "rl.train.policy.loading")
    assert loading["message"] == (f"Downloading {SMOL} into the Hugging Face cache, then loading it: the first step "
                                  "waits for it")


def test_a_file_named_gguf_that_is_not_one_is_told_to_fetch_it_again(trainer_extra, tmp_path):
    """Issue 37 walk: a text file named .gguf got "copy the model's whole folder"."""
    junk = tmp_path / "junk.gguf"
    junk.write_text("not a model")
    report = model_check.check_model(str(junk), "qwen2_5", None, "lm")
    assert len(report.problems) == 1, report.problems
    fix = report.problems[0].fix
    assert fix.startswith("fetch the .gguf file again") and "whole folder" not in fix
