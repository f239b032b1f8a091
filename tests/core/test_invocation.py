"""Printed hints name the command as it was run (issue 37: `synth-tui attach …` was "command not
found" for a user who ran `.venv/bin/synth-tui` without activating the virtualenv)."""

from __future__ import annotations

import os
import sys

from app.core.invocation import as_run, program
from app.core.launch.attaching import attach_command
from support.cli import run_cli

TYPED = ".venv/bin/synth-tui"


def test_the_program_is_named_as_it_was_started(tmp_path, monkeypatch):
    script = tmp_path / "bin" / "synth-tui"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert program(TYPED) == TYPED
    assert program(str(script)) == str(script)
    assert program(str(tmp_path / "my dir" / "synth-tui")) == f"'{tmp_path}/my dir/synth-tui'"
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}/usr/bin")
    assert program(str(script)) == "synth-tui"  # PATH finds this very program by its name
    assert program("/usr/lib/python3/pytest") == "synth-tui"  # not started by name: the usual words
    assert program("synth-tui") == "synth-tui"


def test_a_sentence_names_only_commands(monkeypatch):
    monkeypatch.setattr(sys, "argv", [TYPED])
    assert as_run("Run `synth-tui history`, then synth-tui attach job_1.") == \
        f"Run `{TYPED} history`, then {TYPED} attach job_1."
    # not a command: the program's name in prose, a file name, a backend's own words
    for prose in ("synth-tui could not update the run history", "/nfs/synth-tui backend",
                  "a synth-tui backend's database", "synth-tui-grpo-1234"):
        assert as_run(prose) == prose
    assert attach_command("job_1", "http://127.0.0.1:8000", None) == \
        f"{TYPED} attach job_1 --backend http://127.0.0.1:8000"


def test_an_error_hint_names_the_command_as_it_was_run(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "argv", [TYPED])
    result = run_cli("compare", "job_a", "--no-tui", "--backend", "http://127.0.0.1:9", cwd=tmp_path,
                     env={"SYNTH_API_KEY": "sk_test_0123456789abcdef"})
    assert result.returncode == 2
    assert f"{TYPED} compare JOB_A JOB_B (see {TYPED} history or {TYPED} jobs)" in result.stderr


async def test_an_unreachable_hosted_default_names_backend_local():
    """Issue 37: with no backend chosen and the hosted host unreachable, the fix names
    `--backend local` (no request leaves the machine: the transport refuses at once)."""
    import httpx
    import pytest

    from app.core.api.backend_url import DEFAULT_PROD_BACKEND
    from app.core.api.client import SynthClient
    from app.core.api.errors import BackendTimeout, BackendUnreachable

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno -3] Temporary failure in name resolution", request=request)

    def time_out(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectTimeout("timed out", request=request)

    for handler, error in ((refuse, BackendUnreachable), (time_out, BackendTimeout)):
        async with SynthClient(DEFAULT_PROD_BACKEND, "sk_test_0123456789abcdef", retries=0,
                               transport=httpx.MockTransport(handler)) as client:
            with pytest.raises(error) as caught:
                await client.list_jobs(limit=1)
        assert "--backend local" in (caught.value.hint or "") and "hosted service" in (caught.value.hint or "")
    # a backend the user chose keeps its own advice
    async with SynthClient("http://127.0.0.1:9", "sk_test_0123456789abcdef", retries=0,
                           transport=httpx.MockTransport(refuse)) as client:
        with pytest.raises(BackendUnreachable) as caught:
            await client.list_jobs(limit=1)
    assert "--backend local" not in (caught.value.hint or "") and "--backend" in (caught.value.hint or "")
