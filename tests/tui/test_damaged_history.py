"""The history screen on a damaged run history (docs/product.md#damaged-state): a note in its
header and a notification, the file moved aside and kept, never "a bug in synth-tui"; one
that cannot be moved: the error with the path and what to do."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from textual.widgets import Static

from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession
from app.core.runs.history import RunHistory, take_repair_notes
from app.screens.dialogs.common import ErrorDialog
from app.screens.history import HistoryScreen, HistoryTable
from app.tui import SynthTuiApp
from support.pilot_waits import wait_for, wait_for_screen
from support.screen_text import notifications

NOISE = hashlib.sha512(b"damaged").digest() * 64


def state() -> Path:
    folder = Path(os.environ["SYNTH_TUI_STATE_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def history_app(project: Path) -> SynthTuiApp:
    return SynthTuiApp(LaunchSession(LaunchOptions(cwd=project), shell={}), start="history")


def header(app: SynthTuiApp) -> str:
    screen = next(s for s in app.screen_stack if isinstance(s, HistoryScreen))
    return str(screen.query_one("#history-header", Static).render())


async def test_a_damaged_history_is_a_note_on_the_history_screen_not_a_bug(project):
    take_repair_notes()
    history = state() / "history.sqlite"
    history.write_bytes(NOISE)
    app = history_app(project)
    async with app.run_test(size=(160, 40)) as pilot:
        await wait_for_screen(pilot, HistoryScreen)
        await wait_for(pilot, lambda: "was damaged" in header(app), what="the note in the header")
        kept = [p for p in state().iterdir() if p.name.startswith("history.corrupt-")]
        assert len(kept) == 1 and kept[0].read_bytes() == NOISE
        text = " ".join(header(app).split())
        assert f"⚠ The run history {history} was damaged (SQLite says: file is not a database)" in text
        assert kept[0].name in text
        # told in a notification too: posted by the app after the header is shown, so waited for
        await wait_for(pilot, lambda: any("was damaged" in n.message for n in notifications(app)),
                       what="the notification")
        assert not any(isinstance(s, ErrorDialog) for s in app.screen_stack)
        assert app.screen.query_one(HistoryTable).row_count == 0
        # F5 lists again from the fresh history: the note stays, nothing is moved again.
        await pilot.press("f5")
        await pilot.pause(0.2)
        assert [p.name for p in state().iterdir() if p.name.startswith("history.corrupt-")] == [kept[0].name]
    assert take_repair_notes() == [], "told once, by the screen"
    RunHistory().list()  # the fresh history works


async def test_a_history_that_cannot_be_moved_shows_the_path_and_the_fix(project, monkeypatch):
    history = state() / "history.sqlite"
    history.write_bytes(NOISE)

    def refused(source, target):
        raise OSError(13, "Permission denied", str(source))

    monkeypatch.setattr("app.core.state_files.os.rename", refused)
    app = history_app(project)
    async with app.run_test(size=(160, 40)) as pilot:
        modal = await wait_for_screen(pilot, ErrorDialog, "the error")
        assert modal.message == (f"The run history {history} is damaged (SQLite says: file is not a database) "
                                 f"and could not be moved aside: Permission denied.")
        assert modal.hint.startswith(f"Move it away yourself (mv {history} ")
        assert "bug in synth-tui" not in f"{modal.message} {modal.hint}"
    assert history.read_bytes() == NOISE


async def test_the_jobs_view_tells_a_history_moved_aside_by_its_rerun_lookup(faulty_backend):
    from app.screens.jobs import JobsScreen
    from support.fakes import ScriptedJob

    take_repair_notes()
    faulty_backend.add_job(ScriptedJob("job_a", [("succeeded", [], [])]))
    history = state() / "history.sqlite"
    history.write_bytes(NOISE)
    session = LaunchSession(LaunchOptions(backend=faulty_backend.url, poll_interval=0.05),
                            shell={"SYNTH_API_KEY": faulty_backend.api_key})
    session.resolve()
    app = SynthTuiApp(session, first_screen=lambda: JobsScreen(page_size=3, refresh_every=None))
    async with app.run_test(size=(160, 40)) as pilot:
        screen = await wait_for_screen(pilot, JobsScreen)
        await wait_for(pilot, lambda: screen.loads >= 1 and not screen.reading, what="the job list")
        await pilot.press("r")  # rerun reads the payload from the (damaged) history
        await wait_for(pilot, lambda: any("was damaged" in n.message for n in notifications(app)),
                       what="the note")
        assert not any(isinstance(s, ErrorDialog) for s in app.screen_stack)
    assert [p.read_bytes() for p in state().iterdir() if p.name.startswith("history.corrupt-")] == [NOISE]
    assert take_repair_notes() == []
