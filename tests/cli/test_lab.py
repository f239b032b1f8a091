"""``synth-tui lab`` (issue 37, item 4): the README's lm walk on a busy machine. The task app and
the backend listen on free ports, their URLs and keys go into the run's .env, and the flow runs
against them, whatever holds ports 8000 and 8102."""

from __future__ import annotations

import socket
import stat
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from app.core.env import envfile
from support.cli import run_cli

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs" / "rl" / "demo.toml"
BUSY_PORTS = (8000, 8102)  # the README's old fixed ports


@pytest.fixture
def busy_ports() -> Iterator[None]:
    """Ports 8000 and 8102 taken: by a listener of ours, or already by another program."""
    with ExitStack() as stack:
        for port in BUSY_PORTS:
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                sock.bind(("127.0.0.1", port))
                sock.listen()
            except OSError:
                pass  # someone else holds it: taken either way
        yield


def lab(tmp_path: Path, *extra: str, env: dict[str, str] | None = None):
    return run_cli("lab", "--no-tui", "--dry-run", "--trainer", "tabular", "--config", str(DEMO),
                   "--env-file", "lm.env", *extra, cwd=tmp_path, env=env or {})


def test_lab_runs_on_free_ports_and_writes_their_urls(tmp_path, busy_ports):
    result = lab(tmp_path)
    assert result.returncode == 0, result.stderr
    values = envfile.EnvFile.load(tmp_path / "lm.env")
    task_url, backend_url = values.get("TASK_APP_URL"), values.get("BACKEND_BASE_URL")
    assert task_url and backend_url and task_url.startswith("http://127.0.0.1:")
    assert {task_url.rsplit(":", 1)[1], backend_url.rsplit(":", 1)[1]}.isdisjoint({"8000", "8102"})
    assert (values.get("SYNTH_API_KEY") or "").startswith("sk_lab_") and values.get("ENVIRONMENT_API_KEY")
    assert stat.S_IMODE((tmp_path / "lm.env").stat().st_mode) == 0o600
    # the terminal says where they are; the run verified against them (--dry-run creates nothing)
    assert f"backend:  {backend_url}/api" in result.stderr and f"task app: {task_url}" in result.stderr
    assert "Backend verify: OK" in result.stdout + result.stderr
    assert values.get("SYNTH_API_KEY") not in result.stdout + result.stderr
    # Walk 37 item 10: the key's source read `(flag .venv/bin/synth-tui lab)`, a flag that is not one.
    assert "Found SYNTH_API_KEY in current sources: sk_l…" in result.stdout
    assert "(made by lab)" in result.stdout and "lab)" not in result.stdout.replace("(made by lab)", "")


def test_lab_keeps_the_env_files_keys_and_lines_and_replaces_stale_urls(tmp_path, busy_ports):
    (tmp_path / "lm.env").write_text("# mine\nSYNTH_API_KEY=sk_try_0123456789abcdef0123456789ab\n"
                                     f"ENVIRONMENT_API_KEY={'e' * 64}\nTASK_APP_URL=http://127.0.0.1:8102\n"
                                     "BACKEND_BASE_URL=http://127.0.0.1:8000\nOTHER=kept\n")
    (tmp_path / "lm.env").chmod(0o644)
    result = lab(tmp_path, env={"SYNTH_API_KEY": "sk_someone_elses_hosted_key_000"})
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "lm.env").read_text()
    values = envfile.EnvFile.load(tmp_path / "lm.env")
    assert text.startswith("# mine\nSYNTH_API_KEY=sk_try_0123456789abcdef0123456789ab\n") and "OTHER=kept" in text
    assert values.get("ENVIRONMENT_API_KEY") == "e" * 64
    assert values.get("BACKEND_BASE_URL") != "http://127.0.0.1:8000"
    assert values.get("TASK_APP_URL") != "http://127.0.0.1:8102"
    assert stat.S_IMODE((tmp_path / "lm.env").stat().st_mode) == 0o600


def test_lab_refuses_a_backend_of_elsewhere_and_asks_without_press(tmp_path):
    result = lab(tmp_path, "--backend", "http://127.0.0.1:8000")
    assert result.returncode == 2 and "starts its own backend" in result.stderr
    result = lab(tmp_path, "--asks", "A")
    assert result.returncode == 2 and "--game press" in result.stderr
    assert not (tmp_path / "lm.env").exists()


def test_a_server_that_cannot_bind_says_so_on_the_terminal_too(tmp_path, monkeypatch):
    """Issue 37: `synth-tui taskapp … 2>taskapp.log &` on a taken port left only `[1]- Exit 2`
    in the shell. The error goes to stderr (the log) and to the controlling terminal."""
    import io

    from app.cli import dispatch

    class Terminal(io.StringIO):
        def close(self) -> None:  # kept readable for the test
            pass

    terminal = Terminal()
    monkeypatch.setattr(dispatch, "_open_terminal", lambda: terminal)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("taskapp", "--port", str(port), cwd=tmp_path, env={"ENVIRONMENT_API_KEY": "k" * 40})
    assert result.returncode == 2
    words = f"Port {port} on 127.0.0.1 is already in use, so the task app cannot listen there."
    assert words in result.stderr
    assert terminal.getvalue().startswith("synth-tui taskapp: Error: ") and words in terminal.getvalue()
    # a command that is no server, or a terminal that is not there: stderr only, no error
    monkeypatch.setattr(dispatch, "_open_terminal", lambda: (_ for _ in ()).throw(OSError("no tty")))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = run_cli("backend", "--port", str(taken.getsockname()[1]), "--db", str(tmp_path / "db.sqlite3"),
                         cwd=tmp_path, env={"SYNTH_API_KEY": "sk_test_0123456789abcdef"})
    assert result.returncode == 2 and "already in use" in result.stderr


def test_a_run_ending_before_its_job_records_the_job_cancelled_as_it_said(tmp_path: Path, monkeypatch) -> None:
    """`lab` and `--backend local` stop their embedded backend when the run ends (^C): a job it
    still ran is recorded cancelled, as the interrupted run says, not left "running?"."""
    from app.commands.embedded_backend import stop_recording_its_jobs
    from app.core.runs.history import RunHistory

    monkeypatch.chdir(tmp_path)
    history = RunHistory()
    for job_id in ("job_lab", "job_done"):
        history.record_submission(job_id=job_id, backend="http://127.0.0.1:9/api", config_path=None,
                                  payload=None, idempotency_key=None)
    history.record_progress("job_done", status="succeeded", final=True)
    stopped: list[str] = []

    class Handle:
        url = "http://127.0.0.1:9"

        def stop(self) -> None:
            stopped.append(self.url)

    stop_recording_its_jobs(Handle())
    assert stopped == ["http://127.0.0.1:9"]
    assert {r.job_id: r.status for r in RunHistory().list()} == {"job_lab": "cancelled", "job_done": "succeeded"}
