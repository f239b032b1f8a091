"""Hostile input at the core, where the headless command and the TUI both get it: deep or huge
TOML, keys an HTTP header cannot carry, malformed URLs, job ids that are paths, odd flags."""

from __future__ import annotations

import io
import os
import re
import time
from pathlib import Path
from unittest import mock

import httpx
import pytest

from app.core.api.backend_url import backend_from_env, backend_url_problem
from app.core.api.client import SynthClient, job_path
from app.core.api.errors import BadResponseError
from app.core.api.wire import check_job_id, job_id_problem
from app.core.config import rl as cfg
from app.core.config.picker import config_path_problem, find_config_entries, load_config_entry
from app.core.config.toml_source import MAX_TOML_DEPTH, TomlSyntaxError, parse_toml_text, read_config_text
from app.core.config.validation import validate_rl_file
from app.core.env.envfile import EnvFile
from app.core.env.keys import header_value_problem
from app.core.env.resolve import ResolvedKey, resolve_keys
from app.core.errors import ConfigError, EnvFileError, UnusableSecretError, UsageError
from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession
from app.core.launch.steps import check_task_url, choose_env_file, require_secrets
from support.hostile_inputs import MALFORMED_BACKEND_URLS

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs" / "rl" / "demo.toml"
KEYS = {"SYNTH_API_KEY": "sk_test_0123456789", "ENVIRONMENT_API_KEY": "env_0123456789abcdef",
        "TASK_APP_URL": "http://127.0.0.1:9"}


def env_text(**overrides: str) -> str:
    return "".join(f"{key}={value}\n" for key, value in {**KEYS, **overrides}.items())


# --------------------------------------------------------------------------- 1. TOML


@pytest.mark.parametrize("text,line,column", [
    ("a = " + "[" * 5000 + "]" * 5000, 1, 4 + MAX_TOML_DEPTH + 1),
    ("x = 1\na = " + "{b = " * 5000 + "1" + "}" * 5000, 2, 5 + MAX_TOML_DEPTH * 5),
    ("[" + ".".join(["t"] * 5000) + "]\n", 1, 2 + MAX_TOML_DEPTH * 2),
    (".".join(["k"] * 200_000) + " = 1\n", 1, 1 + MAX_TOML_DEPTH * 2),
    ('"s".' * 5000 + "x = 1\n", 1, 1 + MAX_TOML_DEPTH * 4),
])
def test_deep_toml_is_refused_with_line_and_column_before_tomllib(text, line, column):
    started = time.perf_counter()
    with pytest.raises(TomlSyntaxError) as caught:
        parse_toml_text(text, Path("deep.toml"))
    assert time.perf_counter() - started < 2
    error = caught.value
    assert "nested too deeply" in error.detail and (error.line, error.column) == (line, column)
    assert error.message.startswith(f"deep.toml: invalid TOML at line {line}, column {column}: nested too deeply")


def test_nesting_in_strings_and_comments_is_not_counted():
    text = 'a = "' + "[" * 100 + '"\n# ' + "{" * 100 + "\nb = '''\n" + "[" * 100 + "\n'''\nc = 1.5\n"
    assert parse_toml_text(text)["c"] == 1.5


def test_header_key_and_arrays_together_too_deep_name_the_line():
    depth = MAX_TOML_DEPTH // 2 + 1
    text = "x = 1\n[" + ".".join(["t"] * depth) + "]\n" + ".".join(["k"] * depth) + " = 1\n"
    with pytest.raises(TomlSyntaxError) as caught:
        parse_toml_text(text)
    assert "nested too deeply" in caught.value.detail and caught.value.line == 3


def test_recursion_in_tomllib_is_a_syntax_error_not_a_crash():
    with mock.patch("tomllib.loads", side_effect=RecursionError):
        with pytest.raises(TomlSyntaxError, match="nested too deeply"):
            parse_toml_text("a = 1\n")


def test_a_number_python_cannot_read_is_a_syntax_error_with_its_line():
    with pytest.raises(TomlSyntaxError) as caught:
        parse_toml_text("a = 1\nb = " + "9" * 5000 + "\n")
    assert caught.value.detail == "a number has more than 4,300 digits" and caught.value.line == 2


def test_huge_fifo_directory_and_binary_configs_are_config_errors(tmp_path):
    big = tmp_path / "big.toml"
    with big.open("wb") as handle:
        handle.truncate(50 * 1024 * 1024)
    fifo = tmp_path / "fifo.toml"
    os.mkfifo(fifo)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"a = 1\n\xff\xfe\n")
    for path, message in [(big, "too large for a config (50.0 MB"), (fifo, "not a regular file"),
                          (tmp_path, "is a directory"), (binary, "not UTF-8 text (the first bad byte is on line 2)"),
                          (tmp_path / "gone.toml", "Config not found")]:
        with pytest.raises(ConfigError, match=re.escape(message)):
            read_config_text(path)


def test_config_discovery_and_the_picker_survive_hostile_files(tmp_path):
    (tmp_path / "deep.toml").write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    (tmp_path / "dotted.toml").write_text(".".join(["a"] * 100_000) + " = 1\n")
    (tmp_path / "bin.toml").write_bytes(bytes(range(256)))
    os.mkfifo(tmp_path / "pipe.toml")
    with (tmp_path / "big.toml").open("wb") as handle:
        handle.truncate(50 * 1024 * 1024)
    found = cfg.discover_configs(tmp_path, extra_roots=[], include_broken=True)
    assert sorted(c.path.name for c in found) == ["big.toml", "bin.toml", "deep.toml", "dotted.toml", "pipe.toml"]
    assert {c.kind for c in found} == {"broken"}

    session = LaunchSession(LaunchOptions(cwd=tmp_path), shell={})
    entries = {entry.path.name: entry for entry in find_config_entries(session, [c.path for c in found])}
    assert "nested too deeply" in entries["deep.toml"].report.render()
    assert "nested too deeply" in entries["dotted.toml"].report.render()
    assert "too large" in entries["big.toml"].report.render() and entries["big.toml"].text is None
    assert "not a regular file" in entries["pipe.toml"].report.render() and entries["pipe.toml"].text is None
    assert config_path_problem(tmp_path / "pipe.toml", tmp_path) == "Config pipe.toml is not a regular file " \
                                                                     "(a pipe, socket or device)"
    assert config_path_problem(tmp_path / "deep.toml", tmp_path) is None  # the preview shows where
    assert load_config_entry(session, tmp_path / "bin.toml").report.problems[0].message.endswith("on line 2)")


def test_the_validator_reports_deep_nesting_as_one_problem(tmp_path):
    path = tmp_path / "deep.toml"
    path.write_text("[algorithm]\ntype = \"online\"\nx = " + "{a = " * 100 + "1" + "}" * 100 + "\n")
    report = validate_rl_file(path)
    assert [(p.location, p.line) for p in report.problems] == [("<toml>", 3)]
    assert "nested too deeply" in report.problems[0].message


# --------------------------------------------------------------------------- 2. keys


@pytest.mark.parametrize("value,problem", [
    ("sk_tëst", "character 5 of 7 is not ASCII (an accented letter, a curly quote or an emoji?)"),
    ("sk_😀", "character 4 of 4 is not ASCII (an accented letter, a curly quote or an emoji?)"),
    ("sk test", "character 3 of 7 is a space"),
    ("sk\ttest", "character 3 of 7 is a tab"),
    ("sk\ntest", "character 3 of 7 is a line break"),
    ("sk\x1btest", "character 3 of 7 is a control character"),
    ("sk\u00a0test", "character 3 of 7 is a non-ASCII space"),
    ("sk_test_0123456789", None),
])
def test_header_value_problem_names_the_position_never_the_value(value, problem):
    assert header_value_problem(value) == problem


def test_an_unsendable_key_is_refused_when_secrets_are_required(tmp_path):
    path = tmp_path / ".env"
    path.write_text(env_text(ENVIRONMENT_API_KEY='"env key 0123"'))
    resolved = resolve_keys(EnvFile.load(path), shell={})
    with pytest.raises(UnusableSecretError) as caught:
        require_secrets(resolved, env_path=path, task_url_flag=None)
    assert caught.value.exit_code == 3
    assert caught.value.message == f"ENVIRONMENT_API_KEY from {path} cannot be sent: character 4 of 12 is a space."
    assert "key 0123" not in caught.value.render()


def test_an_unsendable_key_from_the_shell_or_an_alias_says_where_it_is():
    shell = {**KEYS, "SYNTH_API_KEY": "sk_tëst_0123456789"}
    with pytest.raises(UnusableSecretError, match="SYNTH_API_KEY from the shell environment cannot be sent"):
        require_secrets(resolve_keys(None, shell=shell), env_path=None, task_url_flag=None)
    shell = {"SYNTH_API_KEY": "sk_x_123456", "DEV_ENVIRONMENT_API_KEY": "env\u2019key", "TASK_APP_URL": "http://h"}
    with pytest.raises(UnusableSecretError, match="ENVIRONMENT_API_KEY from its alias DEV_ENVIRONMENT_API_KEY"):
        require_secrets(resolve_keys(None, shell=shell), env_path=None, task_url_flag=None)


def test_attach_and_the_client_refuse_an_unsendable_synth_key(tmp_path):
    session = LaunchSession(LaunchOptions(cwd=tmp_path, backend="http://127.0.0.1:9"),
                            shell={"SYNTH_API_KEY": "sk_tëst_0123456789"})
    session.resolve()
    with pytest.raises(UnusableSecretError, match="character 5 of 18 is not ASCII"):
        session.client()
    with pytest.raises(UnusableSecretError, match="SYNTH_API_KEY cannot be sent"):
        SynthClient("http://127.0.0.1:9", "sk_tëst_0123456789")


def test_resolved_key_says_where_its_value_comes_from():
    assert ResolvedKey("A", "v", "file", "/p/.env", True, False).where == "/p/.env"
    assert ResolvedKey("A", "v", "shell", None, True, False).where == "the shell environment"
    assert ResolvedKey("TASK_APP_URL", "v", "flag", "--task-url", True, False).where == "the --task-url flag"


def test_a_huge_env_file_is_refused_without_reading_it(tmp_path):
    path = tmp_path / ".env"
    with path.open("wb") as handle:
        handle.truncate(50 * 1024 * 1024)
    with pytest.raises(EnvFileError, match="too large for a .env file"):
        EnvFile.load(path)


# --------------------------------------------------------------------------- 3. URLs


@pytest.mark.parametrize("url,problem", [
    *MALFORMED_BACKEND_URLS,
    ("http://h/?q=1", "?query or #fragment"),
    ("http://\x01", "control characters"),
])
def test_backend_url_problems(url, problem):
    assert problem in backend_url_problem(url)


def test_backend_urls_that_work():
    for url in ("http://127.0.0.1:8000", "https://agent-learning.onrender.com/", " http://h/api ", "http://[::1]:80"):
        assert backend_url_problem(url) is None


def test_a_malformed_backend_url_names_its_variable_and_place():
    with pytest.raises(UsageError) as caught:
        backend_from_env({"BACKEND_BASE_URL": "http://[::1"})
    assert caught.value.message.startswith("BACKEND_BASE_URL in the shell environment is not a usable backend URL")
    with pytest.raises(UsageError, match="DEV_BACKEND_URL in /x/.env is not"):
        backend_from_env({"SYNTH_BACKEND_URL_OVERRIDE": "dev", "DEV_BACKEND_URL": "ftp://x"},
                         origins={"DEV_BACKEND_URL": "/x/.env"})
    with pytest.raises(UsageError) as caught:
        backend_from_env({"BACKEND_BASE_URL": "http://alice:s3cr3t-pw@[::1"})
    message = caught.value.message
    assert "s3cr3t" not in message and "alice" not in message and "'http://…@[::1'" in message


@pytest.mark.parametrize("check", [
    lambda: backend_from_env({"BACKEND_BASE_URL": "sk_live_0123456789abcdef"}),
    lambda: backend_from_env({"BACKEND_BASE_URL": "http://h/?key=sk_live_0123456789abcdef"}),
    lambda: check_task_url("sk_live_0123456789abcdef", "TASK_APP_URL"),
])
def test_a_key_pasted_where_a_url_belongs_is_not_echoed(check):
    with pytest.raises(UsageError) as caught:
        check()
    assert "0123456789abcdef" not in caught.value.render()


def test_a_malformed_backend_url_in_the_env_file_stops_every_request(tmp_path):
    path = tmp_path / ".env"
    path.write_text(env_text(BACKEND_BASE_URL="http://host:99999"))
    session = LaunchSession(LaunchOptions(cwd=tmp_path), shell={})
    with pytest.raises(UsageError, match=f"BACKEND_BASE_URL in {path} is not a usable backend URL") as caught:
        session.open_env(path, "flag")
    assert caught.value.exit_code == 2
    assert session.resolved and session.env is not None  # the keys are still there to review
    session.config_path = DEMO
    for step in (session.client, session.prepare):
        with pytest.raises(UsageError, match="is not a usable backend URL"):
            step()


def test_fixing_the_backend_url_in_memory_clears_the_problem(tmp_path):
    path = tmp_path / ".env"
    path.write_text(env_text(BACKEND_BASE_URL="http://[::1"))
    session = LaunchSession(LaunchOptions(cwd=tmp_path), shell={})
    with pytest.raises(UsageError):
        session.open_env(path, "flag")
    session.env.set("BACKEND_BASE_URL", "http://127.0.0.1:8000")  # what the env review's edit does
    session.resolve()
    assert session.backend_problem is None
    assert (session.backend_base, session.backend_source) == ("http://127.0.0.1:8000/api", "BACKEND_BASE_URL (.env)")


def test_a_job_from_the_history_keeps_its_backend_after_the_env_file_is_read(tmp_path):
    path = tmp_path / ".env"
    path.write_text(env_text())
    session = LaunchSession(LaunchOptions(cwd=tmp_path), shell={})
    session.use_backend("http://127.0.0.1:5555", "the job history")
    session.open_env(path, "flag")
    assert session.backend_base == "http://127.0.0.1:5555/api"


@pytest.mark.parametrize("flag,url,message", [
    ("--task-url", "http://[::1", "--task-url is not a usable task app URL: it is not a valid URL"),
    ("--task-url", "localhost:8102", "--task-url is not a usable task app URL"),
    (None, "http://127.0.0.1:99999", "TASK_APP_URL from {env} is not a usable task app URL"),
])
def test_a_malformed_task_url_is_a_usage_error_naming_its_place(tmp_path, flag, url, message):
    path = tmp_path / ".env"
    path.write_text(env_text(**({} if flag else {"TASK_APP_URL": url})))
    session = LaunchSession(LaunchOptions(cwd=tmp_path, backend="http://127.0.0.1:9",
                                          task_url=url if flag else None), shell={})
    session.open_env(path, "flag")
    session.config_path = DEMO
    with pytest.raises(UsageError, match=re.escape(message.format(env=path))):
        session.prepare()


# --------------------------------------------------------------------------- 4. job ids


@pytest.mark.parametrize("job_id,problem", [
    ("", "it is empty"), (".", "it is a path step"), ("..", "it is a path step"),
    ("../../x", "character 3 ('/') is not allowed"), ("a b", "character 2 (' ') is not allowed"),
    ("jöb", "character 2 is not allowed"), ("j" * 129, "it is 129 characters long"),
])
def test_job_id_problems(job_id, problem):
    assert job_id_problem(job_id) == problem
    with pytest.raises(UsageError, match="Not a job id"):
        check_job_id(job_id)


def test_good_job_ids_are_quoted_into_one_path_segment():
    assert job_path("/rl/jobs", "job_0a1B-2.x", "/events") == "/rl/jobs/job_0a1B-2.x/events"
    assert job_path("/rl/jobs", "job:1") == "/rl/jobs/job%3A1"
    with pytest.raises(UsageError):
        job_path("/rl/jobs", "../../admin")


async def test_the_client_never_requests_a_path_made_from_a_bad_job_id():
    requests: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, json={"job_id": "job:1", "status": "running", "events": [], "points": []})

    async with SynthClient("http://backend", "sk_test_0123", transport=httpx.MockTransport(answer)) as client:
        for call in (client.get_job("../x"), client.events("", 0), client.metrics("..", 0),
                     client.cancel_job("a/b")):
            with pytest.raises(UsageError):
                await call
        with pytest.raises(UsageError):
            async for _ in client.stream_events("a?b", 0):
                pass
        assert requests == []
        await client.get_job("job:1")
    assert requests[0].url.raw_path == b"/api/rl/jobs/job%3A1"


async def test_a_created_job_id_that_is_not_one_is_a_bad_response():
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(201, json={"job_id": "../../admin", "status": "queued"})

    async with SynthClient("http://backend", "sk_test_0123", transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(BadResponseError) as caught:
            await client.create_job({"job_type": "rl"}, idempotency_key="k1")
    assert "unusable job id (character 1 ('.')" not in caught.value.message  # "." is allowed
    assert "unusable job id (character 3 ('/') is not allowed)" in caught.value.message
    assert caught.value.exit_code == 5 and not caught.value.transient


# --------------------------------------------------------------------------- 5. flags and paths


@pytest.mark.parametrize("options,message", [
    ({"poll_interval": 0.0}, "--poll-interval must be a number of seconds, more than 0 (got 0.0)"),
    ({"poll_interval": -1.0}, "--poll-interval must be a number of seconds, more than 0 (got -1.0)"),
    ({"poll_interval": float("nan")}, "--poll-interval must be a number of seconds, more than 0 (got nan)"),
    ({"poll_timeout": float("inf")}, "--poll-timeout must be a number of seconds, 0 or more (got inf)"),
    ({"poll_timeout": -0.5}, "--poll-timeout must be a number of seconds, 0 or more (got -0.5)"),
    ({"idempotency": "key ë"}, "--idempotency cannot be sent as an Idempotency-Key header: character 4 of 5 is"),
    ({"idempotency": "k" * 300}, "--idempotency cannot be sent as an Idempotency-Key header: it is 300 characters"),
])
def test_flag_values_are_checked_for_every_front_end(options, message):
    with pytest.raises(UsageError) as caught:
        LaunchOptions(**options)
    assert caught.value.message.startswith(message)


def test_zero_poll_timeout_is_allowed():
    assert LaunchOptions(poll_timeout=0.0).poll_timeout == 0.0


def test_env_file_flag_pointing_at_a_folder_or_a_pipe(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    for path, message in [(tmp_path, "is a directory, not a .env file"), (tmp_path / "pipe", "not a regular file"),
                          (tmp_path / "gone", "Env file not found")]:
        with pytest.raises(UsageError, match=message):
            choose_env_file([str(path)], cwd=tmp_path, config_path=None)


# --------------------------------------------------------------------------- unattended .env


def test_a_headless_run_never_takes_a_dependencys_env_on_its_own(tmp_path, monkeypatch):
    """A .env deep in the tree (a vendored library's) must not receive the shell's keys."""
    from app.core.errors import UsageError
    from app.core.launch.options import LaunchOptions
    from app.core.launch.session import LaunchSession

    vendor = tmp_path / "vendor" / "somelib"
    vendor.mkdir(parents=True)
    (vendor / ".env").write_text("BACKEND_BASE_URL=http://127.0.0.1:9\n")
    monkeypatch.setenv("SYNTH_API_KEY", "sk_shell_0123456789abcdef")
    session = LaunchSession(LaunchOptions(cwd=tmp_path))
    with pytest.raises(UsageError, match="all in sub-folders") as info:
        session.unattended_env_choice()
    assert "--env-file" in info.value.hint
    (tmp_path / ".env").write_text("TASK_APP_URL=http://127.0.0.1:8102\n")
    assert session.unattended_env_choice().path == (tmp_path / ".env").resolve()


# --------------------------------------------------------------------------- terminal codes


def test_control_characters_from_files_and_servers_are_shown_not_obeyed():
    from app.core.redact import printable

    hostile = "label\x1b]0;pwned\x07\x1b[2J and\x9b1m\nnext\tline"
    shown = printable(hostile)
    assert "\x1b" not in shown and "\x07" not in shown and "\x9b" not in shown
    assert shown == "label\\x1b]0;pwned\\x07\\x1b[2J and\\x9b1m\nnext\tline"


def test_the_headless_printer_never_writes_a_terminal_command():
    from app.headless.printer import Printer

    out, err = io.StringIO(), io.StringIO()
    printer = Printer(out=out, err=err)
    printer.line("status=running\x1b]52;c;cHduZWQ=\x07")
    printer.diag("osc \x1b]0;title\x07")
    assert "\x1b" not in out.getvalue() + err.getvalue()
    assert "\\x1b]52" in out.getvalue()


def test_the_dashboard_header_escapes_what_the_backend_says():
    from widgets.job_header import shown_text

    assert shown_text("running[/]\x1b]0;x\x07") == "running\\[/]\\x1b]0;x\\x07"
    assert len(shown_text("s" * 500, 40)) == 41


def test_values_a_chart_cannot_span_are_left_out_of_it():
    from app.core.runs.series import MetricSeries

    series = MetricSeries("train.mean_score")
    for step, value in enumerate([0.5, 1e308, -1e308, 0.7]):
        series.add(step, value)
    assert list(series.values) == [0.5, 0.7]


@pytest.mark.parametrize("variable", ["SYNTH_API_URL", "SYNTH_BACKEND_URL"])
def test_a_later_sdk_s_backend_variable_in_the_env_file_picks_the_backend(tmp_path, variable):
    path = tmp_path / ".env"
    path.write_text(env_text(**{variable: "http://127.0.0.1:8123"}))
    session = LaunchSession(LaunchOptions(cwd=tmp_path), shell={})
    session.open_env(path, "flag")
    assert (session.backend_base, session.backend_source) == ("http://127.0.0.1:8123/api", f"{variable} (.env)")
    shell = LaunchSession(LaunchOptions(cwd=tmp_path), shell={"SYNTH_API_URL": "http://127.0.0.1:9"})
    shell.open_env(path, "flag")  # the shell still wins over the file
    assert shell.backend_base == "http://127.0.0.1:9/api"


def test_a_reported_prefix_of_a_held_key_reads_as_its_mask_and_never_more():
    """One mask everywhere (README: first 4 + … + last 2): a backend's report of the key this
    machine holds reads as the env review shows it; any other key's as 4 characters."""
    from app.core.redact import key_prefix, mask_prefixes, mask_secret

    held = "3b7a0123456789abcdef15"
    assert key_prefix("3b7a…", [held]) == key_prefix(held[:15], [held]) == mask_secret(held) == "3b7a…15"
    assert key_prefix("3b7b0123", [held]) == "3b7b…" and key_prefix("3b7a0123", []) == "3b7a…"
    assert key_prefix("abcd…yz") == "abcd…"  # another backend's own "mask" of a key: 4 characters
    body = mask_prefixes({"attempts": [{"key_prefix": held}], "candidates_first15": [held[:15], "zzzz9999"]}, [held])
    assert body == {"attempts": [{"key_prefix": "3b7a…15"}], "candidates_first15": ["3b7a…15", "zzzz…"]}
