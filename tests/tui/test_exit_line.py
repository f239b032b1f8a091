"""The line the dashboard prints on the terminal when it quits names our commands as they were
run (issue 37: "Past runs: synth-tui history" after `.venv/bin/synth-tui lab …`)."""

from __future__ import annotations

import sys

from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession
from app.screens.dashboard import DashboardScreen, JobContext
from app.tui import SynthTuiApp
from support.fakes import ScriptedJob, event
from support.pilot_waits import wait_for

TYPED = ".venv/bin/synth-tui"


async def test_the_quit_line_names_the_command_as_it_was_run(faulty_backend, monkeypatch):
    monkeypatch.setattr(sys, "argv", [TYPED])
    faulty_backend.add_job(ScriptedJob("job_a", [("succeeded", [event(1, "rl.job.completed")], [])]))
    session = LaunchSession(LaunchOptions(backend=faulty_backend.url, poll_interval=0.02),
                            shell={"SYNTH_API_KEY": faulty_backend.api_key})
    session.resolve()
    app = SynthTuiApp(session, attach=JobContext("job_a"))
    printed: list[str] = []
    exit_app = app.exit
    monkeypatch.setattr(app, "exit", lambda *args, message=None, **kw: (printed.append(str(message)),
                                                                        exit_app(*args, message=message, **kw)))
    async with app.run_test(size=(120, 36)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.ended, what="the end")
        await pilot.press("q")
    assert any(f"Past runs: {TYPED} history" in line for line in printed), printed
