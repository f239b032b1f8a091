"""Hostile input through ``app.cli.dispatch.main`` in-process: random TOML, .env contents and flags.

Whatever the input, the command ends with a documented exit code, nothing escapes as an
exception, no "Traceback" is printed and no secret shows beyond the mask's first 4
characters. Nothing here reaches a live server: the backend is a closed loopback port, or the
flow stops before the network (an invalid config, a missing key).
"""

from __future__ import annotations

import io
import math
import os
import socket
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.cli.dispatch import main
from app.commands.embedded_backend import LOCAL
from app.core.api.backend_url import backend_url_problem
from app.core.api.wire import job_id_problem
from app.core.env.keys import header_value_problem
from support.hostile_inputs import MALFORMED_BACKEND_URLS
from support.tiers import examples

REPO = Path(__file__).resolve().parents[2]
DEMO_TOML = (REPO / "configs" / "rl" / "demo.toml").read_text(encoding="utf-8")
# Missing [compute] and [topology]: the flow stops at validation, before any request.
INVALID_TOML = DEMO_TOML.split("[compute]")[0]
EXIT_CODES = {0, 1, 2, 3, 4, 5, 130}
SYNTH_KEY = "sk_test_hostile_0123456789"
ENV_KEY = "env_hostile_abcdef0123456789"

# The conftest's clean environment is shared by every example of a test, which is what we want.
HOSTILE = settings(max_examples=examples(60), deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture])


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


CLOSED = f"http://127.0.0.1:{_closed_port()}"


@pytest.fixture(autouse=True, scope="module")
def no_retry_waits():
    """Refused connections are retried with backoff; the waits would only slow the examples."""
    with mock.patch("app.core.api.retry.backoff_delay", return_value=0.0):
        yield


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """main() with stdout/stderr as strict UTF-8 streams, as a terminal's are."""
    out_bytes, err_bytes = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_bytes, encoding="utf-8", errors="strict", write_through=True)
    err = io.TextIOWrapper(err_bytes, encoding="utf-8", errors="strict", write_through=True)
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out_bytes.getvalue().decode("utf-8"), err_bytes.getvalue().decode("utf-8")


def assert_clean(code: int, out: str, err: str, secrets: tuple[str, ...] = (SYNTH_KEY, ENV_KEY)) -> None:
    assert code in EXIT_CODES, (code, err)
    assert "Traceback" not in out + err, err
    for secret in secrets:
        if len(secret) >= 10:  # shorter ones are all mask ("****") and may occur by chance
            assert secret[4:] not in out + err, "more than the first 4 characters of a secret was shown"


def write(folder: Path, name: str, content: str | bytes) -> Path:
    path = folder / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_bytes(content.encode("utf-8", errors="surrogateescape"))
    return path


def good_env(folder: Path) -> Path:
    return write(folder, "good.env", f"SYNTH_API_KEY={SYNTH_KEY}\nENVIRONMENT_API_KEY={ENV_KEY}\n"
                                     f"TASK_APP_URL={CLOSED}\n")


def train(config: Path, env: Path, *flags: str) -> list[str]:
    return ["train", "--type", "rl", "--no-tui", "--config", str(config), "--env-file", str(env), *flags]


# --------------------------------------------------------------------------- strategies

ODD_TEXT = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]), max_size=40)
# Bytes that are not UTF-8 reach argv as lone surrogates U+DC80..U+DCFF (surrogateescape).
ARGV_TEXT = st.one_of(ODD_TEXT, st.builds(lambda a, byte, b: a + chr(0xDC00 + byte) + b,
                                          ODD_TEXT, st.integers(0x80, 0xFF), ODD_TEXT))


def _deep(kind: str, depth: int) -> str:
    return {
        "array": "a = " + "[" * depth + "]" * depth,
        "unclosed": "a = " + "[" * depth,
        "inline": "a = " + "{b = " * depth + "1" + "}" * depth,
        "dotted": ".".join(["a"] * depth) + " = 1",
        "header": "[" + ".".join(["t"] * depth) + "]\nx = 1",
        "mixed": "[" + ".".join(["t"] * depth) + "]\n" + ".".join(["k"] * depth) + " = " + "[" * depth + "]" * depth,
    }[kind]


DEEP = st.builds(_deep, st.sampled_from(["array", "unclosed", "inline", "dotted", "header", "mixed"]),
                 st.integers(1, 3000))
ODD_VALUES = st.one_of(
    st.sampled_from(["inf", "-inf", "nan", "+nan", "1e999", "-0.0", "1e-999", "0x7fffffffffffffffff", '"\\uD800"',
                     '"\u202e"', "'🧪'", "1979-05-27T07:32:00Z", "9999-99-99", "[]", "{}", '"""', "'''"]),
    st.integers(1, 6000).map(lambda n: "9" * n),
    st.integers(-(10**40), 10**40).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    DEEP.map(lambda text: text.split(" = ", 1)[-1]),
    ODD_TEXT,
)


@st.composite
def mutated_demo(draw) -> str:
    """The demo config with one line replaced: a key given an odd value, or any odd line."""
    lines = DEMO_TOML.splitlines()
    index = draw(st.integers(0, len(lines) - 1))
    key = lines[index].split("=", 1)[0] if "=" in lines[index] else "x "
    lines[index] = draw(st.one_of(ODD_VALUES.map(lambda value: f"{key}= {value}"), DEEP, ODD_TEXT))
    return "\n".join(lines) + "\n"


TOML_TEXT = st.one_of(mutated_demo(), DEEP, ODD_VALUES.map(lambda value: f"x = {value}\n"), ODD_TEXT,
                      st.binary(max_size=200))


# --------------------------------------------------------------------------- properties


@HOSTILE
@given(TOML_TEXT)
def test_any_toml_ends_with_an_exit_code_and_no_traceback(content):
    with tempfile.TemporaryDirectory() as folder:
        config = write(Path(folder), "config.toml", content)
        code, out, err = run_cli(train(config, good_env(Path(folder)), "--backend", CLOSED, "--dry-run"))
    assert_clean(code, out, err)
    assert code in (0, 2, 5), err  # invalid config (2), or valid and then the closed backend (5)


ENV_KEYS = st.sampled_from(["SYNTH_API_KEY", "ENVIRONMENT_API_KEY", "DEV_ENVIRONMENT_API_KEY", "TASK_APP_URL",
                            "BACKEND_BASE_URL", "BACKEND_OVERRIDE", "SYNTH_BACKEND_URL_OVERRIDE", "LOCAL_BACKEND_URL",
                            "SYNTH_API_URL", "SYNTH_BACKEND_URL", "export SYNTH_API_KEY", "OTHER", "9BAD", "A B"])
ENV_VALUES = st.one_of(
    ODD_TEXT,
    st.sampled_from(["sk_tëst_0123456789", "sk_test_😀_0123456789", "'sk key with spaces 01'", '"sk\\nline 0123"',
                     "http://[::1", "http://host:99999", "ftp://x", "not a url", "http://", "http://xn--/", "local",
                     f"{CLOSED}", "'unclosed", '"unclosed', "\u00a0sk_test_0123456789"]),
)
ENV_LINE = st.one_of(st.builds(lambda k, v: f"{k}={v}", ENV_KEYS, ENV_VALUES), ODD_TEXT)
ENV_TEXT = st.one_of(
    st.builds(lambda lines, eol: eol.join(lines), st.lists(ENV_LINE, max_size=8),
              st.sampled_from(["\n", "\r\n", "\r"])),
    st.binary(max_size=200),
)


@HOSTILE
@given(ENV_TEXT)
def test_any_env_file_ends_with_an_exit_code_and_no_traceback(content):
    with tempfile.TemporaryDirectory() as folder:
        config = write(Path(folder), "config.toml", INVALID_TOML)
        env = write(Path(folder), "hostile.env", content)
        code, out, err = run_cli(train(config, env, "--dry-run"))
    text = content.decode("utf-8", errors="replace") if isinstance(content, bytes) else content
    assert_clean(code, out, err, tuple(_key_values(text)))
    assert code in (2, 3), err  # a bad URL or the invalid config (2), a missing or unusable key (3)


def _key_values(text: str):
    """The API key values of a .env text that nothing else in it (a URL, say) repeats, so
    finding one in the output can only be a leak."""
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if "API_KEY=" in line:
            value = line.split("=", 1)[1].strip("'\" ")
            others = "\n".join(lines[:index] + lines[index + 1:]) + tempfile.gettempdir()
            if value[4:] not in others:
                yield value


FLAG_VALUES = {
    "--poll-interval": st.one_of(st.floats().map(repr), st.sampled_from(["nan", "inf", "-1", "0", "1e309"]), ARGV_TEXT),
    "--poll-timeout": st.one_of(st.floats().map(repr), st.sampled_from(["nan", "inf", "-1", "0", "1e309"]), ARGV_TEXT),
    "--task-url": st.one_of(ENV_VALUES, ARGV_TEXT),
    # never a valid URL to a real host: only the closed port or text without a scheme
    "--backend": st.one_of(st.just(CLOSED), st.sampled_from(["http://[::1", "http://host:99999", "ftp://x", "",
                                                             "http://xn--/", "local"]),
                           ARGV_TEXT.filter(lambda text: "://" not in text)),
    "--model": ARGV_TEXT,
    "--idempotency": ARGV_TEXT,
    "--metric": ARGV_TEXT,
    "--stream-format": st.one_of(st.just("chart"), ARGV_TEXT),
    "--type": st.one_of(st.sampled_from(["auto", "rl", "sft"]), ARGV_TEXT),
    "--env-file": st.one_of(st.sampled_from(["/", "/dev/null", "/nonexistent/.env", ""]), ARGV_TEXT),
    "--config": st.one_of(st.sampled_from(["/", "/dev/null", "/dev/zero", "/nonexistent.toml", ""]), ARGV_TEXT),
}


@st.composite
def hostile_flags(draw) -> list[str]:
    names = draw(st.lists(st.sampled_from(sorted(FLAG_VALUES)), max_size=4, unique=True))
    flags: list[str] = []
    for name in names:
        flags += [name, draw(FLAG_VALUES[name])]
    return flags + draw(st.sampled_from([["--dry-run"], ["--no-poll"], []]))


@HOSTILE
@given(hostile_flags())
@example(["--backend", "local", "--dry-run"])  # the embedded backend: not a usage error
def test_any_flags_end_with_an_exit_code_and_no_traceback(flags):
    with tempfile.TemporaryDirectory() as folder:
        config = write(Path(folder), "config.toml", DEMO_TOML)
        env = good_env(Path(folder))
        # The defaults come first: a flag given again later wins, as argparse does.
        argv = train(config, env, "--backend", CLOSED, "--poll-interval", "0.01", "--poll-timeout", "0.5", *flags)
        code, out, err = run_cli(argv)
    assert_clean(code, out, err)
    if expects_usage_error(flags):
        assert code == 2, err


def expects_usage_error(flags: list[str]) -> bool:
    """A flag value every front end refuses before anything else is done."""
    # A trailing switch (--dry-run, --no-poll) has no value: not strict.
    given = dict(zip(flags[::2], flags[1::2], strict=False))
    backend, key = given.get("--backend"), given.get("--idempotency")
    interval, timeout = given.get("--poll-interval"), given.get("--poll-timeout")
    return any([
        # --backend local is the embedded backend, not a URL.
        backend is not None and backend.strip().lower() != LOCAL and backend_url_problem(backend) is not None,
        bool(key) and (header_value_problem(key) is not None or len(key) > 255),
        interval is not None and _bad_seconds(interval, allow_zero=False),
        timeout is not None and _bad_seconds(timeout, allow_zero=True),
    ])


def _bad_seconds(text: str, *, allow_zero: bool) -> bool:
    try:
        value = float(text)  # as argparse reads it
    except ValueError:
        return True
    return not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero)


@HOSTILE
@given(ARGV_TEXT.filter(lambda text: job_id_problem(text) is not None))
def test_a_bad_job_id_is_a_usage_error_before_any_request(job_id):
    code, out, err = run_cli(["attach", "--no-tui", "--backend", CLOSED, "--", job_id])
    assert_clean(code, out, err)
    assert code == 2 and "Not a job id" in err


# --------------------------------------------------------------------------- regressions, one per item


@pytest.mark.parametrize("content", [
    "a = " + "[" * 5000 + "]" * 5000,
    "a = " + "{b = " * 5000 + "1" + "}" * 5000,
    "[" + ".".join(["a"] * 5000) + "]\nx = 1",
    ".".join(["a"] * 100_000) + " = 1",  # tomllib alone would use memory quadratic in the parts
])
def test_deep_nesting_is_a_config_problem_with_its_line(tmp_path, content):
    config = write(tmp_path, "deep.toml", "# a comment first\n" + content + "\n")
    code, out, err = run_cli(train(config, good_env(tmp_path), "--backend", CLOSED, "--dry-run"))
    assert_clean(code, out, err)
    assert code == 2 and "nested too deeply" in err and "[line 2, column" in err


def test_huge_binary_and_special_config_files(tmp_path):
    big = tmp_path / "big.toml"
    with big.open("wb") as handle:
        handle.truncate(50 * 1024 * 1024)  # sparse: 50 MB without writing them
    binary = write(tmp_path, "binary.toml", bytes(range(256)) * 4)
    expected = {big: "too large for a config (50.0 MB", binary: "not UTF-8 text", tmp_path: "is a directory",
                Path("/dev/zero"): "not a regular file"}
    for config, message in expected.items():
        code, out, err = run_cli(train(config, good_env(tmp_path), "--backend", CLOSED, "--dry-run"))
        assert_clean(code, out, err)
        assert code == 2 and message in err, err


@pytest.mark.parametrize("key,position,kind", [
    ("sk_tëst_0123456789", 5, "not ASCII"),
    ("sk_test_0123456789😀", 19, "not ASCII"),
    ("sk_test 0123456789", 8, "a space"),
    ("sk_test\t0123456789", 8, "a tab"),
])
def test_a_key_a_header_cannot_carry_is_named_without_its_value(tmp_path, key, position, kind):
    env = write(tmp_path, ".env", f'SYNTH_API_KEY="{key}"\nENVIRONMENT_API_KEY={ENV_KEY}\nTASK_APP_URL={CLOSED}\n')
    config = write(tmp_path, "config.toml", DEMO_TOML)
    code, out, err = run_cli(train(config, env, "--backend", CLOSED, "--dry-run"))
    assert_clean(code, out, err, (key,))
    assert code == 3
    assert f"SYNTH_API_KEY from {env} cannot be sent: character {position} of {len(key)} is {kind}" in err


@pytest.mark.parametrize("url,problem", MALFORMED_BACKEND_URLS)
def test_a_malformed_backend_url_is_a_usage_error_naming_its_place(tmp_path, monkeypatch, url, problem):
    env = write(tmp_path, ".env", good_env(tmp_path).read_text() + f"BACKEND_BASE_URL={url}\n")
    config = write(tmp_path, "config.toml", DEMO_TOML)
    code, out, err = run_cli(train(config, env, "--dry-run"))
    assert_clean(code, out, err)
    assert code == 2 and f"BACKEND_BASE_URL in {env} is not a usable backend URL" in err and problem in err
    code, _, err = run_cli(train(config, good_env(tmp_path), "--backend", url, "--dry-run"))
    assert code == 2 and "--backend is not a usable backend URL" in err and problem in err
    monkeypatch.setenv("BACKEND_BASE_URL", url)
    code, _, err = run_cli(train(config, good_env(tmp_path), "--dry-run"))
    assert code == 2 and "BACKEND_BASE_URL in the shell environment" in err


@pytest.mark.parametrize("url", ["http://[::1", "http://127.0.0.1:99999", "localhost:8102"])
def test_a_malformed_task_url_is_a_usage_error(tmp_path, url):
    config = write(tmp_path, "config.toml", DEMO_TOML)
    code, out, err = run_cli(train(config, good_env(tmp_path), "--backend", CLOSED, "--task-url", url, "--dry-run"))
    assert_clean(code, out, err)
    assert code == 2 and "--task-url is not a usable task app URL" in err


@pytest.mark.parametrize("job_id", ["../../x", "", ".", "..", "a/b", "job?x=1", "j" * 129])
def test_attach_refuses_a_job_id_that_is_not_one(job_id):
    code, out, err = run_cli(["attach", job_id, "--no-tui", "--backend", CLOSED])
    assert_clean(code, out, err)
    assert code == 2 and "Not a job id" in err


@pytest.mark.parametrize("flag,value", [
    ("--poll-interval", "-1"), ("--poll-interval", "0"), ("--poll-interval", "nan"), ("--poll-interval", "inf"),
    ("--poll-timeout", "-1"), ("--poll-timeout", "nan"), ("--poll-timeout", "inf"),
])
def test_poll_flags_must_be_finite_seconds(tmp_path, flag, value):
    config = write(tmp_path, "config.toml", DEMO_TOML)
    code, out, err = run_cli(train(config, good_env(tmp_path), "--backend", CLOSED, flag, value, "--dry-run"))
    assert_clean(code, out, err)
    assert code == 2 and f"{flag} must be a number of seconds" in err
    code, _, err = run_cli(["attach", "job_1", "--no-tui", "--backend", CLOSED, flag, value])
    assert code == 2 and f"{flag} must be a number of seconds" in err


def test_config_and_env_file_paths_that_are_not_files(tmp_path):
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    config = write(tmp_path, "config.toml", DEMO_TOML)
    cases = [
        (train(fifo, good_env(tmp_path), "--dry-run"), 2, "is not a regular file"),
        (train(tmp_path, good_env(tmp_path), "--dry-run"), 2, "is a directory"),
        (train(config, tmp_path, "--dry-run"), 2, f"--env-file {tmp_path} is a directory"),
        (train(config, fifo, "--dry-run"), 2, "is not a regular file"),
        # A .env that cannot be read is bad input, exit 2, whatever its kind (docs/product.md#exit-codes).
        (train(config, write(tmp_path, "bin.env", b"\xff\xfe\x00binary"), "--dry-run"), 2, "is UTF-16 text"),
        (train(config, write(tmp_path, "latin.env", b"A=caf\xe9\n"), "--dry-run"), 2, "not UTF-8 text"),
    ]
    for argv, expected, message in cases:
        code, out, err = run_cli([*argv, "--backend", CLOSED])
        assert_clean(code, out, err)
        assert code == expected and message in err, err


def test_an_unreadable_config_is_a_usage_error(tmp_path, refuse_os_access):
    config = write(tmp_path, "config.toml", DEMO_TOML)
    refuse_os_access(config)  # as chmod 0 does for anyone but root (CI runs as root)
    code, out, err = run_cli(train(config, good_env(tmp_path), "--backend", CLOSED, "--dry-run"))
    assert_clean(code, out, err)
    assert code == 2 and "Permission denied" in err


def test_a_broken_config_is_reported_before_a_bad_key(tmp_path):
    """Both wrong: the config's problem is said first (it needs no key to be found), not hidden
    behind the key's until the .env is fixed (a newcomer's walk)."""
    key = "sk_test 0123456789"
    env = write(tmp_path, ".env", f'SYNTH_API_KEY="{key}"\nENVIRONMENT_API_KEY={ENV_KEY}\nTASK_APP_URL={CLOSED}\n')
    config = write(tmp_path, "config.toml", "[algorithm\n")
    code, out, err = run_cli(train(config, env, "--backend", CLOSED, "--dry-run"))
    assert_clean(code, out, err, (key,))
    assert code == 2 and str(config) in err and "Using config" not in out
