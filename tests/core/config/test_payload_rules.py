"""One set of payload rules, checked before sending and by the backend (issue 37, item 5): an
unknown section or a misspelt key is named with the name it meant by `--dry-run`, the picker and
the preview (app.core.config.validation) and by the embedded backend (app.local.server.bodies), in the
same words; a payload a backend refuses (422) is a config problem, exit 2, with no advice to
retry (the same payload is refused again)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.config.known_keys import unknown_key_problems
from app.core.config.validation import validate_rl_text
from app.local.servers import start_backend
from support import loopback_http
from support.cli import run_cli

REPO = Path(__file__).resolve().parents[3]
DEMO = (REPO / "configs" / "rl" / "demo.toml").read_text(encoding="utf-8")
API_KEY = "sk_test_rules_0123456789abcdef"
ENV_KEY = "env_key_0123456789abcdef0123456789abcdef"

MISSPELT = {
    "section": (DEMO.replace("[training]", "[trainig]"), "trainig", "unknown section; did you mean [training]?"),
    "key": (DEMO.replace("group_size = 8", "group_size = 8\ngroup_sise = 4"), "training.group_sise",
            "unknown key; did you mean group_size?"),
    "nested": (DEMO + "\n[training.lroa]\nr = 8\n", "training.lroa", "unknown section; did you mean [training.lora]?"),
}


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    with start_backend(api_key=API_KEY, db_path=tmp_path_factory.mktemp("rules") / "db.sqlite3",
                       env_api_keys=[ENV_KEY]) as server:
        yield server


@pytest.mark.parametrize("case", sorted(MISSPELT))
def test_the_config_check_names_a_misspelt_name_with_the_one_it_meant(case):
    text, location, words = MISSPELT[case]
    report = validate_rl_text(text)
    named = [p for p in report.problems if p.location == location]
    assert [p.message for p in named] == [words]
    assert named[0].line == next(n for n, line in enumerate(text.splitlines(), 1)
                                 if location.rsplit(".", 1)[-1] in line)


def test_the_shipped_configs_and_hosted_keys_pass():
    """Keys the hosted service reads that the SDK does not declare (nothing like a known one)
    pass, as do the sections the SDK names and a top-level `type`."""
    for path in sorted((REPO / "configs" / "rl").glob("*.toml")):
        assert [p for p in validate_rl_text(path.read_text()).problems if "unknown" in p.message] == [], path
    config = {"type": "rl", "rollout": {"task_app_origin_rewards_only": True}, "smoke": {"anything": 1},
              "vllm": {"whatever": {"deep": 1}}, "training": {"weight_sync": {"weight_sync_interval": 1}}}
    assert unknown_key_problems(config) == []


def test_a_section_like_no_known_one_lists_the_known_ones():
    [problem] = unknown_key_problems({"hyperparameters": {"lr": 1}})
    assert problem.location == "hyperparameters"
    assert problem.message.startswith("unknown section; the known ones are [algorithm], [compute], ")


@pytest.mark.parametrize("case", sorted(MISSPELT))
def test_dry_run_exits_2_naming_it(case, tmp_path, backend):
    text, location, words = MISSPELT[case]
    (tmp_path / "job.toml").write_text(text)
    result = run_cli("train", "--no-tui", "--dry-run", "--config", "job.toml", "--backend", backend.url,
                     "--task-url", "http://127.0.0.1:9", cwd=tmp_path,
                     env={"SYNTH_API_KEY": API_KEY, "ENVIRONMENT_API_KEY": ENV_KEY})
    assert result.returncode == 2, result.stderr
    assert f"{location}: {words}" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("case", sorted(MISSPELT))
def test_the_backend_refuses_it_in_the_same_words(case, backend):
    """The client's rule, by the backend: the payload as the client would build it, with the
    misspelt name put back (the client refuses to build it)."""
    text, location, words = MISSPELT[case]
    from app.core.config.payload import build_rl_payload
    from app.core.config.toml_source import parse_toml_text

    raw = parse_toml_text(text, None)
    valid = validate_rl_text(DEMO).raise_if_invalid()
    payload = build_rl_payload(valid, task_url="http://127.0.0.1:9", backend_base=backend.url)
    payload["data"]["config"] = {**raw, "services": {"task_url": "http://127.0.0.1:9"}}
    answer = loopback_http.post(f"{backend.url}/api/rl/jobs", json=payload,
                                headers={"Authorization": f"Bearer {API_KEY}"})
    assert answer.status_code == 422, answer.text
    assert f"data.config.{location}: {words}" in answer.json()["detail"]


def test_a_payload_the_backend_refuses_exits_2_with_no_advice_to_retry(tmp_path, faulty_backend, tiny_task_app):
    faulty_backend.create_answer = (422, {"detail": "Invalid RL job payload: data.config.training.group_size: "
                                                    "7 is not allowed here"})
    (tmp_path / "job.toml").write_text(DEMO)
    result = run_cli("train", "--no-tui", "--no-poll", "--config", "job.toml", "--backend", faulty_backend.url,
                     "--task-url", tiny_task_app.url, cwd=tmp_path,
                     env={"SYNTH_API_KEY": faulty_backend.api_key, "ENVIRONMENT_API_KEY": ENV_KEY})
    assert result.returncode == 2, result.stderr
    error = result.stderr[result.stderr.index("Error: "):]
    assert "refused the job's payload (HTTP 422): Invalid RL job payload: data.config.training.group_size" in error
    assert f"backend at {faulty_backend.url}/api" in error
    assert "Idempotency-Key" not in error and "retry" not in error.lower().replace("a retry cannot help", "")
    assert "Fix the config" in error
