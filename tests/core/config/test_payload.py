"""Model allow-list rules, task URL precedence and the exact `POST /rl/jobs` body."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from app.core.config.models import (
    DEFAULT_EXPERIMENTAL_MODELS,
    RL_CAPABLE_MODELS,
    check_rl_model,
    experimental_allowed,
    normalize_model_id,
)
from app.core.config.rl import RLConfig, build_rl_payload, resolve_task_url, validate_rl_file, validate_rl_text
from app.core.errors import ConfigError

EXAMPLES = Path(__file__).resolve().parents[3] / "configs" / "rl"
BACKEND = "https://agent-learning.onrender.com/api"
TASK_URL = "https://acme--grpo-crafter-task-app-fastapi-app.modal.run/"


def example(name: str) -> RLConfig:
    report = validate_rl_file(EXAMPLES / name)
    assert report.ok, report.render()
    return report.config


def config_from(text: str) -> RLConfig:
    report = validate_rl_text(text, allow_experimental=True)
    assert report.ok, report.render()
    return report.config


# ---------------------------------------------------------------------------------------
# Model rules (docs/wire-contract.md#models)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("qwen/qwen3-1.7b", "Qwen/Qwen3-1.7B"),
        ("  QWEN/QWEN3-4B-INSTRUCT-2507-fp8 ", "Qwen/Qwen3-4B-Instruct-2507-FP8"),
        ("rl:qwen/qwen3-4b:job_1", "rl:Qwen/Qwen3-4B:job_1"),
        ("FT:qwen/qwen3-0.6b:abc", "FT:Qwen/Qwen3-0.6B:abc"),
        ("ft:abc123", "ft:abc123"),
        ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B"),
        ("", ""),
    ],
)
def test_normalize_model_id(raw, canonical):
    assert normalize_model_id(raw) == canonical
    assert normalize_model_id(normalize_model_id(raw)) == canonical


@pytest.mark.parametrize("model", [m for m in RL_CAPABLE_MODELS if m not in DEFAULT_EXPERIMENTAL_MODELS])
def test_every_core_rl_model_passes(model):
    assert check_rl_model(model.lower(), allow_experimental=False, env={}) == model


def test_rl_capable_list_is_the_contract_list():
    assert len(RL_CAPABLE_MODELS) == 23
    for model in ("Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8", "Qwen/Qwen3-VL-8B-Thinking"):
        assert model in RL_CAPABLE_MODELS


def test_fine_tuned_ids():
    assert check_rl_model("rl:qwen/qwen3-4b:job_1", allow_experimental=False, env={}) == "rl:Qwen/Qwen3-4B:job_1"
    with pytest.raises(ConfigError) as caught:
        check_rl_model("ft:abc123", allow_experimental=False, env={})
    assert caught.value.message == "Model 'ft:abc123' is not supported."
    with pytest.raises(ConfigError, match="is not supported") as caught:
        check_rl_model("rl:Qwen/Qwen3-4B:job_1", allow_experimental=False, env={}, allow_fine_tuned=False)
    assert "source" in caught.value.hint


def test_unsupported_and_not_rl_capable_models():
    with pytest.raises(ConfigError) as caught:
        check_rl_model("gpt-4o", allow_experimental=True, env={})
    assert caught.value.message == "Model 'gpt-4o' is not supported."
    with pytest.raises(ConfigError) as caught:
        check_rl_model("Qwen/Qwen3-32B", allow_experimental=True, env={})
    assert caught.value.message == (
        "Model 'Qwen/Qwen3-32B' does not support online policy_gradient / gspo workloads (missing training mode 'rl')."
    )
    assert "Qwen/Qwen3-4B" in caught.value.hint
    with pytest.raises(ConfigError, match="is empty"):
        check_rl_model("  ", allow_experimental=True, env={})


def test_experimental_models_are_gated():
    with pytest.raises(ConfigError) as caught:
        check_rl_model("Qwen/Qwen3-4B-Thinking-2507", allow_experimental=False, env={})
    assert caught.value.message == "Model 'Qwen/Qwen3-4B-Thinking-2507' is experimental and disabled."
    assert caught.value.hint == "pass --allow-experimental or set SDK_EXPERIMENTAL=1"
    assert (check_rl_model("qwen/qwen3-4b-thinking-2507", allow_experimental=True, env={})
            == "Qwen/Qwen3-4B-Thinking-2507")
    with pytest.raises(ConfigError, match="experimental"):
        check_rl_model("rl:Qwen/Qwen3-4B-Thinking-2507:job_9", allow_experimental=False, env={})


def test_large_experimental_models_are_gated_then_not_rl_capable():
    # As in the SDK: allowed experimental models still need the 'rl' training mode.
    with pytest.raises(ConfigError, match="experimental and disabled"):
        check_rl_model("Qwen/Qwen3-235B-A22B-Instruct-2507", allow_experimental=False, env={})
    with pytest.raises(ConfigError, match="does not support online policy_gradient"):
        check_rl_model("Qwen/Qwen3-Coder-480B-A35B-Instruct", allow_experimental=True, env={})


def test_sdk_experimental_models_env_adds_ids():
    env = {"SDK_EXPERIMENTAL_MODELS": " qwen/qwen3-8b , ,Other/Model"}
    with pytest.raises(ConfigError, match="experimental"):
        check_rl_model("Qwen/Qwen3-8B", allow_experimental=False, env=env)
    assert check_rl_model("Qwen/Qwen3-8B", allow_experimental=False, env={}) == "Qwen/Qwen3-8B"


@pytest.mark.parametrize(
    ("flag", "env", "allowed"),
    [
        (None, {}, False),
        (None, {"SDK_EXPERIMENTAL": "1"}, True),
        (None, {"SDK_EXPERIMENTAL": "true"}, False),
        (None, {"SDK_EXPERIMENTAL": "0"}, False),
        (True, {}, True),
        (False, {"SDK_EXPERIMENTAL": "1"}, False),
    ],
)
def test_experimental_allowed(flag, env, allowed):
    assert experimental_allowed(flag, env) is allowed


def test_experimental_allowed_reads_the_process_env(monkeypatch):
    assert experimental_allowed(None) is False
    monkeypatch.setenv("SDK_EXPERIMENTAL", "1")
    assert experimental_allowed(None) is True


# ---------------------------------------------------------------------------------------
# Task URL precedence (docs/wire-contract.md#task-url)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "env", "config", "expected"),
    [
        ("https://flag", "https://env", "https://config", ("https://flag", "flag")),
        (None, "https://env", "https://config", ("https://env", "env")),
        ("", " https://env ", "https://config", ("https://env", "env")),
        (None, None, "https://config", ("https://config", "config")),
        ("  ", "", "https://config/", ("https://config/", "config")),
        (None, "placeholder", "https://config", ("https://config", "config")),
        ("https://flag", None, "placeholder", ("https://flag", "flag")),
    ],
)
def test_task_url_precedence(flag, env, config, expected):
    assert resolve_task_url(cli_task_url=flag, env_task_url=env, config_task_url=config) == expected


@pytest.mark.parametrize("config", [None, "", "placeholder", "PLACEHOLDER", "   "])
def test_task_url_required(config):
    with pytest.raises(ConfigError) as caught:
        resolve_task_url(cli_task_url=None, env_task_url="", config_task_url=config)
    assert caught.value.message == "Task app URL required (provide --task-url or set services.task_url in TOML)"
    assert "--task-url" in caught.value.hint and "TASK_APP_URL" in caught.value.hint


# ---------------------------------------------------------------------------------------
# The payload (docs/wire-contract.md#job-creation)
# ---------------------------------------------------------------------------------------


def test_payload_for_the_model_example_exactly():
    payload = build_rl_payload(example("crafter_qwen4b.toml"), task_url=TASK_URL, backend_base=BACKEND, env={})
    assert payload == {
        "job_type": "rl",
        "compute": {"gpu_type": "H100", "gpu_count": 8, "topology": {"reference_placement": "none"}},
        "data": {
            "endpoint_base_url": "https://acme--grpo-crafter-task-app-fastapi-app.modal.run",
            "config": {
                "algorithm": {"type": "online", "method": "policy_gradient", "variety": "gspo"},
                "services": {"task_url": TASK_URL},
                "compute": {"gpu_type": "H100", "gpu_count": 8, "topology": {"reference_placement": "none"}},
                "topology": {
                    "type": "single_node_split",
                    "gpus_for_vllm": 4,
                    "gpus_for_training": 3,
                    "gpus_for_ref": 1,
                    "tensor_parallel": 4,
                },
                "vllm": {"tensor_parallel_size": 4, "max_model_len": 8192},
                "reference": {
                    "placement": "dedicated",
                    "port": 8002,
                    "tp": 1,
                    "health_max_wait_s": 180,
                    "health_interval_ms": 300,
                },
                "model": {"base": "Qwen/Qwen3-4B", "trainer_mode": "full", "label": "crafter-rl-from-base"},
                "rollout": {
                    "env_name": "crafter",
                    "policy_name": "crafter-react",
                    "max_turns": 10,
                    "episodes_per_batch": 64,
                    "max_concurrent_rollouts": 8,
                    "batches_per_step": 2,
                    "ops": ["agent", "env"],
                    "task_app_origin_rewards_only": True,
                },
                "evaluation": {"instances": 10, "every_n_iters": 10, "seeds": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]},
                "training": {
                    "num_epochs": 1,
                    "iterations_per_epoch": 10,
                    "max_turns": 10,
                    "batch_size": 16,
                    "group_size": 4,
                    "gradient_accumulation_steps": 1,
                    "learning_rate": 5e-5,
                    "log_interval": 1,
                    "weight_sync_interval": 1,
                    "step_rewards_enabled": True,
                    "step_rewards_mode": "decision_stepwise",
                    "step_rewards_beta": 0.0,
                    "step_rewards_indicator_lambda": 1.0,
                    "event_rewards_kind": "unique",
                    "weight_sync": {"enable": True, "targets": ["policy"], "weight_sync_interval": 1},
                },
            },
            "base_model": "Qwen/Qwen3-4B",
        },
        "tags": {"source": "train-cli"},
        "metadata": {"backend_base_url": BACKEND},
    }
    assert list(payload) == ["job_type", "compute", "data", "tags", "metadata"]
    assert list(payload["data"]) == ["endpoint_base_url", "config", "base_model"]


def test_payload_for_the_policy_example():
    payload = build_rl_payload(example("crafter_policy_lora.toml"), task_url=TASK_URL, backend_base=BACKEND, env={})
    data = payload["data"]
    # Differs from the SDK on purpose: [policy].model_name is the base model.
    assert data["base_model"] == "Qwen/Qwen3-4B"
    assert "model" not in data
    assert payload["compute"] == {
        "gpu_type": "H200",
        "gpu_count": 2,
        "topology": {
            "type": "single_node_split",
            "gpus_for_vllm": 1,
            "gpus_for_training": 1,
            "gpus_for_ref": 0,
            "tensor_parallel": 1,
            "reference_placement": "none",
        },
    }
    config = data["config"]
    assert config["services"] == {"task_url": TASK_URL}
    assert config["reference"] == {"placement": "none"}
    assert config["policy"] == {
        "model_name": "Qwen/Qwen3-4B",
        "trainer_mode": "lora",
        "label": "crafter-rl-lora-outcome",
        "max_tokens": 512,
        "temperature": 0.6,
        "top_p": 0.95,
        "repetition_penalty": 1.0,
    }
    assert config["training"]["lora"] == {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": ["all-linear"]}
    assert payload["tags"] == {"source": "train-cli"}
    assert payload["metadata"] == {"backend_base_url": BACKEND}


def test_payload_does_not_mutate_the_config():
    config = example("crafter_policy_lora.toml")
    before = copy.deepcopy(config.to_dict())
    payload = build_rl_payload(config, task_url=TASK_URL, backend_base=BACKEND, model_override="Qwen/Qwen3-8B", env={})
    payload["data"]["config"]["compute"]["gpu_count"] = 99
    assert config.to_dict() == before
    assert payload["compute"]["gpu_count"] == 2  # compute is a copy, not shared with data.config


def test_model_override_replaces_base_everywhere():
    payload = build_rl_payload(
        example("crafter_qwen4b.toml"),
        task_url=TASK_URL,
        backend_base=BACKEND,
        model_override="rl:qwen/qwen3-4b:job_42",
        env={},
    )
    data = payload["data"]
    assert data["model"] == "rl:Qwen/Qwen3-4B:job_42"
    assert "base_model" not in data
    assert data["config"]["model"] == {"source": "rl:Qwen/Qwen3-4B:job_42", "trainer_mode": "full",
                                       "label": "crafter-rl-from-base"}


def test_model_override_on_a_policy_config():
    payload = build_rl_payload(
        example("crafter_policy_lora.toml"), task_url=TASK_URL, backend_base=BACKEND, model_override="Qwen/Qwen3-8B",
        env={},
    )
    assert payload["data"]["model"] == "Qwen/Qwen3-8B"
    assert "base_model" not in payload["data"]
    policy = payload["data"]["config"]["policy"]
    assert policy["source"] == "Qwen/Qwen3-8B" and "model_name" not in policy


MINIMAL = """
[algorithm]
type = "Online"
method = "policy_gradient"
variety = "GSPO"

[compute]
gpu_type = "A100"
gpu_count = 1

[topology]
gpus_for_vllm = 1

[rollout]
env_name = "math"
policy_name = "math-single"
max_turns = 1
episodes_per_batch = 2
max_concurrent_rollouts = 2

[smoke]
task_url = "http://localhost:8765"
"""


def test_model_source_is_sent_as_model_and_smoke_is_dropped():
    config = config_from(MINIMAL + '[model]\nsource = "rl:qwen/qwen3-1.7b:job_7"\ntrainer_mode = "lora"\nlabel = "m"\n')
    payload = build_rl_payload(config, task_url="http://127.0.0.1:8001", backend_base=BACKEND, env={})
    assert payload["data"]["model"] == "rl:Qwen/Qwen3-1.7B:job_7"
    assert "base_model" not in payload["data"]
    config_dict = payload["data"]["config"]
    assert "smoke" not in config_dict
    assert config_dict["services"] == {"task_url": "http://127.0.0.1:8001"}
    assert config_dict["reference"] == {"placement": "none"}
    assert config_dict["compute"]["topology"] == {"reference_placement": "none"}
    assert payload["compute"] == {"gpu_type": "A100", "gpu_count": 1, "topology": {"reference_placement": "none"}}


def test_existing_reference_placement_is_kept():
    text = MINIMAL + '[compute.topology]\nreference_placement = "colocated"\n[reference]\nport = 9\n'
    config = config_from(text + '[model]\nbase = "Qwen/Qwen3-0.6B"\ntrainer_mode = "full"\nlabel = "m"\n')
    payload = build_rl_payload(config, task_url="http://x", backend_base=BACKEND, env={})
    assert payload["compute"]["topology"] == {"reference_placement": "colocated"}
    assert payload["data"]["config"]["reference"] == {"port": 9, "placement": "none"}


def test_services_judge_url_is_kept_and_task_url_forced():
    text = MINIMAL + '[services]\ntask_url = "placeholder"\njudge_url = "https://judge"\n'
    config = config_from(text + '[model]\nbase = "Qwen/Qwen3-0.6B"\ntrainer_mode = "full"\nlabel = "m"\n')
    payload = build_rl_payload(config, task_url="https://real", backend_base=BACKEND, env={})
    assert payload["data"]["config"]["services"] == {"task_url": "https://real", "judge_url": "https://judge"}


def test_experimental_model_in_payload_needs_permission(monkeypatch):
    config = config_from(MINIMAL + '[model]\nbase = "Qwen/Qwen3-4B-Thinking-2507"\n'
                                   'trainer_mode = "full"\nlabel = "m"\n')
    with pytest.raises(ConfigError, match="experimental and disabled") as caught:
        build_rl_payload(config, task_url="http://x", backend_base=BACKEND, env={})
    assert caught.value.hint == "pass --allow-experimental or set SDK_EXPERIMENTAL=1"
    allowed = build_rl_payload(config, task_url="http://x", backend_base=BACKEND, allow_experimental=True, env={})
    assert allowed["data"]["base_model"] == "Qwen/Qwen3-4B-Thinking-2507"
    via_env = build_rl_payload(config, task_url="http://x", backend_base=BACKEND, env={"SDK_EXPERIMENTAL": "1"})
    assert via_env["data"]["base_model"] == "Qwen/Qwen3-4B-Thinking-2507"
    monkeypatch.setenv("SDK_EXPERIMENTAL", "1")
    assert build_rl_payload(config, task_url="http://x", backend_base=BACKEND)["data"]["base_model"]


def test_bad_override_and_missing_task_url_raise_config_errors():
    config = example("crafter_qwen4b.toml")
    with pytest.raises(ConfigError, match="'gpt-4o' is not supported"):
        build_rl_payload(config, task_url=TASK_URL, backend_base=BACKEND, model_override="gpt-4o", env={})
    with pytest.raises(ConfigError, match="Task app URL required"):
        build_rl_payload(config, task_url="  ", backend_base=BACKEND, env={})


def test_unvalidated_bad_algorithm_is_refused():
    data = example("crafter_qwen4b.toml").to_dict()
    data["algorithm"]["method"] = "gspo"
    with pytest.raises(ConfigError, match="Unsupported algorithm configuration"):
        build_rl_payload(RLConfig.from_mapping(data), task_url=TASK_URL, backend_base=BACKEND, env={})
