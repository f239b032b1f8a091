"""The compare view: several runs on one grid, the first in colour, the others dimmed."""

from __future__ import annotations

from app.core.api.wire import MetricPoint
from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession
from app.core.runs.compare import ComparedRun
from app.screens.compare import CompareScreen
from app.tui import SynthTuiApp
from support.fakes import finished_job
from support.pilot_waits import wait_for
from widgets.metrics_grid import MetricsGrid


def compare_app(backend_url: str, api_key: str, job_ids: list[str], runs: list[ComparedRun] | None = None):
    session = LaunchSession(LaunchOptions(backend=backend_url), shell={"SYNTH_API_KEY": api_key})
    session.resolve()
    return SynthTuiApp(session, first_screen=lambda: CompareScreen(job_ids, runs=runs))


async def test_compare_reads_the_runs_and_overlays_all_but_the_first(faulty_backend):
    faulty_backend.add_job(finished_job("job_a", 6, 0.0))
    faulty_backend.add_job(finished_job("job_b", 4, 0.1))
    faulty_backend.add_job(finished_job("job_c", 5, 0.2))
    app = compare_app(faulty_backend.url, faulty_backend.api_key, ["job_a", "job_b", "job_c"])
    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for(pilot, lambda: any([run.job_id for run in grid.overlays] == ["job_b", "job_c"]
                                          for grid in app.screen.query(MetricsGrid)), what="the overlays")
        grid = app.screen.query_one(MetricsGrid)
        assert len(grid.store.get("train.mean_score")) == 6
        await wait_for(pilot, lambda: len(grid.charts) == 2 and all(c.redraws for c in grid.charts))
        legend = grid.chart("mean_score").legend()
        assert "a train" in legend and "b train" in legend and "c train" in legend
        await pilot.press("f")
        assert grid.full
        await pilot.press("f5")
        await wait_for(pilot, lambda: any(g is not grid for g in app.screen.query(MetricsGrid)))


async def test_the_compact_legend_names_each_runs_latest_step():
    """Issue 37: the compare header said `step 8` while the other job ran 40."""
    short, long = ComparedRun("job_short"), ComparedRun("job_long")
    short.store.add([MetricPoint(name="train.mean_score", step=step, value=0.1) for step in range(1, 9)])
    long.store.add([MetricPoint(name="train.mean_score", step=step, value=0.2) for step in range(1, 41)])
    app = compare_app("http://127.0.0.1:8000", "sk_fixed_000000", ["job_short", "job_long"], [short, long])
    async with app.run_test(size=(60, 14)) as pilot:  # a compact grid: the step is in the legend
        await wait_for(pilot, lambda: any(grid.overlays for grid in app.screen.query(MetricsGrid)), what="the overlay")
        chart = app.screen.query_one(MetricsGrid).chart("mean_score")
        await wait_for(pilot, lambda: chart.has_class("-compact"), what="the compact chart")
        assert "steps 8, 40" in chart.legend()


def fixed_runs() -> list[ComparedRun]:
    runs = []
    for index, job_id in enumerate(("job_first", "job_rerun", "job_third")):
        run = ComparedRun(job_id)
        run.store.add([MetricPoint(name=name, step=step, value=round(value, 4), created_at="2026-01-01T12:00:00Z")
                       for step in range(1, 31)
                       for name, value in (("train.mean_score", 0.2 + 0.7 * (1 - 0.9 ** step) - 0.08 * index),
                                           ("train.loss", 1.0 - 0.7 * (1 - 0.9 ** step) + 0.05 * index))])
        runs.append(run)
    return runs


def test_snapshot_compare_wide(snap_compare):
    app = compare_app("http://127.0.0.1:8000", "sk_fixed_000000", ["job_first", "job_rerun", "job_third"],
                      fixed_runs())
    assert snap_compare(app, terminal_size=(160, 45))


def test_snapshot_compare_narrow(snap_compare):
    app = compare_app("http://127.0.0.1:8000", "sk_fixed_000000", ["job_first", "job_rerun", "job_third"],
                      fixed_runs())
    assert snap_compare(app, terminal_size=(80, 24))
