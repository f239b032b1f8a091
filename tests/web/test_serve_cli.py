"""`synth-tui serve`'s command line, and how a tab's process knows it draws for a browser
(docs/browser.md). The server itself is tested in tests/web/."""

from __future__ import annotations

import io
import sys

import pytest

from app.cli.dispatch import has_terminal, main
from app.cli.parser import build_parser
from app.core.launch.attaching import attach_command


@pytest.mark.parametrize("words, message", [
    (["rollouts", "job_1"], "is not served"),
    (["backend"], "is not served"),
    (["serve"], "is not served"),
    (["demo", "--port", "9000"], "--port belongs to serve"),
    (["attach", "job_1", "--host=0.0.0.0"], "--host belongs to serve"),
    (["jobs", "--no-tui"], "--no-tui has no screen"),
    (["attach"], "not valid"),
])
def test_serve_refuses_a_command_a_tab_cannot_run_before_listening(words, message, capsys):
    assert main(["serve", "--port", "1", *words]) == 2
    assert message in capsys.readouterr().err


def test_the_tab_command_is_parsed_after_serve_options():
    args = build_parser().parse_args(["serve", "--host", "::1", "--port", "0", "attach", "job_1", "--backend",
                                          "http://127.0.0.1:9"])
    assert (args.host, args.port) == ("::1", 0)
    from app.web.command import tab_command

    assert tab_command(args.command_line) == ["attach", "job_1", "--backend", "http://127.0.0.1:9"]
    assert tab_command([]) == ["train"]


def test_a_tab_runs_this_python_with_no_token_or_key_on_its_command_line():
    from app.web.tab import child_argv

    assert child_argv(["demo"]) == [sys.executable, "-P", "-m", "app.web.child", "demo"]


def test_the_web_driver_counts_as_a_terminal(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO())
    monkeypatch.delenv("TEXTUAL_DRIVER", raising=False)
    assert not has_terminal()
    monkeypatch.setenv("TEXTUAL_DRIVER", "textual.drivers.web_driver:WebDriver")
    assert has_terminal()


def test_a_tab_says_how_to_serve_the_job_again(monkeypatch):
    assert attach_command("job_1", "http://b", None) == "synth-tui attach job_1 --backend http://b"
    monkeypatch.setenv("SYNTH_TUI_SERVE", "1")
    assert attach_command("job_1", "http://b", None) == "synth-tui serve attach job_1 --backend http://b"


def test_loopback_and_the_printed_url():
    from app.web.command import is_loopback, page_url

    assert all(is_loopback(host) for host in ("127.0.0.1", "127.5.0.1", "::1", "localhost"))
    assert not any(is_loopback(host) for host in ("0.0.0.0", "::", "10.0.0.1", "example.com"))
    assert page_url("::1", 80, "t") == "http://[::1]:80/?token=t"
    assert page_url("127.0.0.1", 8000, "t") == "http://127.0.0.1:8000/?token=t"
