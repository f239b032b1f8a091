"""``synth-tui jobs --no-tui`` against a real embedded backend on a loopback port."""

from __future__ import annotations

import socket

import pytest

from app.cli.dispatch import main
from app.core.errors import ExitCode
from support.seeded_backend import API_KEY, start_seeded_backend


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """Seven finished jobs (job_seed006 the newest) on an embedded backend."""
    server, ids = start_seeded_backend(tmp_path_factory.mktemp("jobs") / "state.sqlite3", 7)
    with server:
        yield server, ids


@pytest.fixture
def env_file(tmp_path):
    path = tmp_path / ".env"
    path.write_text(f"SYNTH_API_KEY={API_KEY}\n")
    return path


def jobs(capsys, *flags: str) -> tuple[int, str, str]:
    code = main(["jobs", "--no-tui", *flags])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and API_KEY not in out + err
    return code, out, err


def test_the_table_lists_every_job_across_pages(seeded, env_file, capsys):
    server, ids = seeded
    code, out, err = jobs(capsys, "--backend", server.url, "--env-file", str(env_file), "--page-size", "3")
    assert code == ExitCode.OK, err
    lines = out.splitlines()
    assert lines[0].split() == ["JOB", "STATUS", "MODEL", "CREATED", "SCORE"]
    assert [line.split()[0] for line in lines[1:]] == ids
    first = lines[1].split()
    # job_seed006: the seventh job, succeeded; its last train.mean_score is 0.3 + 0.06.
    assert first[1:3] == ["succeeded", "Qwen/Qwen3-0.6B"] and first[-1] == "0.360"
    assert f"Jobs at {server.url}/api: 7 in 3 pages" in err


def test_status_limit_and_sort(seeded, env_file, capsys, monkeypatch):
    server, _ = seeded
    monkeypatch.setenv("SYNTH_API_KEY", API_KEY)  # from the shell, as the other commands take it
    code, out, _ = jobs(capsys, "--backend", server.url, "--status", "failed")
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:]] == ["job_seed004", "job_seed001"]
    code, out, err = jobs(capsys, "--backend", server.url, "--limit", "4", "--page-size", "3", "--sort", "score")
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["job_seed006", "job_seed005", "job_seed004",
                                                                  "job_seed003"]
    assert "only the newest 4 jobs are listed" in err
    code, out, _ = jobs(capsys, "--backend", server.url, "--status", "paused")
    assert code == 0 and out.strip() == "The backend lists no jobs with status paused."


def test_a_dead_port_is_exit_5_with_a_clear_error(env_file, capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        code, out, err = jobs(capsys, "--backend", url, "--env-file", str(env_file))
    assert code == ExitCode.BACKEND
    assert out == "" and err.startswith("Error: Cannot reach the backend at")


def test_without_a_key_it_is_exit_3(seeded, tmp_path, capsys):
    server, _ = seeded
    code, _, err = jobs(capsys, "--backend", server.url)
    assert code == ExitCode.CHECKS_FAILED and "SYNTH_API_KEY" in err


def test_a_wrong_key_is_exit_3_and_never_printed(seeded, tmp_path, capsys):
    server, _ = seeded
    env = tmp_path / "wrong.env"
    env.write_text("SYNTH_API_KEY=sk_wrong_0123456789abcdef\n")
    code, out, err = jobs(capsys, "--backend", server.url, "--env-file", str(env))
    assert code == ExitCode.CHECKS_FAILED and "rejected the SYNTH_API_KEY" in err  # as without one
    assert "sk_wrong_0123456789abcdef" not in out + err


def test_backend_local_is_refused(capsys):
    code, _, err = jobs(capsys, "--backend", "local")
    assert code == ExitCode.USAGE and "no earlier jobs to list" in err


@pytest.mark.parametrize("flag", [["--limit", "0"], ["--page-size", "501"], ["--sort", "size"]])
def test_bad_flags_are_usage_errors(flag, capsys):
    assert main(["jobs", "--no-tui", *flag]) == ExitCode.USAGE
