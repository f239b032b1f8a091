"""Every printing command whose reader goes away (``| head``) ends quietly with exit 141, as Unix
tools do (docs/product.md#exit-codes): real processes writing into a pipe whose reading end is
closed, against a real embedded backend (or a scripted one, to watch a job that keeps running)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.runs.history import RunHistory
from app.core.runs.history_refresh import needs_refresh
from support.fakes import training_timeline
from support.seeded_backend import API_KEY, start_seeded_backend

pytestmark = pytest.mark.usefixtures("cli_process")  # a real process per test: seconds each

EXE = str(Path(sys.executable).with_name("synth-tui"))
REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "rl" / "crafter_qwen4b.toml"
ENV_KEY = "env_key_0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """The embedded backend, serving three finished jobs (job_seed000..002)."""
    handle, _ids = start_seeded_backend(tmp_path_factory.mktemp("pipe") / "state.sqlite3", 3)
    with handle as server:
        yield server


@pytest.fixture
def env_file(tmp_path):
    path = tmp_path / ".env"
    path.write_text(f"SYNTH_API_KEY={API_KEY}\n")
    return path


def into_closed_pipe(argv: list[str], *, cwd: Path, err_too: bool = False,
                     env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run synth-tui with stdout (and stderr with ``err_too``) into a pipe whose reader is gone
    before the command writes: its first write meets the closed pipe, whatever the machine's
    speed. The exit code, and stderr when it was not the pipe."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = subprocess.run([EXE, *argv], stdout=write_end, stderr=write_end if err_too else subprocess.PIPE,
                                stdin=subprocess.DEVNULL, cwd=cwd, env=env, timeout=120)
    finally:
        os.close(write_end)
    return result.returncode, (result.stderr or b"").decode(errors="replace")


def assert_quiet(code: int, err: str) -> None:
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err
    assert code == 141, err  # ExitCode.OUTPUT_CLOSED


@pytest.mark.parametrize("flags", [
    ["rollouts", "job_seed000"],
    ["rollouts", "job_seed000", "--json"],
    ["jobs", "--no-tui"],
    ["compare", "job_seed000", "job_seed001", "--no-tui"],
    ["attach", "job_seed000", "--no-tui"],
], ids=["rollouts", "rollouts --json", "jobs", "compare", "attach"])
def test_a_command_reading_the_backend_ends_quietly(seeded, env_file, tmp_path, flags):
    code, err = into_closed_pipe([*flags, "--backend", seeded.url, "--env-file", str(env_file)], cwd=tmp_path)
    assert_quiet(code, err)


def test_history_ends_quietly(tmp_path):
    code, err = into_closed_pipe(["history", "--no-tui"], cwd=tmp_path)
    assert_quiet(code, err)


def test_train_ends_quietly_before_anything_is_sent(seeded, env_file, tmp_path):
    code, err = into_closed_pipe(["train", "--no-tui", "--config", str(CONFIG), "--backend", seeded.url,
                                  "--env-file", str(env_file)], cwd=tmp_path)
    assert_quiet(code, err)


@pytest.mark.parametrize("flags", [["backend", "--port", "0"], ["taskapp", "--port", "0"], ["serve", "--port", "0"]],
                         ids=["backend", "taskapp", "serve"])
def test_a_server_whose_startup_line_cannot_be_written_ends_quietly(tmp_path, flags):
    """`synth-tui backend 2>&1 | head`: the line goes to stderr, here the closed pipe too (so a
    traceback could not be seen: the exit code says there was none, an uncaught one is 1)."""
    env = {**os.environ, "SYNTH_API_KEY": API_KEY, "ENVIRONMENT_API_KEY": ENV_KEY}
    code, _ = into_closed_pipe(flags, cwd=tmp_path, err_too=True, env=env)
    assert code == 141  # ExitCode.OUTPUT_CLOSED


def read_until_watching(argv: list[str], *, cwd: Path) -> tuple[int, str]:
    """Like `synth-tui ... | head`: read stdout up to the watch's first line ([HH:MM:SS] ...),
    then close it while the job runs. The exit code and stderr."""
    process = subprocess.Popen([EXE, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, cwd=cwd)
    try:
        assert process.stdout is not None and process.stderr is not None
        for line in process.stdout:
            if line.startswith(b"["):  # a status, event or metric line
                break
        else:
            raise AssertionError("the watch printed nothing")
        process.stdout.close()
        code = process.wait(timeout=60)
        return code, process.stderr.read().decode(errors="replace")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_demo_whose_reader_leaves_mid_watch_ends_quietly(tmp_path):
    """The embedded backend's job: the watch stops, the servers with the run, and stderr says
    the job goes with them (not that it keeps running)."""
    code, err = read_until_watching(["demo", "--no-tui", "--workdir", str(tmp_path / "demo")], cwd=tmp_path)
    assert_quiet(code, err)
    assert "Output closed; stopped watching job job_" in err and "The embedded backend stops with this process" in err
    assert "which keeps running" not in err
    # The history records how the job ended, as the TUI's quit does: `synth-tui history` then
    # shows it cancelled (stopped with its backend, not failed by it: issue 37), with why,
    # instead of asking the demo's dead backend about it for ever.
    [record] = RunHistory().list()
    assert record.final_status == "cancelled", record
    assert record.end_note and "output was closed" in record.end_note
    assert not needs_refresh(record)


def test_a_watch_whose_reader_leaves_stops_and_leaves_the_job_running(faulty_backend, tiny_task_app, tmp_path):
    """`train --no-tui | head -N` with the job already created: the watch stops at the next
    line, the job is not cancelled, and stderr says how to attach to it again."""
    faulty_backend.create_job_template = training_timeline(steps=5000)
    env_path = tmp_path / ".env"
    env_path.write_text(f"SYNTH_API_KEY={faulty_backend.api_key}\nENVIRONMENT_API_KEY={ENV_KEY}\n"
                        f"TASK_APP_URL={tiny_task_app.url}\n")
    code, err = read_until_watching(["train", "--no-tui", "--config", str(CONFIG), "--env-file", str(env_path),
                                     "--backend", faulty_backend.url, "--poll-interval", "0.02"], cwd=tmp_path)
    assert_quiet(code, err)
    [job] = faulty_backend.jobs.values()
    assert job.tick < len(job.timeline) and job.status in ("queued", "running")
    assert faulty_backend.count("/cancel") == 0
    assert f"stopped watching job {job.job_id}, which keeps running" in err
    assert f"synth-tui attach {job.job_id}" in err
    assert faulty_backend.api_key not in err and ENV_KEY not in err
