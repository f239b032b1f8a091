"""The model check's bounds (app/local/server/model_check.py, model_checks.py): issue 37's walk.
A check that outlasts its bound goes on and a retry answers from it; a backend that stops while
a check runs answers the waiting request at once (503) and is not held by the check's thread;
an unfinished check is a warning row, never a ✓, worded for the front end that shows it."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading

import httpx
import pytest

from app.core.api.results import ModelFinding, ModelVerifyResult
from app.core.launch.diagnosis import UNFINISHED_FIX, ModelCheck, Verdict, model_rows
from app.local.server import model_check
from app.local.server.model_checks import ModelChecks
from app.local.servers import start_backend
from support import loopback_http
from support.pilot_waits import poll_until

from ..conftest import API_KEY, ENV_KEY, api_client


class SlowCheck:
    """check_model made slow: it blocks until released, counting its runs."""

    def __init__(self, path: str | None = None) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.runs = 0
        self.path = path

    def __call__(self, model: str, *_args: object) -> model_check.ModelReport:
        self.runs += 1
        self.started.set()
        self.release.wait(60)
        return model_check.ModelReport(model=model, trains="lm", path=self.path, parameters=1234)


async def test_a_retry_after_a_timeout_answers_from_the_check_that_went_on(monkeypatch, tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    slow = SlowCheck(path=str(model))
    monkeypatch.setattr(model_check, "check_model", slow)
    checks = ModelChecks()
    try:
        first = await model_check.check_model_bounded(str(model), "qwen2_5", 5e-5, "lm", timeout=0.05, checks=checks)
        again = await model_check.check_model_bounded(str(model), "qwen2_5", 5e-5, "lm", timeout=0.05, checks=checks)
    finally:
        slow.release.set()
    assert first["finished"] is False and again["finished"] is False
    assert slow.runs == 1  # the second request waited for the same check
    assert first["ok"] is True and first["problems"] == [] and first["parameters"] is None
    assert first["warnings"][0]["message"].startswith("not finished within 0.05 s")
    fix = first["warnings"][0]["fix"]
    assert "check again (r in the TUI, or run the command again)" in fix and "retry (r)" not in fix
    answered = await model_check.check_model_bounded(str(model), "qwen2_5", 5e-5, "lm", timeout=5, checks=checks)
    assert answered["finished"] is True and answered["parameters"] == 1234 and slow.runs == 1  # the kept answer
    other = await model_check.check_model_bounded(str(model), "llama3_2", 5e-5, "lm", timeout=5, checks=checks)
    assert other["finished"] is True and slow.runs == 2  # another template is another check
    model.write_bytes(b"GGUF, written again")
    await model_check.check_model_bounded(str(model), "qwen2_5", 5e-5, "lm", timeout=5, checks=checks)
    assert slow.runs == 3  # the model changed on disk: checked again


async def test_a_model_that_was_not_found_is_checked_again(monkeypatch):
    """A model not found may be fetched before the next check: its answer is not kept."""
    slow = SlowCheck(path=None)
    slow.release.set()
    monkeypatch.setattr(model_check, "check_model", slow)
    checks = ModelChecks()
    for _ in range(2):
        await model_check.check_model_bounded("org/absent", None, None, "lm", timeout=5, checks=checks)
    assert slow.runs == 2


def test_a_backend_stopping_during_a_check_answers_it_and_stops(monkeypatch, tmp_path, caplog):
    """Issue 37: Ctrl+C during a model check printed uvicorn's traceback, then hung until the
    check's thread ended. The waiting request is answered 503 and the server's thread ends."""
    slow = SlowCheck()
    monkeypatch.setattr(model_check, "check_model", slow)
    answers: list[object] = []
    caplog.set_level(logging.INFO)
    server = start_backend(api_key=API_KEY, db_path=tmp_path / "state.sqlite3", env_api_keys=[ENV_KEY],
                           policy_kind="lm")
    server_thread = server._thread
    assert server_thread is not None

    def ask() -> None:
        with api_client(server) as api:
            try:
                answers.append(api.post("/rl/verify_model", json={"model": "org/slow"}, timeout=60))
            except httpx.TransportError as exc:
                answers.append(exc)

    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    try:
        assert slow.started.wait(30), "the check did not start"
        stopping = threading.Thread(target=server.stop, daemon=True)
        stopping.start()
        stopping.join(30)
        asking.join(30)
        ended = not server_thread.is_alive()
    finally:
        slow.release.set()
        server.stop()
    assert ended, "the backend's thread waited for the model check"
    assert len(answers) == 1 and isinstance(answers[0], httpx.Response), answers
    assert answers[0].status_code == 503 and "stopping" in answers[0].json()["detail"]
    logged = caplog.text
    assert "Traceback" not in logged and "Exception in ASGI" not in logged and "graceful shutdown" not in logged


SLOW_CHECK_MAIN = """
import os, sys, threading
from pathlib import Path
from app.local.server import model_check

def slow_check(*_args):
    Path(os.environ["CHECK_STARTED"]).write_text("started")
    threading.Event().wait()  # a check that never ends by itself

model_check.check_model = slow_check
from app.cli.dispatch import main
sys.exit(main())
"""
_LISTENING = re.compile(r"embedded backend on (http://\S+)/api")


def _answering(url: str) -> bool:
    try:
        return loopback_http.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


@pytest.mark.usefixtures("cli_process")  # a real process, given SIGINT
def test_ctrl_c_during_a_check_ends_synth_tui_backend_without_a_traceback(tmp_path):
    started, log = tmp_path / "check-started", tmp_path / "backend.log"
    env = {**os.environ, "HOME": str(tmp_path), "SYNTH_API_KEY": API_KEY, "ENVIRONMENT_API_KEY": ENV_KEY,
           "PYTHONPATH": os.pathsep.join(sys.path), "CHECK_STARTED": str(started)}
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", SLOW_CHECK_MAIN, "backend", "--port", "0", "--db",
                                 str(tmp_path / "db.sqlite3"), "--trainer", "tabular"],
                                stdout=subprocess.DEVNULL, stderr=err, env=env)
    answers: list[object] = []
    try:
        url = poll_until(lambda: (m := _LISTENING.search(log.read_text())) and m.group(1), timeout=60,
                         what="the backend to listen")
        poll_until(lambda: _answering(url + "/api/health"), timeout=60, what="the backend to answer")

        def ask() -> None:
            try:
                answers.append(loopback_http.post(f"{url}/api/rl/verify_model", json={"model": "org/slow"},
                                                  headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60))
            except httpx.TransportError as exc:
                answers.append(exc)

        asking = threading.Thread(target=ask, daemon=True)
        asking.start()
        poll_until(started.exists, timeout=60, what="the model check to start")
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"synth-tui backend still runs after SIGINT during a check: {log.read_text()[-2000:]}")
        asking.join(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = log.read_text()
    assert "Traceback" not in text and "Exception in ASGI" not in text, text
    assert len(answers) == 1 and isinstance(answers[0], httpx.Response) and answers[0].status_code == 503, answers


def test_an_unfinished_check_is_a_warning_row_never_a_tick():
    result = ModelVerifyResult.from_body({
        "ok": True, "model": "m.gguf", "trains": "lm", "problems": [], "finished": False, "seconds": 20,
        "warnings": [{"message": "not finished within 20 s (reading m.gguf's config, tokenizer and template); the "
                                 "job checks the model again as it loads it", "fix": "check again (…)"}]})
    assert result.finished is False
    rows = model_rows(ModelCheck("m.gguf", 30.0, elapsed_s=20.0, result=result))
    assert [row.verdict for row in rows] == [Verdict.WARNING]
    assert rows[0].reason.startswith("not finished within 20 s") and rows[0].fix == UNFINISHED_FIX
    assert "r" in UNFINISHED_FIX and "the job checks the model again as it loads it" in UNFINISHED_FIX
    # An answer without the field (another backend, an older one) is a finished one.
    assert ModelVerifyResult.from_body({"ok": True, "problems": [], "warnings": []}).finished is True


def test_headless_says_to_run_the_command_again_not_a_key(capsys):
    from app.headless.printer import Printer
    from app.headless.train import _print_model_check

    result = ModelVerifyResult(True, "lm", warnings=[ModelFinding(
        "not finished within 20 s (reading m.gguf's config, tokenizer and template); the job checks the model "
        "again as it loads it", "check again (r in the TUI, or run the command again)")], finished=False)
    _print_model_check(ModelCheck("m.gguf", 30.0, result=result), Printer())
    out, err = capsys.readouterr()
    assert "Model check: NOT FINISHED (POST /rl/verify_model · m.gguf: not finished within 20 s" in out
    assert "Model check: OK" not in out and "(r)" not in out + err and "r in the TUI" not in out + err
    assert "run the command again" in err
