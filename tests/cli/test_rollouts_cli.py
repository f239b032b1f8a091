"""``synth-tui rollouts`` against a real embedded backend on a loopback port, whose SQLite file
holds rollouts written beforehand through the real store, and against a backend without the
rollout routes (tests/support/fakes.py): outputs and exit codes (docs/product.md#rollouts)."""

from __future__ import annotations

import json
import socket

import pytest

from app.cli.dispatch import main
from app.core.errors import ExitCode
from app.local.servers import start_backend
from app.local.state.store import Store
from support.fakes import FaultyBackend, finished_job
from support.seeded_backend import API_KEY, seed_jobs

JOB = "job_seed000"
PNG = "data:image/png;base64,iVBORw0KGgo="
# (id, phase, step, index, seed, reward, turns)
ROLLOUTS = [("rl-1-0", "train", 1, 0, 11, 0.0, 3), ("rl-1-5", "train", 1, 5, 12, 0.25, 2),
            ("rl-2-3", "train", 2, 3, 13, 0.5, 2), ("eval-2-0", "eval", 2, 0, 0, 0.97, 1),
            ("eval-2-1", "eval", 2, 1, 1, 0.0, 3)]


def turn(i: int, n: int, reward: float) -> dict:
    return {"index": i, "observation": f"Turn {i}.\nstate: pos=0,{i}", "images": [PNG] if i == 1 else [],
            "images_omitted": 1 if i == 1 else 0, "tools": ["move"], "tool": "move",
            "arguments": {"direction": "down"}, "arguments_schema": None, "applied": 'action="down" moved=true',
            "reward": reward if i == n else 0.0, "done": i == n}


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    db = tmp_path_factory.mktemp("rollouts") / "state.sqlite3"
    seed_jobs(db, 2)
    store = Store(db)
    for rollout_id, phase, step, index, seed, reward, turns in ROLLOUTS:
        summary = {"rollout_id": rollout_id, "phase": phase, "step": step, "index": index, "seed": seed,
                   "reward": reward, "turns": turns}
        record = {"turns_kept": turns, "turns_cut": 0,
                  "trajectory": [turn(i, turns, reward) for i in range(1, turns + 1)]}
        store.rollouts.add(JOB, summary, record, max_bytes=1 << 20, created_at="2026-01-01T00:00:00+00:00")
    store.close()
    with start_backend(api_key=API_KEY, db_path=db, env_api_keys=[]) as server:
        yield server


@pytest.fixture
def env_file(tmp_path):
    path = tmp_path / ".env"
    path.write_text(f"SYNTH_API_KEY={API_KEY}\n")
    return path


def rollouts(capsys, *flags: str) -> tuple[int, str, str]:
    code = main(["rollouts", *flags])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and API_KEY not in out + err
    return code, out, err


def test_the_table_lists_the_rollouts_best_first(seeded, env_file, capsys):
    code, out, err = rollouts(capsys, JOB, "--backend", seeded.url, "--env-file", str(env_file))
    assert code == ExitCode.OK, err
    lines = out.splitlines()
    assert lines[0].split() == ["ROLLOUT", "PHASE", "STEP", "SEED", "REWARD", "TURNS"]
    rows = [line.split() for line in lines[1:]]
    assert [r[0] for r in rows] == ["eval-2-0", "rl-2-3", "rl-1-5", "rl-1-0", "eval-2-1"]
    assert rows[0][1:] == ["eval", "2", "0", "0.970", "1"]


def test_step_and_phase_filter(seeded, env_file, capsys, monkeypatch):
    monkeypatch.setenv("SYNTH_API_KEY", API_KEY)  # from the shell, as the other commands take it
    code, out, _ = rollouts(capsys, JOB, "--backend", seeded.url, "--step", "1")
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:]] == ["rl-1-5", "rl-1-0"]
    code, out, _ = rollouts(capsys, JOB, "--backend", seeded.url, "--phase", "eval")
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:]] == ["eval-2-0", "eval-2-1"]
    code, out, _ = rollouts(capsys, JOB, "--backend", seeded.url, "--step", "7")
    assert code == 0 and out.strip() == f"Job {JOB} has no kept step 7 rollouts."


def test_json_lists_and_shows(seeded, env_file, capsys):
    flags = ("--backend", seeded.url, "--env-file", str(env_file), "--json")
    code, out, _ = rollouts(capsys, JOB, *flags)
    listed = json.loads(out)
    assert code == 0 and [r["rollout_id"] for r in listed["rollouts"]][:2] == ["eval-2-0", "rl-2-3"]
    assert listed["rollouts"][0] == {"rollout_id": "eval-2-0", "step": 2, "phase": "eval", "index": 0, "seed": 0,
                                     "reward": 0.97, "turns": 1, "created_at": "2026-01-01T00:00:00+00:00"}
    code, out, _ = rollouts(capsys, JOB, *flags, "--id", "rl-1-0")
    shown = json.loads(out)
    assert code == 0 and shown["summary"]["rollout_id"] == "rl-1-0" and len(shown["turns"]) == 3
    assert shown["turns"][0]["action"] == 'move(direction="down")' and shown["turns"][0]["images"] == [PNG]


def test_one_rollout_turn_by_turn(seeded, env_file, capsys):
    code, out, _ = rollouts(capsys, JOB, "--backend", seeded.url, "--env-file", str(env_file), "--id", "rl-1-5")
    assert code == 0
    assert out.splitlines()[0] == "Rollout rl-1-5: train step 1, index 5, seed 12, reward 0.250, 2 turns"
    assert "Turn 1  reward 0.000\n  | Turn 1.\n  | state: pos=0,1\n  images: 2 (1 not kept)\n" in out
    assert '  action:  move(direction="down")\n  applied: action="down" moved=true' in out
    assert "Turn 2 (done)  reward 0.250" in out


def test_unknown_ids_are_exit_5(seeded, env_file, capsys):
    flags = ("--backend", seeded.url, "--env-file", str(env_file))
    code, _, err = rollouts(capsys, JOB, *flags, "--id", "rl-9-9")
    assert code == ExitCode.BACKEND and "Rollout 'rl-9-9' of job job_seed000 is not on this backend" in err
    code, _, err = rollouts(capsys, "job_nothing", *flags)
    assert code == ExitCode.BACKEND and "job_nothing" in err and "does not serve" not in err


@pytest.mark.parametrize("command", [["rollouts", "job_nothing"], ["attach", "job_nothing", "--no-tui"],
                                     ["compare", "job_nothing", JOB, "--no-tui"]],
                         ids=["rollouts", "attach", "compare"])
def test_an_unknown_job_names_the_path_asked_not_the_fallback(seeded, env_file, capsys, command):
    """Both /rl/jobs and the older /learning/jobs answer 404: the error names the path the user's
    command asked for and says plainly what is missing."""
    code = main([*command, "--backend", seeded.url, "--env-file", str(env_file)])
    err = capsys.readouterr().err
    assert code == ExitCode.BACKEND
    assert "GET /api/rl/jobs/job_nothing" in err and "/learning/jobs" not in err
    assert "Job job_nothing was not found" in err
    assert f"The backend at {seeded.url}/api has no job job_nothing, or no RL jobs at all." in err


def test_a_backend_without_the_rollout_routes_says_so(env_file, capsys):
    with FaultyBackend(api_key=API_KEY) as fake:
        fake.add_job(finished_job("job_hosted", 3, 0.1))
        code, out, err = rollouts(capsys, "job_hosted", "--backend", fake.url, "--env-file", str(env_file))
    assert code == ExitCode.BACKEND and out == ""
    assert "does not serve the rollouts of its jobs" in err and "embedded backend keeps them" in err


def test_a_dead_port_is_exit_5(env_file, capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        code, out, err = rollouts(capsys, JOB, "--backend", url, "--env-file", str(env_file))
    assert code == ExitCode.BACKEND and out == "" and err.startswith("Error: Cannot reach the backend at")


def test_without_a_key_it_is_exit_3(seeded, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("SYNTH_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env found around
    code, _, err = rollouts(capsys, JOB, "--backend", seeded.url)
    assert code == ExitCode.CHECKS_FAILED and "SYNTH_API_KEY" in err


@pytest.mark.parametrize("flags", [("--phase", "test"), ("--step", "-1"), ("--step", "x"), ()])
def test_usage_errors_are_exit_2(capsys, flags):
    code = main(["rollouts", *flags] if flags else ["rollouts"])
    capsys.readouterr()
    assert code == ExitCode.USAGE


def test_local_is_refused(capsys):
    code, _, err = rollouts(capsys, JOB, "--backend", "local")
    assert code == ExitCode.USAGE and "--backend local" in err
