"""`synth-tui demo --no-tui` end to end: real servers, a real RL loop, the SDK's lines."""

from __future__ import annotations

import re
import stat
import sys

import pytest

from support.cli import run_cli


def test_demo_headless_succeeds_and_the_score_rises(tmp_path, cli_process):
    workdir = tmp_path / "demo"
    result = cli_process("demo", "--no-tui", "--workdir", str(workdir), timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "Backend verify: OK" in out and "Task app health: OK" in out
    assert "Final status: succeeded" in out
    scores = [float(s) for s in re.findall(r"\[metric\] train\.mean_score=([0-9.]+)", out)]
    assert len(scores) >= 5
    assert scores[0] < 0.5 and scores[-1] > scores[0] + 0.3, scores
    evals = [float(s) for s in re.findall(r"\[metric\] eval\.mean_score=([0-9.]+)", out)]
    assert evals and evals[-1] >= 0.8
    env_path = workdir / ".env"
    assert stat.S_IMODE(env_path.stat().st_mode) == 0o600
    secrets = [line.split("=", 1)[1] for line in env_path.read_text().splitlines()
               if line.startswith(("SYNTH_API_KEY", "ENVIRONMENT_API_KEY"))]
    for secret in secrets:
        assert secret not in out and secret not in result.stderr


def test_demo_reuses_its_folder(tmp_path):
    workdir = tmp_path / "demo"
    for _ in range(2):
        result = run_cli("demo", "--no-tui", "--workdir", str(workdir), "--poll-timeout", "0.5", cwd=tmp_path)
        assert result.returncode in (0, 4), result.stderr[-2000:]
        assert "Traceback" not in result.stderr


def test_the_guided_demo_stops_its_servers_even_when_closed_while_they_start(tmp_path, monkeypatch):
    """The TUI starts the servers after its first frame; quitting meanwhile must not leave them running."""
    import argparse
    import socket
    import threading
    import time
    from urllib.parse import urlsplit

    from app.commands.demo import DemoServers
    from app.core.errors import UsageError

    monkeypatch.setenv("SYNTH_TUI_STATE_DIR", str(tmp_path / "state"))
    servers = DemoServers(argparse.Namespace(workdir=str(tmp_path / "demo"), poll_interval=0.5, poll_timeout=60.0))
    starting = threading.Thread(target=servers.start)
    starting.start()
    deadline = time.monotonic() + 30
    while not servers._lock.locked() and starting.is_alive() and time.monotonic() < deadline:
        time.sleep(0.005)  # until the start holds the lock: the stop below must wait for it
    servers.stop()
    starting.join(60)
    assert servers.setup is not None, "the start had begun, so it finished before the stop"
    for handle in (servers.setup.backend, servers.setup.task_app):
        address = urlsplit(handle.url)
        with pytest.raises(OSError), socket.create_connection((address.hostname, address.port), timeout=2):
            pass
    with pytest.raises(UsageError):
        servers.start()  # a closed demo starts nothing more


def test_the_summary_after_the_guided_demo_says_its_servers_stopped(tmp_path, monkeypatch):
    """Issue 37: the banner printed after the app listed the backend's URL, which answers no
    more (an attach to it then said to start `synth-tui backend`)."""
    from types import SimpleNamespace

    from app.commands.demo import banner
    from app.commands.demo_setup import DemoFolder, DemoSetup

    setup = DemoSetup(DemoFolder(tmp_path, lock=None), tmp_path / ".env", tmp_path / "demo.toml",  # type: ignore[arg-type]
                      SimpleNamespace(url="http://127.0.0.1:41001"), SimpleNamespace(url="http://127.0.0.1:41002"))
    assert "backend:  http://127.0.0.1:41001/api" in banner(setup)
    after = banner(setup, stopped=True)
    assert "127.0.0.1:41001" not in after and "127.0.0.1:41002" not in after
    assert "stopped with the demo" in after and f".env:     {tmp_path / '.env'}" in after
    # started as .venv/bin/synth-tui, its hint names that, as the quit line above it does
    monkeypatch.setattr(sys, "argv", [".venv/bin/synth-tui"])
    assert ".venv/bin/synth-tui history lists it" in banner(setup, stopped=True)


def test_a_demo_stops_its_task_app_before_its_backend(tmp_path):
    """The task app's rollouts in flight then still reach the backend's chat and end at once;
    stopped after the backend, they waited out the chat hop's backoff (about 1.5 s a demo)."""
    from types import SimpleNamespace

    from app.commands.demo_setup import DemoFolder, DemoSetup

    stopped: list[str] = []
    backend = SimpleNamespace(url="http://127.0.0.1:41001", stop=lambda: stopped.append("backend"))
    task_app = SimpleNamespace(url="http://127.0.0.1:41002", stop=lambda: stopped.append("task app"))
    lock = (tmp_path / ".lock").open("wb")
    setup = DemoSetup(DemoFolder(tmp_path, lock=lock), tmp_path / ".env", tmp_path / "demo.toml",  # type: ignore[arg-type]
                      backend, task_app)
    setup.stop()
    assert stopped == ["task app", "backend"]


def test_attach_to_a_job_stopped_with_its_demo_says_so_not_start_a_backend(tmp_path, monkeypatch):
    from app.core.runs.history import RunHistory
    from app.core.runs.jobs import stop_backend_jobs

    monkeypatch.chdir(tmp_path)
    history = RunHistory()
    history.record_submission(job_id="job_demo", backend="http://127.0.0.1:1/api", config_path=None, payload=None,
                              idempotency_key=None)
    stop_backend_jobs(history, "http://127.0.0.1:1/api", "the demo ended before the job did")
    assert history.get("job_demo").status == "cancelled"  # the user ended it: not a failure
    result = run_cli("attach", "job_demo", "--no-tui", cwd=tmp_path)
    assert result.returncode == 5
    assert "Job job_demo ran in an embedded backend that has stopped (the demo ended before the job did)" in \
        result.stderr
    assert "synth-tui history" in result.stderr and "synth-tui backend" not in result.stderr
    assert "Traceback" not in result.stderr
