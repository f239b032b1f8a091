"""Regenerate the README's pictures: the app itself walks the demo and saves Textual SVGs.

    .venv/bin/python scripts/screenshots.py            # writes docs/images/*.svg

It starts the embedded backend and the reference task app (fresh demo keys, shown masked),
drives the guided flow with the same keys a user presses, and saves one SVG per step plus
the live dashboard mid-run, at the end (160x45 and 80x24), a rerun with the first run
overlaid, the jobs view and the comparison of the two runs.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from app.commands.demo import demo_options  # noqa: E402
from app.commands.demo_setup import start_demo  # noqa: E402
from app.core.launch.session import LaunchSession  # noqa: E402
from app.screens.compare import CompareScreen  # noqa: E402
from app.screens.config_picker import ConfigPickerScreen  # noqa: E402
from app.screens.dashboard import DashboardScreen  # noqa: E402
from app.screens.env_review import EnvReviewScreen  # noqa: E402
from app.screens.jobs import JobsScreen  # noqa: E402
from app.screens.preview import PayloadPreviewScreen  # noqa: E402
from app.screens.verification import VerificationScreen  # noqa: E402
from app.tui import SynthTuiApp  # noqa: E402
from widgets.metrics_grid import MetricsGrid  # noqa: E402

OUT = REPO / "docs" / "images"
SIZE = (160, 45)


async def until(pilot, condition: Callable[[], bool], seconds: float = 60.0) -> None:
    for _ in range(int(seconds / 0.05)):
        if condition():
            await pilot.pause(0.3)  # let the last frame settle
            return
        await pilot.pause(0.05)
    raise TimeoutError("the app did not reach the expected state")


async def walk(out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="synth-tui-shots-") as folder:
        setup = start_demo(folder)
        try:
            app = SynthTuiApp(LaunchSession(demo_options(setup, cwd=Path(folder))), start="picker")
            saved = []

            def shot(name: str) -> None:
                saved.append(Path(app.save_screenshot(filename=f"{name}.svg", path=str(out))))

            async with app.run_test(size=SIZE) as pilot:
                await until(pilot, lambda: isinstance(app.screen, ConfigPickerScreen) and app.screen.searched)
                shot("1-config-picker")
                await pilot.press("enter")
                await until(pilot, lambda: isinstance(app.screen, EnvReviewScreen) and bool(app.session.resolved))
                shot("2-env-review")
                await pilot.press("c")
                await until(pilot, lambda: isinstance(app.screen, VerificationScreen) and not app.screen.running)
                shot("3-verification")
                await pilot.press("enter")
                await until(pilot, lambda: isinstance(app.screen, PayloadPreviewScreen) and not app.screen.rebuilding)
                shot("4-payload-preview")
                await pilot.press("s")
                await until(pilot, lambda: isinstance(app.screen, DashboardScreen)
                            and len(app.screen.store.get("train.mean_score") or ()) >= 6)
                shot("5-dashboard-live")
                await until(pilot, lambda: app.screen.ended, seconds=120)
                shot("6-dashboard-finished")
                first = app.screen.job.job_id
                await pilot.resize_terminal(80, 24)
                await until(pilot, lambda: app.screen.has_class("-narrow"))
                shot("7-dashboard-80x24")
                await pilot.resize_terminal(*SIZE)
                # A rerun: the new job's charts carry the first run as a dimmed overlay.
                await pilot.press("r")
                await pilot.press("y")
                await until(pilot, lambda: isinstance(app.screen, DashboardScreen) and app.screen.job.job_id != first
                            and app.screen.ended, seconds=180)
                shot("8-rerun-overlay")
                second = app.screen.job.job_id
                app.push_screen(JobsScreen(refresh_every=None))
                await until(pilot, lambda: isinstance(app.screen, JobsScreen) and len(app.screen.rows) >= 2
                            and all(row.score is not None for row in app.screen._shown()))
                shot("9-jobs")
                app.push_screen(CompareScreen([second, first]))
                await until(pilot, lambda: isinstance(app.screen, CompareScreen)
                            and bool(app.screen.query(MetricsGrid)))
                shot("10-compare")
            return saved
        finally:
            setup.stop()


def main() -> None:
    for path in asyncio.run(walk(OUT)):
        print(path.relative_to(REPO))


if __name__ == "__main__":
    main()
