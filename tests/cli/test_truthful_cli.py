"""The client's flags, URLs and files tell the truth: ``synth-tui`` run as a process would be
(in this one: support.cli.run_cli), its exit codes and output.

- A URL with ``user:pass@`` is refused wherever a backend or task app URL can come from (a flag,
  the shell, the .env, the TOML), exit 2, saying to drop it; the password is never printed and
  nothing is sent.
- Every flag that goes into a URL is bounded (exit 2, the value not echoed), and a URL the HTTP
  library cannot build is a clear error, never a traceback.
- A .env or TOML config that cannot be read is exit 2 whatever its kind, named truly (a symlink
  loop is not "not found"); a UTF-8 byte-order mark is accepted in both.
docs/product.md#exit-codes.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from app.core.api.client import SynthClient
from app.core.api.errors import UnsendableRequest
from app.core.errors import ExitCode
from support.cli import CliResult, run_cli

REPO = Path(__file__).resolve().parents[2]
DEMO_TOML = REPO / "configs" / "rl" / "demo.toml"
SYNTH_KEY = "sk_test_backend_key_0123456789"  # FaultyBackend's key
ENV_KEY = "envkey_truthful_5d1c0f9a3b7e"
PASSWORD = "hunter2-Pa55word-xyzzy"


synth_tui = run_cli


def assert_refused_without_the_password(result: CliResult, *, use: str) -> None:
    shown = result.stdout + result.stderr
    assert result.returncode == ExitCode.USAGE, shown
    assert "Traceback" not in shown
    assert PASSWORD not in shown and PASSWORD[:6] not in shown and "xyzzy" not in shown
    assert "it has a user name or password (user:pass@) before the host" in result.stderr
    assert "Drop `user:pass@`" in result.stderr and use in result.stderr


def good_env(folder: Path, **extra: str) -> Path:
    values = {"SYNTH_API_KEY": SYNTH_KEY, "ENVIRONMENT_API_KEY": ENV_KEY, **extra}
    path = folder / "keys.env"
    path.write_text("".join(f"{name}={value}\n" for name, value in values.items()))
    path.chmod(0o600)
    return path


def with_password(url: str, password: str = PASSWORD) -> str:
    return url.replace("://", f"://someone:{password}@", 1)


# --------------------------------------------------------------------------- credentials in URLs


@pytest.mark.parametrize("command", [
    ["jobs", "--no-tui"],
    ["attach", "job_1", "--no-tui"],
    ["compare", "job_1", "job_2", "--no-tui"],
    ["rollouts", "job_1"],
    ["train", "--no-tui", "--dry-run", "--config", str(DEMO_TOML), "--task-url", "http://127.0.0.1:9"],
], ids=lambda command: command[0])
def test_a_backend_flag_with_credentials_is_refused_and_never_printed(tmp_path, faulty_backend, command):
    result = synth_tui(*command, "--backend", with_password(faulty_backend.url), "--env-file",
                       str(good_env(tmp_path)))
    assert_refused_without_the_password(result, use="SYNTH_API_KEY")
    assert "--backend is not a usable backend URL" in result.stderr
    assert "Backend base:" not in result.stdout
    assert faulty_backend.requests == []  # nothing sent, so no Basic auth either


@pytest.mark.parametrize("variables", [
    {"BACKEND_BASE_URL": "{url}"},
    {"BACKEND_OVERRIDE": "{url}/api"},
    {"SYNTH_API_URL": "{url}"},
    {"SYNTH_BACKEND_URL": "{url}"},
    {"SYNTH_API_BASE_URL": "{url}"},
    {"SYNTH_BACKEND_URL_OVERRIDE": "local", "LOCAL_BACKEND_URL": "{url}"},
    {"PROD_BACKEND_URL": "{url}"},
], ids=lambda variables: list(variables)[-1])
@pytest.mark.parametrize("place", ["shell", "env file"])
def test_a_backend_variable_with_credentials_is_refused_from_the_shell_or_the_env_file(
        tmp_path, faulty_backend, variables, place):
    values = {name: value.format(url=with_password(faulty_backend.url)) for name, value in variables.items()}
    if place == "shell":
        result = synth_tui("jobs", "--no-tui", "--env-file", str(good_env(tmp_path)), env=values)
    else:
        result = synth_tui("jobs", "--no-tui", "--env-file", str(good_env(tmp_path, **values)))
    assert_refused_without_the_password(result, use="SYNTH_API_KEY")
    assert "is not a usable backend URL" in result.stderr
    assert faulty_backend.requests == []


@pytest.mark.parametrize("password", [PASSWORD, f"{PASSWORD}@more", f"x@{PASSWORD}"])
def test_a_password_holding_an_at_sign_is_hidden_whole(tmp_path, faulty_backend, password):
    result = synth_tui("jobs", "--no-tui", "--backend", with_password(faulty_backend.url, password),
                       "--env-file", str(good_env(tmp_path)))
    assert_refused_without_the_password(result, use="SYNTH_API_KEY")
    assert f"Got 'http://…@127.0.0.1:{faulty_backend.port}'" in result.stderr


@pytest.mark.parametrize("place", ["--task-url", "TASK_APP_URL in the env file", "TASK_APP_URL in the shell",
                                   "[services] task_url"])
def test_a_task_app_url_with_credentials_is_refused_and_never_printed(tmp_path, faulty_backend, place):
    task_url = with_password("http://127.0.0.1:9")
    config = tmp_path / "config.toml"
    text = DEMO_TOML.read_text(encoding="utf-8")
    if place == "[services] task_url":
        assert 'task_url = "http://127.0.0.1:8102"' in text
        text = text.replace('task_url = "http://127.0.0.1:8102"', f'task_url = "{task_url}"')
    config.write_text(text)
    env_file = good_env(tmp_path, **({"TASK_APP_URL": task_url} if place.endswith("env file") else {}))
    flags = ["--task-url", task_url] if place == "--task-url" else []
    shell = {"TASK_APP_URL": task_url} if place.endswith("shell") else {}
    result = synth_tui("train", "--no-tui", "--config", str(config), "--env-file", str(env_file),
                       "--backend", faulty_backend.url, *flags, env=shell)
    assert_refused_without_the_password(result, use="ENVIRONMENT_API_KEY")
    assert "is not a usable task app URL" in result.stderr
    assert not [request for request in faulty_backend.requests if request[0] == "POST"]  # no verify, no job


# --------------------------------------------------------------------------- flags that go into URLs


@pytest.mark.parametrize("status,problem", [
    ("a" * 66_000, "it is 66,000 characters long; a status is at most 64"),
    ("run ning", "character 4 is not a letter, digit, _, . or -"),
    ("runn\u00efng", "character 5 is not a letter, digit, _, . or -"),
    ("", "it is empty"),
], ids=["66000-chars", "space", "not-ascii", "empty"])
def test_a_status_that_cannot_be_a_query_value_is_a_usage_error(tmp_path, faulty_backend, status, problem):
    result = synth_tui("jobs", "--no-tui", "--backend", faulty_backend.url, "--env-file", str(good_env(tmp_path)),
                       "--status", status)
    assert result.returncode == ExitCode.USAGE, result.stderr
    assert f"argument --status: {problem}" in result.stderr
    assert "Traceback" not in result.stderr and "InvalidURL" not in result.stderr
    assert len(result.stderr) < 2_000  # the value is not echoed
    assert faulty_backend.requests == []


def test_a_usable_status_is_sent(tmp_path, faulty_backend):
    result = synth_tui("jobs", "--no-tui", "--backend", faulty_backend.url, "--env-file", str(good_env(tmp_path)),
                       "--status", "running")
    assert result.returncode == ExitCode.OK, result.stderr
    assert "The backend lists no jobs with status running." in result.stdout


@pytest.mark.parametrize("command", [
    ["attach", "a" * 66_000, "--no-tui"],
    ["compare", "a" * 66_000, "job_2", "--no-tui"],
    ["rollouts", "a" * 66_000],
    ["rollouts", "job_1", "--step", "9" * 30],
    ["jobs", "--no-tui", "--limit", "9" * 30],
    ["jobs", "--no-tui", "--page-size", "9" * 30],
], ids=["attach-id", "compare-id", "rollouts-id", "step", "limit", "page-size"])
def test_every_other_flag_that_goes_into_a_url_is_bounded(tmp_path, faulty_backend, command):
    result = synth_tui(*command, "--backend", faulty_backend.url, "--env-file", str(good_env(tmp_path)))
    assert result.returncode == ExitCode.USAGE, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr) < 3_000
    assert faulty_backend.requests == []


def test_a_url_the_http_library_cannot_build_is_a_clear_error(faulty_backend):
    """A value no flag bounds (a page cursor the backend sent, say): httpx.InvalidURL becomes an
    error that says what could not be sent, exit 2, not retried."""

    async def ask() -> None:
        async with SynthClient(faulty_backend.url, SYNTH_KEY, backoff=0.0) as client:
            await client.rollouts_page("job_1", after="c" * 70_000)

    with pytest.raises(UnsendableRequest) as caught:
        asyncio.run(ask())
    assert caught.value.exit_code == ExitCode.USAGE
    assert caught.value.message == ("The request for rollouts of job job_1 cannot be sent: its URL cannot be built "
                                    "(URL component 'query' too long).")
    assert faulty_backend.requests == []


# --------------------------------------------------------------------------- files that cannot be read


def _env_kind(folder: Path, kind: str) -> Path:
    """A .env of one hostile kind, by name; each one holds a key, so nothing but its kind is wrong."""
    path = folder / f"{kind}.env"
    text = f"SYNTH_API_KEY={SYNTH_KEY}\nENVIRONMENT_API_KEY={ENV_KEY}\n"
    if kind == "missing":
        pass
    elif kind == "directory":
        path.mkdir()
    elif kind == "symlink loop":
        path.symlink_to(path.name)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "too large":
        path.write_text(text + "# padding\n" * 110_000)
    elif kind == "not UTF-8":
        path.write_bytes(text.encode() + b"NAME=caf\xe9\n")
    elif kind == "NUL":
        path.write_bytes(text.encode() + b"NAME=a\x00b\n")
    elif kind == "UTF-16":
        path.write_bytes(text.encode("utf-16"))
    else:
        raise AssertionError(kind)
    return path


ENV_KINDS = {
    "missing": "Env file not found",
    "directory": "is a directory",
    "symlink loop": "is a symlink loop (ELOOP)",
    "fifo": "is not a regular file",
    "too large": "too large for a .env file",
    "not UTF-8": "not UTF-8 text",
    "NUL": "it holds a NUL byte (on line 3)",
    "UTF-16": "it is UTF-16 text (it starts with a UTF-16 byte-order mark), not UTF-8",
}
SERVER_ENV_KINDS = {**ENV_KINDS, "missing": "does not exist", "symlink loop": "it is a symlink loop (ELOOP)",
                    "fifo": "not a regular file"}


@pytest.mark.parametrize("kind", list(ENV_KINDS))
@pytest.mark.parametrize("command", [
    ["train", "--no-tui", "--dry-run", "--config", str(DEMO_TOML), "--backend", "http://127.0.0.1:9"],
    ["jobs", "--no-tui", "--backend", "http://127.0.0.1:9"],
    ["attach", "job_1", "--no-tui", "--backend", "http://127.0.0.1:9"],
], ids=lambda command: command[0])
def test_an_env_file_that_cannot_be_read_is_exit_2_and_named_truly(tmp_path, kind, command):
    result = synth_tui(*command, "--env-file", str(_env_kind(tmp_path, kind)))
    assert result.returncode == ExitCode.USAGE, (kind, result.stderr)
    assert ENV_KINDS[kind] in result.stderr
    assert "not found" not in result.stderr or kind == "missing"
    assert "Traceback" not in result.stderr and SYNTH_KEY[4:] not in result.stdout + result.stderr


@pytest.mark.parametrize("kind", list(SERVER_ENV_KINDS))
@pytest.mark.parametrize("server", ["backend", "taskapp"])
def test_a_server_env_file_that_cannot_be_read_is_exit_2_too(tmp_path, kind, server):
    result = synth_tui(server, "--port", "0", "--env-file",
                       str(_env_kind(tmp_path, kind)))
    assert result.returncode == ExitCode.USAGE, (kind, result.stderr)
    assert SERVER_ENV_KINDS[kind] in result.stderr
    assert "Traceback" not in result.stderr and SYNTH_KEY[4:] not in result.stdout + result.stderr


def test_a_discovered_env_file_that_cannot_be_read_is_exit_2(tmp_path):
    """Found in the working folder, not named by a flag: the same rule."""
    (tmp_path / ".env").write_bytes(b"SYNTH_API_KEY=\xff\xfe\n")
    result = synth_tui("jobs", "--no-tui", "--backend", "http://127.0.0.1:9", cwd=tmp_path)
    assert result.returncode == ExitCode.USAGE, result.stderr
    assert "not UTF-8 text" in result.stderr and "Traceback" not in result.stderr


def test_an_env_file_with_a_utf8_byte_order_mark_is_read(tmp_path, faulty_backend):
    env_file = tmp_path / "keys.env"
    env_file.write_bytes(f"\ufeffSYNTH_API_KEY={SYNTH_KEY}\n".encode())
    result = synth_tui("jobs", "--no-tui", "--backend", faulty_backend.url, "--env-file", str(env_file))
    assert result.returncode == ExitCode.OK, result.stderr
    assert "The backend lists no jobs." in result.stdout


CONFIG_KINDS = {
    "missing": "Config not found",
    "directory": "is a directory",
    "symlink loop": "is a symlink loop (ELOOP)",
    "fifo": "is not a regular file",
    "too large": "too large for a config",
    "not UTF-8": "not UTF-8 text",
    "NUL": "it holds a NUL byte (on line 3)",
    "UTF-16": "it is UTF-16 text (it starts with a UTF-16 byte-order mark), not UTF-8",
}


@pytest.mark.parametrize("kind", list(CONFIG_KINDS))
def test_a_config_that_cannot_be_read_is_exit_2_and_named_truly(tmp_path, kind):
    config = _env_kind(tmp_path, kind).rename(tmp_path / "config.toml") if kind not in ("missing", "symlink loop") \
        else _env_kind(tmp_path, kind)
    result = synth_tui("train", "--no-tui", "--dry-run", "--config", str(config), "--backend", "http://127.0.0.1:9",
                       "--env-file", str(good_env(tmp_path)))
    assert result.returncode == ExitCode.USAGE, (kind, result.stderr)
    assert CONFIG_KINDS[kind] in result.stderr
    assert "not found" not in result.stderr or kind == "missing"
    assert "Traceback" not in result.stderr


def test_a_config_with_a_utf8_byte_order_mark_is_read(tmp_path):
    config = tmp_path / "config.toml"
    config.write_bytes(b"\xef\xbb\xbf" + DEMO_TOML.read_bytes())
    result = synth_tui("train", "--no-tui", "--dry-run", "--config", str(config), "--backend", "http://127.0.0.1:9",
                       "--task-url", "http://127.0.0.1:9", "--env-file", str(good_env(tmp_path)))
    assert "Invalid statement" not in result.stderr and "invalid TOML" not in result.stderr
    assert f"Using config: {config} (rl)" in result.stdout
    # It went on past the config, to the backend (which is not there): exit 5, not 2.
    assert result.returncode == ExitCode.BACKEND, result.stderr


def test_a_history_record_with_credentials_is_listed_and_attached_to_without_them(tmp_path):
    """A record written before URLs with credentials were refused (or edited by hand): listed
    without the password, and attaching to it is refused like any other such URL."""
    from app.core.runs.history import RunHistory

    history = RunHistory()
    history.record_submission(job_id="job_1", backend=with_password("http://127.0.0.1:9/api"), config_path=None,
                              payload={"job_type": "rl"}, idempotency_key=None)
    history.record_progress("job_1", status="succeeded", final=True)
    env = {"SYNTH_API_KEY": SYNTH_KEY}
    listed = synth_tui("history", "--no-tui", env=env)
    assert listed.returncode == ExitCode.OK, listed.stderr
    assert "job_1" in listed.stdout and "http://****@127.0.0.1:9/api" in listed.stdout
    assert PASSWORD not in listed.stdout + listed.stderr and "Traceback" not in listed.stderr
    attached = synth_tui("attach", "job_1", "--no-tui", env=env)
    assert_refused_without_the_password(attached, use="SYNTH_API_KEY")
    assert "The backend recorded in the job history is not a usable backend URL" in attached.stderr


def test_the_env_review_names_a_symlink_loop_too(tmp_path):
    """The path typed in the env review (app/core/env/wording.py) follows the same words."""
    from app.core.env.wording import env_path_problem

    loop = _env_kind(tmp_path, "symlink loop")
    assert env_path_problem(loop, tmp_path) == ("symlink loop.env is a symlink loop (ELOOP): following its links "
                                                "leads back to itself")
    assert env_path_problem(tmp_path / "gone.env", tmp_path) == "No file at gone.env"
    assert "UTF-16 text" in (env_path_problem(_env_kind(tmp_path, "UTF-16"), tmp_path) or "")
