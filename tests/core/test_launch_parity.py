"""Both front ends run the one launch sequence (app/core/launch/service.py): against the same
faulty backends, headless ``run_train`` and the TUI (driven by Pilot) end with the same exit
code and leave the same files: the run folder's events.jsonl and the run history's rows.
The config file is read once on the way to the payload."""

from __future__ import annotations

import asyncio
import io
import json
import shutil
from pathlib import Path

import pytest

from app.cli.parser import build_parser, normalise_argv
from app.core.config import toml_source, validation
from app.core.errors import ExitCode
from app.core.launch import service
from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession
from app.core.paths import run_dir
from app.core.runs.history import RunHistory
from app.headless.printer import Printer
from app.headless.train import run_train
from app.screens.dashboard import DashboardScreen
from app.screens.preview import PayloadPreviewScreen
from app.screens.verification import VerificationScreen
from app.tui import guided_app
from support.fakes import FaultyBackend, TinyTaskApp, training_timeline
from support.pilot_waits import wait_for

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "configs" / "rl" / "crafter_qwen4b.toml"
ENV_KEY = "env_key_0123456789abcdef0123456789abcdef"


def world(root: Path, backend: FaultyBackend, task_app: TinyTaskApp) -> list[str]:
    """A project folder with a config and a .env pointing at these servers: the argv of a run."""
    root.mkdir(parents=True)
    config = root / "crafter.toml"
    shutil.copy(EXAMPLE, config)
    env = root / ".env"
    env.write_text(f"SYNTH_API_KEY={backend.api_key}\nENVIRONMENT_API_KEY={ENV_KEY}\nTASK_APP_URL={task_app.url}\n")
    return ["train", "--type", "rl", "--poll-interval", "0.02", "--config", str(config), "--env-file", str(env),
            "--backend", backend.url]


def parsed(argv: list[str]):
    return build_parser().parse_args(normalise_argv(argv))


def headless(argv: list[str], cwd: Path) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run_train(parsed([*argv, "--no-tui"]), printer=Printer(out=out, err=err), cwd=cwd)
    return code, out.getvalue() + err.getvalue()


async def tui(argv: list[str], cwd: Path) -> int:
    """The guided TUI from the same flags: verify, then (when it passes) preview, submit and
    watch the job to its end; then quit, as a user would."""
    app = guided_app(LaunchSession(LaunchOptions.from_args(parsed(argv), cwd=cwd)))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, VerificationScreen), what="the verification")
        screen = app.screen
        await wait_for(pilot, lambda: not screen.running, what="the checks", limit=1500)
        if screen.verdict is not None and screen.verdict.ready:
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, PayloadPreviewScreen), what="the preview")
            preview = app.screen
            await wait_for(pilot, lambda: not preview.rebuilding, what="the payload")
            await pilot.press("s")
            await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen) or preview.submit_error is not None,
                           what="the answer", limit=1500)
            if isinstance(app.screen, DashboardScreen):
                dashboard = app.screen
                await wait_for(pilot, lambda: dashboard.ended, what="the job's end", limit=3000)
        await pilot.press("ctrl+q")
        await pilot.pause()
    assert isinstance(app.return_value, int)
    return app.return_value


def files_written(job_id: str = "job_0001") -> dict[str, object]:
    """What a run leaves behind: the events file's seqs and the history's rows."""
    events = run_dir(job_id) / "events.jsonl"
    seqs = [json.loads(line)["seq"] for line in events.read_text().splitlines()] if events.exists() else None
    rows = [(r.job_id, r.last_status, r.final_status, r.rerun_of) for r in RunHistory().list()]
    return {"events": seqs, "history": rows}


@pytest.fixture
def both(tmp_path, monkeypatch):
    """Runs one scenario with each front end, each against its own fresh servers and state
    folder; returns [(exit code, files written)] for headless then the TUI."""

    async def run(scenario) -> list[tuple[int, dict[str, object]]]:
        results = []
        for name in ("headless", "tui"):
            monkeypatch.setenv("SYNTH_TUI_STATE_DIR", str(tmp_path / name / "state"))
            with FaultyBackend() as backend, TinyTaskApp() as task_app:
                backend.create_job_template = training_timeline(steps=3)
                scenario(backend)
                root = tmp_path / name / "project"
                argv = world(root, backend, task_app)
                try:
                    if name == "headless":
                        code, _output = await asyncio.to_thread(headless, argv, root)
                    else:
                        code = await tui(argv, root)
                finally:
                    backend.release.set()  # a held answer goes, so the server can stop
                results.append((code, files_written()))
        return results

    return run


async def test_a_202_to_create_is_not_a_job_in_either_front_end(both):
    def accepted(backend: FaultyBackend) -> None:
        backend.create_answer = (202, {"job_id": "job_0001", "status": "queued"})

    (code_h, files_h), (code_t, files_t) = await both(accepted)
    assert code_h == code_t == ExitCode.BACKEND
    assert files_h == files_t == {"events": None, "history": []}


async def test_a_verify_that_hangs_fails_alike_within_the_one_budget(both, monkeypatch):
    # A short cap for the hang only: the other scenarios keep the real one, as a check on a
    # loaded machine may take more than a second.
    monkeypatch.setattr(service, "CHECK_TIMEOUT_S", 1.0)

    def hangs(backend: FaultyBackend) -> None:
        backend.inject("verify", "hold")

    (code_h, files_h), (code_t, files_t) = await both(hangs)
    assert code_h == code_t == ExitCode.BACKEND  # the backend did not answer in time
    assert files_h == files_t == {"events": None, "history": []}


async def test_a_stream_dropped_mid_job_leaves_the_same_files(both):
    def drops(backend: FaultyBackend) -> None:
        backend.sse_enabled = True
        backend.inject("stream", "drop")
        backend.inject("status", "drop")

    (code_h, files_h), (code_t, files_t) = await both(drops)
    assert code_h == code_t == ExitCode.OK
    assert files_h == files_t
    events = files_h["events"]
    assert isinstance(events, list) and events == sorted(set(events)) and events
    assert files_h["history"] == [("job_0001", "succeeded", "succeeded", None)]


def test_a_headless_run_reads_the_config_file_once(tmp_path, faulty_backend, tiny_task_app, monkeypatch):
    reads: list[Path] = []
    real = toml_source.read_config_text

    def counted(path: Path) -> str:
        reads.append(Path(path))
        return real(path)

    monkeypatch.setattr(toml_source, "read_config_text", counted)
    monkeypatch.setattr(validation, "read_config_text", counted)
    faulty_backend.create_job_template = training_timeline(steps=2)
    root = tmp_path / "project"
    argv = world(root, faulty_backend, tiny_task_app)
    code, output = headless(argv, root)
    assert code == ExitCode.OK, output
    assert reads == [(root / "crafter.toml").resolve()]
