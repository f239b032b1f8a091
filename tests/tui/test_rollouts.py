"""The rollout inspector: a job's kept rollouts listed by step, best first; one opened turn by
turn; two of one seed side by side; a backend without rollouts said plainly.

The data is a real demo job's (seed 1, 16 steps: tests/data/rollouts/demo_job.json, read from
the embedded backend's rollout routes): the list of steps 1, 4 and 16 and ten rollouts whole.
The live tests serve it from a real embedded backend on a loopback port, written through its
store; the snapshots use it as a preset."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession
from app.core.runs.jobs import JobContext
from app.core.runs.rollouts import Rollout, RolloutSummary, RolloutTurn, rollout_from, summary_from
from app.local.servers import ServerHandle, start_backend
from app.local.state.store import Store
from app.screens.rollouts import RolloutCompareScreen, RolloutReader, RolloutScreen, RolloutsScreen
from app.tui import SynthTuiApp
from support.fakes import FaultyBackend, finished_job
from support.pilot_waits import wait_for, wait_for_screen
from support.screen_text import footer_text, notifications, screen_lines
from support.seeded_backend import API_KEY, seed_jobs
from widgets.rollout_image import RolloutImage, decode_image
from widgets.rollout_view import RolloutView, changed_words

DATA = json.loads((Path(__file__).resolve().parents[1] / "data" / "rollouts" / "demo_job.json").read_text())
JOB = "job_seed000"


def preset_reader() -> RolloutReader:
    summaries = [s for s in (summary_from(item) for item in DATA["rollouts"]) if s is not None]
    rollouts = [rollout_from(body, rollout_id) for rollout_id, body in DATA["full"].items()]
    return RolloutReader(DATA["job_id"], preset=(summaries, rollouts))


def preset_app(**screen_options) -> SynthTuiApp:
    session = LaunchSession(LaunchOptions(backend="http://127.0.0.1:8000"), shell={"SYNTH_API_KEY": "sk_fixed_000000"})
    session.resolve()
    return SynthTuiApp(session, first_screen=lambda: RolloutsScreen(JobContext(DATA["job_id"]),
                                                                    reader=preset_reader(), **screen_options))


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[ServerHandle]:
    """The demo job's rollouts, those kept whole, in a real backend's SQLite file."""
    db = tmp_path_factory.mktemp("rollouts") / "state.sqlite3"
    seed_jobs(db, 1)
    store = Store(db)
    for rollout_id, body in DATA["full"].items():
        summary = {key: body[key] for key in ("phase", "step", "index", "seed", "reward", "turns")}
        record = {"turns_kept": body.get("turns_kept", body["turns"]), "turns_cut": body.get("turns_cut", 0),
                  "trajectory": body["trajectory"]}
        store.rollouts.add(JOB, {"rollout_id": rollout_id, **summary}, record, max_bytes=1 << 24,
                           created_at="2026-01-01T00:00:00+00:00")
    store.close()
    with start_backend(api_key=API_KEY, db_path=db, env_api_keys=[]) as server:
        yield server


def live_app(url: str, key: str, job_id: str = JOB, **screen_options) -> SynthTuiApp:
    session = LaunchSession(LaunchOptions(backend=url), shell={"SYNTH_API_KEY": key})
    session.resolve()
    return SynthTuiApp(session, first_screen=lambda: RolloutsScreen(JobContext(job_id), **screen_options))


def header(app: SynthTuiApp) -> str:
    return str(app.screen.query_one("#rollouts-header", Static).render())


def listed(screen: RolloutsScreen) -> list[tuple[str, int, float]]:
    return [(s.phase, s.step, s.reward) for s in screen.shown()]


async def loaded(pilot) -> RolloutsScreen:
    screen = pilot.app.screen
    assert isinstance(screen, RolloutsScreen)
    await wait_for(pilot, lambda: screen.loads > 0, what="the rollout list")
    return screen


async def test_the_latest_step_lists_first_best_first_and_the_steps_move(served):
    app = live_app(served.url, API_KEY)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = await loaded(pilot)
        assert screen.step == 16 and "step 16 of 1–16" in header(app)
        rewards = [reward for _, _, reward in listed(screen)]
        assert rewards == sorted(rewards, reverse=True) and rewards[0] > 0.9
        await pilot.press("w")
        assert [reward for _, _, reward in listed(screen)] == sorted(rewards)
        await pilot.press("left_square_bracket")
        assert screen.step == 4 and {phase for phase, _, _ in listed(screen)} == {"eval"}
        await pilot.press("left_square_bracket")
        assert screen.step == 1 and {phase for phase, _, _ in listed(screen)} == {"train"}
        assert screen.selected() == screen.shown()[0]  # a new step starts at its top: the worst, after w
        # The preview shows the highlighted rollout; the worst of step 1 wanders all 12 turns.
        view = app.screen.query_one(RolloutView)
        await wait_for(pilot, lambda: view.rollout is not None, what="the preview")
        assert view.rollout.summary.reward == 0 and len(view.rollout.turns) == 12
        assert not any(turn.reward for turn in view.rollout.turns)


async def test_enter_opens_a_rollout_turn_by_turn_and_c_puts_the_same_seed_beside_it(served):
    app = live_app(served.url, API_KEY, step=16)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await loaded(pilot)
        await pilot.press("t", "t")  # all -> train -> eval
        assert screen.phase == "eval" and all(phase == "eval" for phase, _, _ in listed(screen))
        assert {s.seed for s in screen.shown()} == {2}  # the eval seeds played at step 16 that were kept whole
        await pilot.press("enter")
        await wait_for_screen(pilot, RolloutScreen, "the rollout")
        rollout = app.screen.rollout
        assert rollout.summary.step == 16 and rollout.summary.seed == 2 and rollout.turns[-1].done
        text = " ".join(str(w.render()) for w in app.screen.query(Static))
        assert "turn 1" in text and 'move(direction=' in text and "done" in text
        await pilot.press("c")
        await wait_for_screen(pilot, RolloutCompareScreen, "the comparison")
        left, right = app.screen.left, app.screen.right
        assert (left.summary.step, right.summary.step) == (4, 16) and left.summary.seed == right.summary.seed == 2
        await pilot.press("escape", "escape")
        assert app.screen is screen


async def test_a_seed_played_once_has_nothing_to_compare_with_until_another_is_chosen(served):
    """A seed played once: c warns and stays on the rollouts. The walk: that warning ("Nothing to
    compare it with: … seed N") stayed up after the user moved to a rollout of another seed,
    saying something about a rollout no longer chosen."""
    app = live_app(served.url, API_KEY, step=1)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = await loaded(pilot)
        await pilot.press("c")
        await wait_for(pilot, lambda: any("Nothing to compare it with" in n.message for n in notifications(app)),
                       what="the warning")
        assert app.screen is screen
        chosen = screen.selected()
        await pilot.press("down")
        await wait_for(pilot, lambda: screen.selected() is not chosen, what="another rollout highlighted")
        assert not any("Nothing to compare it with" in n.message for n in notifications(app))


async def test_the_dashboard_key_opens_it_and_a_backend_without_rollouts_is_said_plainly(
        faulty_backend: FaultyBackend):
    faulty_backend.add_job(finished_job("job_plain", 2, 0.1))
    session = LaunchSession(LaunchOptions(backend=faulty_backend.url, poll_interval=0.05),
                            shell={"SYNTH_API_KEY": faulty_backend.api_key})
    session.resolve()
    app = SynthTuiApp(session, attach=JobContext("job_plain"))
    async with app.run_test(size=(120, 30)) as pilot:
        dashboard = app.screen
        await wait_for(pilot, lambda: dashboard.ended, what="the job's end")
        await pilot.press("i")
        await loaded(pilot)
        assert "does not serve the rollouts" in header(app)
        assert any("does not serve the rollouts" in n.message for n in notifications(app))
        assert app.screen.query_one(DataTable).row_count == 0
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is dashboard, what="the dashboard again")


async def test_q_goes_back_from_each_inspector_screen_to_the_dashboard(served):
    """The inspector's screens are pushed: their q goes back, as esc does, and says so; the
    dashboard under them is the first screen, so its q quits."""
    session = LaunchSession(LaunchOptions(backend=served.url, poll_interval=0.05), shell={"SYNTH_API_KEY": API_KEY})
    session.resolve()
    app = SynthTuiApp(session, attach=JobContext(JOB))
    async with app.run_test(size=(80, 24)) as pilot:
        dashboard = app.screen
        await wait_for(pilot, lambda: dashboard.ended, what="the job's end")
        await pilot.press("i")
        screen = await loaded(pilot)
        await wait_for(pilot, lambda: "q Back" in footer_text(app), what="q Back in the footer")
        await pilot.press("t", "t", "enter")  # eval rollouts of step 16: seed 2 was kept at step 4 too
        await wait_for_screen(pilot, RolloutScreen, "the rollout")
        rollout = app.screen
        await pilot.press("c")
        await wait_for_screen(pilot, RolloutCompareScreen, "the comparison")
        # The footer is recomposed after the screen is: wait for what it reads.
        await wait_for(pilot, lambda: "q Back" in footer_text(app), what="q Back in the comparison's footer")
        await pilot.press("q")
        await wait_for(pilot, lambda: app.screen is rollout, what="the rollout again")
        await pilot.press("q")
        await wait_for(pilot, lambda: app.screen is screen, what="the list again")
        await pilot.press("q")
        await wait_for(pilot, lambda: app.screen is dashboard, what="the dashboard again")
        await wait_for(pilot, lambda: "q Quit" in footer_text(app), what="q Quit on the first screen")
        assert app.is_running


async def test_the_list_shows_a_loading_indicator_until_the_first_page_arrives(served, monkeypatch):
    import app.screens.rollouts as rollouts_screen

    release = asyncio.Event()
    read = rollouts_screen.list_rollouts

    async def held(client, job_id):
        await release.wait()
        return await read(client, job_id)

    monkeypatch.setattr(rollouts_screen, "list_rollouts", held)
    app = live_app(served.url, API_KEY)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        table = screen.query_one(DataTable)
        # The indicator covers the table: its column headings are not drawn while it waits.
        await wait_for(pilot, lambda: table.loading and "Reward" not in "".join(screen_lines(app)),
                       what="the loading indicator")
        assert screen.loads == 0 and table.row_count == 0
        release.set()
        await loaded(pilot)
        await wait_for(pilot, lambda: "Reward" in "".join(screen_lines(app)), what="the indicator to go")
        assert table.row_count > 0 and not table.loading


def test_the_words_that_changed_since_the_turn_before_are_marked():
    marked = changed_words("at column 1, row 3. state: pos=1,3", "at column 1, row 2. state: pos=1,2")
    styled = {marked.plain[span.start:span.end] for span in marked.spans}
    assert styled == {"2.", "pos=1,2"}
    assert not changed_words(None, "first turn").spans


def test_snapshot_rollouts_wide(snap_compare):
    assert snap_compare(preset_app(), terminal_size=(160, 45))


def test_snapshot_rollouts_narrow_early_step(snap_compare):
    assert snap_compare(preset_app(step=1), terminal_size=(80, 24), press=["w"])


def test_snapshot_rollout_wandering_narrow(snap_compare):
    assert snap_compare(preset_app(step=1), terminal_size=(80, 24), press=["down", "enter"])


def test_snapshot_same_seed_side_by_side(snap_compare):
    assert snap_compare(preset_app(step=16), terminal_size=(160, 45), press=["t", "t", "c"])


# -- images ---------------------------------------------------------------------------------


def png_data_url(width: int = 24, height: int = 12) -> str:
    from PIL import Image

    picture = Image.new("RGB", (width, height))
    picture.putdata([(x * 10 % 256, y * 20 % 256, 128) for y in range(height) for x in range(width)])
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def image_rollout() -> Rollout:
    summary = RolloutSummary(rollout_id="rl-3-0", step=3, phase="train", index=0, seed=5, reward=1.0, turns=1)
    turn = RolloutTurn(index=1, observation="A frame of the game.", images=(
        png_data_url(), "https://example.invalid/frame.png", "data:image/png;base64,bm90IGFuIGltYWdl"),
        tools=("act",), action='act(key="a")', applied=None, reward=1.0, done=True)
    return Rollout(summary, (turn,))


def image_app() -> SynthTuiApp:
    rollout = image_rollout()
    session = LaunchSession(LaunchOptions(backend="http://127.0.0.1:8000"), shell={"SYNTH_API_KEY": "sk_fixed_000000"})
    session.resolve()
    reader = RolloutReader("job_images", preset=([rollout.summary], [rollout]))
    return SynthTuiApp(session, first_screen=lambda: RolloutScreen(reader, rollout))


async def test_images_are_drawn_in_cells_or_say_why_not():
    app = image_app()
    async with app.run_test(size=(100, 40)) as pilot:
        images = list(app.screen.query(RolloutImage))
        assert len(images) == 3
        await wait_for(pilot, lambda: all(image.drawn for image in images), what="the images")
        drawn, linked, broken = images
        strips = drawn.render_lines(drawn.region.reset_offset)
        rows = ["".join(segment.text for segment in strip) for strip in strips]
        assert len(rows) == 6 and all(row.count("▄") == 24 for row in rows)  # 24x12 pixels, two a cell
        colours = {segment.style.bgcolor for strip in strips for segment in strip if segment.text == "▄"}
        assert len(colours) > 10  # the picture's colours, not one block colour
        assert "not fetched" in str(linked.render()) and "example.invalid" in str(linked.render())
        assert "could not be decoded" in str(broken.render())


async def test_an_image_whose_decode_fails_says_so_instead_of_decoding_for_ever(monkeypatch):
    def crash(source: str) -> None:
        raise RuntimeError("the decoder broke")

    monkeypatch.setattr("widgets.rollout_image.decode_image", crash)
    app = image_app()
    async with app.run_test(size=(100, 40)) as pilot:
        images = list(app.screen.query(RolloutImage))
        await wait_for(pilot, lambda: all(image.drawn for image in images), what="the images to give up")
        for image in images:
            text = str(image.render())
            assert "could not be drawn" in text and "decoding" not in text
        # The one error path for workers: a toast says what failed (an image is a side matter).
        await wait_for(pilot, lambda: any("the decoder broke" in n.message for n in notifications(app)),
                       what="the error notice")
        assert all(n.title == "An image could not be drawn" for n in notifications(app))


def test_an_image_claiming_a_huge_size_is_not_decoded():
    from PIL import Image

    header = io.BytesIO()
    Image.new("1", (8, 8)).save(header, format="PNG")
    raw = bytearray(header.getvalue())
    raw[16:24] = (60_000).to_bytes(4, "big") + (60_000).to_bytes(4, "big")  # IHDR width and height
    picture, caption = decode_image("data:image/png;base64," + base64.b64encode(bytes(raw)).decode())
    assert picture is None and "could not be decoded" in caption


def test_snapshot_rollout_with_an_image(snap_compare):
    async def images_drawn(pilot) -> None:  # decoded in threads: only the finished picture is compared
        await wait_for(pilot, lambda: all(image.drawn for image in pilot.app.screen.query(RolloutImage)),
                       what="the images")

    assert snap_compare(image_app(), terminal_size=(100, 30), run_before=images_drawn)
