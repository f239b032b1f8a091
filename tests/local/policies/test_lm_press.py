"""The lm walk a user takes from the README (Train a language model): `synth-tui taskapp --game
press`, `synth-tui tiny-model DIR` and configs/rl/lm_press.toml, each as shipped."""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.cli.dispatch import main
from app.core.config.payload import build_rl_payload
from app.core.config.validation import validate_rl_file
from support import loopback_http
from support.lm_fixtures import press_payload
from support.pilot_waits import poll_until
from support.tiers import slow_fixture

from ..conftest import ENV_KEY, create_job, events_of, wait_terminal
from ..state.test_local_resume import answering

REPO = Path(__file__).resolve().parents[3]
LM_PRESS = REPO / "configs" / "rl" / "lm_press.toml"
NEEDS_TRAINER = pytest.mark.usefixtures("trainer_extra")  # torch: the slow tier; fails, never skips, without it
CLI_MAIN = "import sys; from app.cli.dispatch import main; sys.exit(main())"  # synth-tui in a process
_LISTENING = re.compile(r"press task app \(rollout contract 0\.2, asking for A\) on (http://\S+)")


@slow_fixture("runs `synth-tui taskapp` as a process", scope="module")
def press_cli(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`synth-tui taskapp --game press --asks a,A` in a process of its own on a free loopback
    port, its key from the environment; yields its URL."""
    log = tmp_path_factory.mktemp("press-cli") / "taskapp.log"
    env = {**os.environ, "ENVIRONMENT_API_KEY": ENV_KEY, "PYTHONPATH": os.pathsep.join(sys.path)}
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", CLI_MAIN,
                                 "taskapp", "--game", "press", "--asks", "a,A", "--port", "0"],
                                stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, env=env)
    try:
        url = poll_until(lambda: proc.poll() is None and (m := _LISTENING.search(log.read_text())) and m.group(1),
                         timeout=60, what=f"the press task app to listen (its log: {log})")
        poll_until(lambda: answering(url + "/"), timeout=30, what="the press task app to answer")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def test_the_taskapp_command_serves_the_press_game_asking_for_the_buttons_given(press_cli):
    info = loopback_http.get(press_cli + "/task_info", headers={"X-API-Key": ENV_KEY}, timeout=5.0).json()
    assert info["taskset"] == {"id": "press-button", "environment": "press-button", "labels": ["A", "B", "C", "D"],
                               "asks": ["A"], "max_turns": 2}
    stranger = loopback_http.get(press_cli + "/task_info", headers={"X-API-Key": "not_the_key"}, timeout=5.0)
    assert stranger.status_code == 400


def test_the_press_game_of_the_command_plays_whole_episodes_through_the_chat_endpoint(press_cli, api):
    """The stand-in trains on it (no model needed): every episode is two turns, each one
    press call, scored by the button the app asked for."""
    job_id = create_job(api, press_payload(press_cli, Path("tiny-qwen3"), "full", steps=2, lr=1e-2))
    job = wait_terminal(api, job_id, timeout=60)
    assert job["status"] == "succeeded", [e["message"] for e in events_of(api, job_id)][-3:]
    steps = [e["data"] for e in events_of(api, job_id) if e["type"] == "rl.train.step"]
    assert [s["step"] for s in steps] == [1, 2]
    assert all(s["rollouts"] == 16 and s["turns"] == 32 and 0.0 <= s["mean_score"] <= 1.0 for s in steps), steps


def test_asks_is_refused_for_a_game_without_buttons_and_for_a_button_that_is_not_there(capsys):
    assert main(["taskapp", "--asks", "A"]) == 2
    assert "--asks chooses the press task app's buttons; --game gridworld has none" in capsys.readouterr().err
    assert main(["taskapp", "--game", "press", "--asks", "A,E"]) == 2
    assert "'A,E' is not a comma-separated list of buttons from A, B, C, D" in capsys.readouterr().err


def test_the_lm_press_config_validates_once_its_model_folder_is_there(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    missing = validate_rl_file(LM_PRESS)
    assert not missing.ok
    assert "Model folder './tiny-qwen3' does not exist yet" in missing.render()
    assert "(next step: make it first: `synth-tui tiny-model tiny-qwen3`" in missing.render()
    (tmp_path / "tiny-qwen3").mkdir()
    (tmp_path / "tiny-qwen3" / "config.json").write_text("{}")
    report = validate_rl_file(LM_PRESS)
    assert report.ok, report.render()
    payload = build_rl_payload(report.raise_if_invalid(), task_url="http://127.0.0.1:8102", backend_base="")
    assert payload["data"]["base_model"] == "./tiny-qwen3"
    config = payload["data"]["config"]
    assert config["rollout"]["env_name"] == "press-button" and config["training"]["batch_size"] == 2


@NEEDS_TRAINER
def test_the_tiny_model_command_writes_a_model_the_lm_policy_loads(tmp_path, capsys):
    from app.local.policies.base import PolicySettings
    from app.local.policies.lm.policy import LmPolicy
    from app.local.taskapps.press import PRESS_TOOL, SYSTEM_PROMPT, TOOL_CHOICE

    folder = tmp_path / "tiny"
    assert main(["tiny-model", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"to {folder}" in out and "for trying the lm policy" in out and f'base = "{folder}"' in out
    policy = LmPolicy(PolicySettings(model=str(folder), learning_rate=1e-2, seed=0, total_steps=1, batch_size=1,
                                     group_size=2, options={"trainer_mode": "full"}))
    assert 100_000 < sum(p.numel() for p in policy.model.parameters()) < 200_000
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "Press A."}]
    action = policy.act(messages, [PRESS_TOOL], TOOL_CHOICE, "trace_j:r1", random.Random(0))
    call = action.message["tool_calls"][0]["function"]
    assert call["name"] == "press" and json.loads(call["arguments"])["label"] in "ABCD"
    # A folder with something in it is never written into.
    assert main(["tiny-model", str(folder)]) == 2
    assert "is not empty; the tiny model is written only into a new or empty folder" in capsys.readouterr().err


@NEEDS_TRAINER
def test_the_shipped_config_trains_the_tiny_model_on_the_commands_press_game(press_cli, tiny_model, tmp_path,
                                                                              monkeypatch, capsys):
    """The README's walk in one process: configs/rl/lm_press.toml as shipped (its model
    ./tiny-qwen3 where the run is), the press game of `synth-tui taskapp`, the lm policy.
    The score rises from near chance to at least 0.9 (docs/embedded-policy.md)."""
    (tmp_path / "tiny-qwen3").symlink_to(tiny_model)
    monkeypatch.chdir(tmp_path)
    env = tmp_path / "lm.env"
    env.write_text(f"ENVIRONMENT_API_KEY={ENV_KEY}\nTASK_APP_URL={press_cli}\n")
    env.chmod(0o600)
    code = main(["train", "--no-tui", "--backend", "local", "--trainer", "lm", "--config", str(LM_PRESS),
                     "--env-file", str(env), "--poll-interval", "0.5"])
    out, err = capsys.readouterr()
    assert code == 0, err[-2000:]
    scores = [float(m) for m in re.findall(r"Step \d+/8: mean score ([0-9.]+)", out)]
    assert len(scores) == 8 and scores[0] < 0.5 and max(scores[-3:]) >= 0.9, scores
    assert '"kind": "lm"' in out and ENV_KEY not in out + err
    # Issue 37: the checks ask the backend about the model; the job says while it loads it.
    assert "Model check: OK (POST /rl/verify_model · ./tiny-qwen3: the lm policy trains it" in out
    assert "rl.train.policy.loading (info): Loading ./tiny-qwen3 (model.safetensors, " in out
    assert re.search(r"rl\.train\.policy\.loaded \(info\): Loaded \./tiny-qwen3 in \d+ s", out)


@NEEDS_TRAINER
def test_the_readme_lab_walk_trains_with_ports_8000_and_8102_taken(tiny_model, tmp_path, monkeypatch, capsys):
    """Issue 37: the README's walk as written (`synth-tui lab …`, no .env yet) on a machine where
    other programs hold 8000 and 8102: its own servers on free ports, their URLs in lm.env,
    the score rises as with `synth-tui backend`."""
    import socket
    from contextlib import ExitStack

    (tmp_path / "tiny-qwen3").symlink_to(tiny_model)
    monkeypatch.chdir(tmp_path)
    with ExitStack() as stack:
        for port in (8000, 8102):
            sock = stack.enter_context(socket.socket())
            try:
                sock.bind(("127.0.0.1", port))
                sock.listen()
            except OSError:
                pass  # another program holds it: taken either way
        code = main(["lab", "--no-tui", "--game", "press", "--asks", "A", "--trainer", "lm",
                         "--config", str(LM_PRESS), "--env-file", "lm.env", "--poll-interval", "0.5"])
    out, err = capsys.readouterr()
    assert code == 0, err[-2000:]
    written = (tmp_path / "lm.env").read_text()
    assert ":8000" not in written and ":8102" not in written and "BACKEND_BASE_URL=http://127.0.0.1:" in written
    scores = [float(m) for m in re.findall(r"Step \d+/8: mean score ([0-9.]+)", out)]
    assert len(scores) == 8 and max(scores[-3:]) >= 0.9, scores
