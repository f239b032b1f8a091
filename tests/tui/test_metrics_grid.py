"""The metrics grid: every metric at once, readable at 160x45 and 80x24, overlays of earlier
runs, and the redraw rule (docs/product.md#metrics-grid)."""

from __future__ import annotations

import re
import time

import pytest
from test_dashboard import dashboard, make_dashboard_app
from test_plot_canvas import cells, stock_cells
from textual.app import App, ComposeResult
from textual.content import Content
from textual.widgets import Input

from app.core.api.wire import MetricPoint
from app.core.runs.compare import ComparedRun
from app.core.runs.history import RunHistory, RunRecord
from app.core.runs.jobs import JobContext
from app.core.runs.series import MetricStore
from app.screens.dialogs.common import ErrorDialog
from app.screens.dialogs.overlay_picker import OverlayPickerDialog, RunChecklist
from support.fakes import ScriptedJob, event, metric
from support.pilot_waits import type_ahead, wait_for, wait_for_screen
from widgets.metrics_grid import MetricChart, MetricsGrid
from widgets.plot_canvas import PlotCanvas


def four_metric_job(job_id: str, steps: int = 12, offset: float = 0.0) -> ScriptedJob:
    """train and eval mean score, loss and entropy, as the embedded backend emits them."""
    timeline = [("running", [event(1, "rl.train.started")], [])]
    for step in range(steps):
        score = round(0.2 + 0.06 * step + offset, 4)
        points = [metric("train.mean_score", step, score), metric("train.loss", step, round(1 - score, 4)),
                  metric("train.entropy", step, round(1.5 - 0.1 * step, 4))]
        if step % 4 == 3:
            points.append(metric("eval.mean_score", step, round(score - 0.05, 4)))
        timeline.append(("running", [event(step + 2, "rl.train.step", message=f"step {step}")], points))
    timeline.append(("succeeded", [event(steps + 2, "rl.job.completed")], []))
    return ScriptedJob(job_id, timeline)


def chart_text(chart: MetricChart) -> str:
    lines = chart.query_one(".chart-lines" if chart.has_class("-compact") else ".chart-readouts")
    return str(lines.render())


@pytest.mark.parametrize("size, compact", [((160, 45), False), ((80, 24), True)])
async def test_every_metric_is_charted_at_once_with_its_numbers(faulty_backend, size, compact):
    faulty_backend.add_job(four_metric_job("job_a"))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"))
    async with app.run_test(size=size) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended)
        grid = screen.query_one(MetricsGrid)
        await wait_for(pilot, lambda: len(grid.charts) == 3 and all(c.redraws for c in grid.charts))
        charts = {chart.panel.key: chart for chart in grid.charts}
        assert charts["mean_score"].panel.series == ("train.mean_score", "eval.mean_score")
        assert all(chart.display for chart in grid.charts), "every chart at once"
        assert all(chart.has_class("-compact") == compact for chart in grid.charts)
        # Each series' last value is on screen, train and eval of one measure on one chart.
        assert "0.8600" in chart_text(charts["mean_score"]) and "0.8100" in chart_text(charts["mean_score"])
        assert "0.1400" in chart_text(charts["loss"])
        assert "0.4000" in chart_text(charts["entropy"])
        legend = charts["mean_score"].legend()
        assert "train" in legend and "eval" in legend


async def test_the_overlay_key_draws_an_earlier_run_of_the_same_config(faulty_backend):
    old_job = faulty_backend.add_job(four_metric_job("job_old", offset=-0.1))
    old_job.tick = len(old_job.timeline)  # finished before this dashboard opened
    faulty_backend.add_job(four_metric_job("job_new"))
    backend = faulty_backend.url + "/api"
    for job_id in ("job_old", "job_new"):
        RunHistory().record_submission(job_id=job_id, backend=backend, config_path="configs/rl/demo.toml",
                                       payload=None, idempotency_key=None)
    app = make_dashboard_app(faulty_backend, JobContext("job_new", config_path="configs/rl/demo.toml"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended)
        await pilot.press("o")
        await wait_for_screen(pilot, OverlayPickerDialog)
        assert [r.job_id for r in app.screen.earlier] == ["job_old"]
        await pilot.press("space")
        await pilot.click("#overlay-apply")
        grid = screen.query_one(MetricsGrid)
        await wait_for(pilot, lambda: [run.job_id for run in grid.overlays] == ["job_old"])
        old = grid.overlays[0].store.get("train.mean_score")
        assert len(old) == 12 and old.values[-1] == pytest.approx(0.76)
        chart = grid.chart("mean_score")
        await wait_for(pilot, lambda: "[dim]" in str(chart.border_title), what="the overlay in the legend")
        assert [label for _, _, label in chart.overlay_series()] == ["old train", "old eval"]
        # A 46-column chart: the legend fits its border by naming the earlier run once, after its
        # lines' marks (train solid, eval dotted), never by leaving its id or a split out.
        legend = legend_plain(chart)
        assert legend.endswith("━ train  ━ eval  ━┅ old") and len(legend) <= chart.size.width - 4, legend


def overlay_rows(modal: OverlayPickerDialog) -> list[str]:
    runs = modal.query_one("#overlay-runs", RunChecklist)
    return [runs.render_line(y).text for y in range(runs.option_count)]


async def test_the_overlay_dialog_shows_the_status_the_backend_gives_not_a_stale_one(faulty_backend):
    """The history recorded job_old as queued when it was submitted; it has since succeeded.
    The dialog says what the backend says (and the history now holds it)."""
    old_job = faulty_backend.add_job(four_metric_job("job_old"))
    old_job.tick = len(old_job.timeline)
    faulty_backend.add_job(four_metric_job("job_new"))
    backend = faulty_backend.url + "/api"
    for job_id in ("job_old", "job_new"):
        RunHistory().record_submission(job_id=job_id, backend=backend, config_path="configs/rl/demo.toml",
                                       payload=None, idempotency_key=None)
    app = make_dashboard_app(faulty_backend, JobContext("job_new", config_path="configs/rl/demo.toml"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended)
        await pilot.press("o")
        modal = await wait_for_screen(pilot, OverlayPickerDialog)
        await wait_for(pilot, lambda: "succeeded" in overlay_rows(modal)[0], what="the backend's status")
        assert "queued" not in overlay_rows(modal)[0]
    assert RunHistory().get("job_old").final_status == "succeeded"


def test_a_stale_or_missing_status_is_not_shown_as_current():
    records = [run_record("job_a", last="queued"), run_record("job_b", last="running", final="failed"),
               run_record("job_c", last=None)]
    modal = OverlayPickerDialog(records, [])
    assert [modal.status_of(r) for r in records] == ["queued?", "failed", ""]
    modal.answered["job_a"] = "succeeded"
    assert modal.status_of(records[0]) == "succeeded"


class PickerApp(App[None]):
    def __init__(self, records: list[RunRecord], chosen: list[str]) -> None:
        super().__init__()
        self.records, self.chosen = records, chosen

    def on_mount(self) -> None:
        self.push_screen(OverlayPickerDialog(self.records, self.chosen))


async def test_without_colour_the_overlay_dialog_marks_the_chosen_rows(monkeypatch):
    """NO_COLOR: Textual's toggle differs only by colour; the rows say [x] and [ ] instead."""
    monkeypatch.setenv("NO_COLOR", "1")
    app = PickerApp([run_record("job_a", final="succeeded"), run_record("job_b", final="failed")], ["job_b"])
    async with app.run_test(size=(80, 24)) as pilot:
        assert app.no_color
        modal = await wait_for_screen(pilot, OverlayPickerDialog)
        rows = overlay_rows(modal)
        assert rows[0].startswith("[ ] job_a") and rows[1].startswith("[x] job_b"), rows
        await pilot.press("space")  # the highlighted first row
        await wait_for(pilot, lambda: overlay_rows(modal)[0].startswith("[x] job_a"), what="the toggle shown")


def run_record(job_id: str, *, last: str | None = "queued", final: str | None = None) -> RunRecord:
    return RunRecord(job_id=job_id, backend="http://127.0.0.1:1/api", config_path="configs/rl/demo.toml",
                     payload=None, idempotency_key=None, created_at="2026-01-01T12:00:00Z",
                     updated_at="2026-01-01T12:00:00Z", final_status=final, last_status=last, last_metrics={},
                     rerun_of=None)


async def test_an_unknown_job_id_to_overlay_says_so_and_changes_nothing(faulty_backend):
    faulty_backend.add_job(four_metric_job("job_new"))
    app = make_dashboard_app(faulty_backend, JobContext("job_new"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended)
        await pilot.press("o")
        await wait_for_screen(pilot, OverlayPickerDialog)
        type_ahead(app, *"job_missing", "enter")  # as a terminal sends it: no frame per key
        await wait_for_screen(pilot, ErrorDialog)
        assert "job_missing" in app.screen.message
        assert screen.query_one(MetricsGrid).overlays == []


async def test_a_job_id_typed_right_after_o_lands_in_the_overlay_dialog(faulty_backend, monkeypatch):
    """`o job_missing` typed in one go: the dialog opens after the history is read (slowly here,
    as a long history is), and every letter waits for it instead of reaching the dashboard."""
    import app.screens.overlays as overlays

    def slow_earlier_runs(*args):
        time.sleep(0.3)
        return earlier_runs(*args)

    earlier_runs = overlays.earlier_runs
    monkeypatch.setattr(overlays, "earlier_runs", slow_earlier_runs)
    faulty_backend.add_job(four_metric_job("job_new"))
    app = make_dashboard_app(faulty_backend, JobContext("job_new"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended)
        type_ahead(app, "o", *"job_missing")
        modal = await wait_for_screen(pilot, OverlayPickerDialog)
        await wait_for(pilot, lambda: modal.query_one("#overlay-ids", Input).value == "job_missing",
                       what="every letter typed in the dialog")
        type_ahead(app, "escape")
        await wait_for(pilot, lambda: app.screen is screen, what="escape closing the dialog")
        assert screen.query_one(MetricsGrid).overlays == []
        # The whole burst at once, Escape included: the dialog opens and closes, nothing is sent.
        type_ahead(app, "o", *"job_x", "escape", "z")
        await wait_for(pilot, lambda: app.screen is screen and screen.query_one(MetricsGrid).zoomed,
                       what="the dialog closed and z reaching the dashboard")
        assert screen.query_one(MetricsGrid).overlays == []


class GridApp(App[None]):
    def __init__(self, store: MetricStore, data_interval: float) -> None:
        super().__init__()
        self.store = store
        self.data_interval = data_interval

    def compose(self) -> ComposeResult:
        yield MetricsGrid(self.store, data_interval=self.data_interval)


def points(name: str, steps: range) -> list[MetricPoint]:
    return [MetricPoint(name=name, step=step, value=step / 10) for step in steps]


async def test_new_data_waits_for_its_redraw_and_the_end_draws_at_once():
    """Data alone redraws at most every data_interval; the job's end (flush) draws now."""
    store = MetricStore()
    app = GridApp(store, data_interval=3600)
    async with app.run_test(size=(100, 30)) as pilot:
        grid = app.query_one(MetricsGrid)
        store.add(points("train.mean_score", range(0, 3)))
        grid.data_changed()
        await wait_for(pilot, lambda: grid.charts and grid.charts[0].redraws >= 1)
        chart = grid.charts[0]
        await pilot.pause()  # a late layout (a loaded machine) may redraw it once more: not data's
        drawn = chart.redraws
        store.add(points("train.mean_score", range(3, 6)))
        grid.data_changed()
        await pilot.pause()
        assert chart.redraws == drawn, "throttled: the redraw is not yet due"
        grid.flush()
        assert chart.redraws == drawn + 1
        assert "step 5" in chart_text(chart)


async def test_overlays_are_drawn_in_their_own_colour_behind_the_live_run():
    store = MetricStore()
    store.add(points("train.mean_score", range(0, 5)))
    earlier = ComparedRun("job_earlier")
    earlier.store.add(points("train.mean_score", range(0, 9)))
    app = GridApp(store, data_interval=0)
    async with app.run_test(size=(100, 30)) as pilot:
        grid = app.query_one(MetricsGrid)
        grid.set_overlays([earlier])
        await wait_for(pilot, lambda: grid.charts and grid.charts[0].shows_current_view)
        chart = grid.charts[0]
        assert chart.overlay_series()[0][2] == "earlier train"
        assert "earlier train" in chart.legend()
        assert "o overlays: 1" in str(app.query_one("#grid-status").render())


async def test_a_held_back_redraw_runs_when_due_without_being_asked_again():
    """No polling timer: the redraw that new data was not yet due for is scheduled."""
    store = MetricStore()
    app = GridApp(store, data_interval=0.3)
    async with app.run_test(size=(100, 30)) as pilot:
        grid = app.query_one(MetricsGrid)
        store.add(points("train.mean_score", range(0, 3)))
        grid.data_changed()
        await wait_for(pilot, lambda: grid.charts and grid.charts[0].redraws == 1)
        store.add(points("train.mean_score", range(3, 6)))
        grid.data_changed()  # the only call: what follows is the grid's own timer
        await wait_for(pilot, lambda: grid.charts[0].redraws == 2, what="the due redraw")
        assert "step 5" in chart_text(grid.charts[0])


async def test_a_chart_paints_what_textual_plotext_would_for_the_same_figure():
    """The grid's own figure (train and eval, smoothing's grey line, an overlay): the canvas
    shows the characters and colours the ANSI round trip showed, and a new point redraws it."""
    store = MetricStore()
    store.add(points("train.mean_score", range(0, 900)) + points("eval.mean_score", range(0, 900, 50)))
    earlier = ComparedRun("job_earlier")
    earlier.store.add(points("train.mean_score", range(0, 700)))
    app = GridApp(store, data_interval=0)
    async with app.run_test(size=(120, 40)) as pilot:
        grid = app.query_one(MetricsGrid)
        grid.set_overlays([earlier])
        grid.smoothing = "ema"
        await wait_for(pilot, lambda: grid.charts and grid.charts[0].shows_current_view)
        chart = grid.charts[0]
        plot = chart.query_one(PlotCanvas)
        await pilot.pause()
        shown = cells(plot.frame_strips())
        assert shown == stock_cells(plot)
        assert "178" in "".join(char for char, _ in shown[-1]), "integer steps label the x axis"
        builds = plot.builds
        store.add(points("train.mean_score", range(900, 901)))
        grid.data_changed()
        await wait_for(pilot, lambda: plot.builds > builds, what="the new point's frame")
        assert cells(plot.frame_strips()) == stock_cells(plot)


BLOCKS = "▁▂▃▄▅▆▇█"


def spark_of(chart: MetricChart, label: str) -> str:
    """The sparkline of the text row labelled ``label``: from its first block to its numbers."""
    row = next(line for line in chart_text(chart).splitlines()
               if re.search(rf"(?<![A-Za-z0-9…]){re.escape(label)} ", line))  # the live run's row first
    start = min(row.index(block) for block in BLOCKS if block in row)
    return row[start:start + re.search(r" -?\d+\.\d+  (best|min) ", row[start:]).start()]


def braille_columns(plot: PlotCanvas) -> list[int]:
    return [x for row in cells(plot.frame_strips()) for x, (char, _) in enumerate(row) if "⠁" <= char <= "⣿"]


async def test_a_run_covers_only_the_steps_it_has_in_text_rows():
    """A run cancelled at step 8 of 16 ends mid-row; a live run at step 4 of its planned 16
    covers a quarter of it: nothing repeats its last value to the right edge."""
    store = MetricStore()
    store.add(points("train.mean_score", range(1, 5)))
    full, short = ComparedRun("job_full"), ComparedRun("job_short")
    full.store.add(points("train.mean_score", range(1, 17)))
    short.store.add(points("train.mean_score", range(1, 9)))
    app = GridApp(store, data_interval=0)
    async with app.run_test(size=(80, 10)) as pilot:
        grid = app.query_one(MetricsGrid)
        grid.set_overlays([full, short])
        chart = grid.charts[0]
        await wait_for(pilot, lambda: chart.has_class("-compact") and chart.shows_current_view
                       and "short" in chart_text(chart))
        whole, half, live = spark_of(chart, "full train"), spark_of(chart, "short train"), spark_of(chart, "train")
        assert len(whole) == len(half) == len(live) and " " not in whole
        assert len(half.rstrip()) <= len(half) // 2 + 1 and half.endswith(" " * (len(half) // 2 - 1))
        assert len(live.rstrip()) <= len(live) // 4 + 1
        grid.set_overlays([])
        grid.set_planned_steps(16)
        await wait_for(pilot, lambda: "short" not in chart_text(chart))
        live = spark_of(chart, "train")
        assert len(live.rstrip()) <= len(live) // 4 + 2, "the planned steps set the row's end"


async def test_a_live_run_fills_only_its_part_of_the_planned_steps_in_a_plot():
    store = MetricStore()
    store.add(points("train.mean_score", range(1, 5)))
    app = GridApp(store, data_interval=0)
    async with app.run_test(size=(100, 30)) as pilot:
        grid = app.query_one(MetricsGrid)
        grid.set_planned_steps(16)
        grid.data_changed()
        await wait_for(pilot, lambda: grid.charts and grid.charts[0].shows_current_view)
        chart = grid.charts[0]
        plot = chart.query_one(PlotCanvas)
        await pilot.pause()
        dots = braille_columns(plot)
        assert dots and max(dots) < plot.size.width * 0.4, "4 of 16 steps: the line stops early"
        assert "16" in "".join(char for char, _ in cells(plot.frame_strips())[-1]), "the axis runs to the plan"


def legend_plain(chart: MetricChart) -> str:
    return Content.from_markup(str(chart.border_title)).plain


def legend_glyphs(legend: str) -> list[str]:
    return re.findall(r"\[[^\]/]+\](.)\[/\]", legend)


async def test_without_colour_every_line_has_its_own_glyph(monkeypatch):
    """NO_COLOR: Textual paints in greys, so train, eval and the overlays differ by glyph,
    in the legend and in the plot."""
    monkeypatch.setenv("NO_COLOR", "1")
    store = MetricStore()
    store.add(points("train.mean_score", range(0, 20)) + points("eval.mean_score", range(0, 20, 4)))
    earlier = ComparedRun("job_earlier")
    shown = points("train.mean_score", range(0, 20)) + points("eval.mean_score", range(0, 20, 4))
    earlier.store.add([MetricPoint(name=point.name, step=point.step, value=point.value + 1) for point in shown])
    app = GridApp(store, data_interval=0)
    async with app.run_test(size=(100, 30)) as pilot:
        assert app.no_color
        grid = app.query_one(MetricsGrid)
        grid.set_overlays([earlier])
        await wait_for(pilot, lambda: grid.charts and grid.charts[0].shows_current_view)
        chart = grid.charts[0]
        glyphs = legend_glyphs(chart.legend())
        assert len(glyphs) == 4 and len(set(glyphs)) == 4, glyphs
        await pilot.pause()
        drawn = {char for row in cells(chart.query_one(PlotCanvas).frame_strips()) for char, _ in row}
        assert {"•", "x", "+"} <= drawn and any("⠁" <= char <= "⣿" for char in drawn)


async def test_without_colour_a_series_keeps_its_glyph_on_every_chart(monkeypatch):
    """NO_COLOR, two runs: the mean-score chart has train and eval, the entropy chart only
    train. The live eval's mark must not stand for the other run's train on the entropy chart:
    a mark means one series (run and split) across the whole view."""
    monkeypatch.setenv("NO_COLOR", "1")
    store = MetricStore()
    store.add(points("train.mean_score", range(0, 20)) + points("eval.mean_score", range(0, 20, 4))
              + points("train.entropy", range(0, 20)))
    earlier = ComparedRun("job_earlier")
    earlier.store.add(points("train.mean_score", range(0, 20)) + points("eval.mean_score", range(0, 20, 4))
                      + points("train.entropy", range(0, 20)))
    app = GridApp(store, data_interval=0)
    async with app.run_test(size=(120, 40)) as pilot:
        grid = app.query_one(MetricsGrid)
        grid.set_overlays([earlier])
        await wait_for(pilot, lambda: len(grid.charts) == 2 and all(c.shows_current_view for c in grid.charts))
        marks: dict[str, set[str]] = {}
        for chart in grid.charts:
            for line in chart.lines():
                marks.setdefault(line.label, set()).add(line.glyph)
        assert all(len(glyphs) == 1 for glyphs in marks.values()), marks
        assert len({next(iter(g)) for g in marks.values()}) == len(marks) == 4, marks


@pytest.mark.parametrize("size", [(160, 45), (100, 30), (80, 24), (60, 30)])
async def test_a_legend_fits_its_border_cutting_ids_never_splits(size):
    """Two earlier runs with long ids, train and eval each: the legend is shortened to fit the
    chart's top border, so the border never cuts it (`c9d75d……`, `4807d5… …`): an entry per
    line, or each earlier run named once after its lines' marks (`━┅ c9d75d…`), its id whole
    down to 80 columns (a rerun of a rerun at 80x24 lost both ids: `━ train ┅ eval ━ train
    ┅ eval`); every overlay's readouts row keeps last, best and step."""
    store = MetricStore()
    store.add(points("train.mean_score", range(0, 20)) + points("eval.mean_score", range(0, 20, 4))
              + points("train.loss", range(0, 20)))
    runs = [ComparedRun(job_id) for job_id in ("job_c9d75d0a1b2c3d4e5f60718", "job_4807d5f9e8d7c6b5a4f30291")]
    for run in runs:
        run.store.add(points("train.mean_score", range(0, 20)) + points("eval.mean_score", range(0, 20, 4))
                      + points("train.loss", range(0, 20)))
    app = GridApp(store, data_interval=0)
    async with app.run_test(size=size) as pilot:
        grid = app.query_one(MetricsGrid)
        grid.set_overlays(runs)
        await wait_for(pilot, lambda: len(grid.charts) == 2 and all(c.shows_current_view for c in grid.charts))
        await pilot.pause()
        for chart in grid.charts:
            legend = legend_plain(chart)
            assert len(legend) <= chart.size.width - 4, (legend, chart.size)
            # An id's "…" is followed by its split, or (an earlier run named once) by the next entry.
            assert "……" not in legend and not re.search(r"… (?![ ━┅+]|train|eval|step)", legend), legend
            entries = re.split(r"\s+(?=[━┅]|\+\d|step)", legend)
            splits = [part for part in ("train", "eval") if chart.panel.key == "mean_score" or part == "train"]
            named = sum(legend.count(split) for split in splits)
            by_run = [e for e in entries if e.split(" ", 1)[0] in ("━┅", "━") and e.endswith("…")]
            if not by_run and size[0] == 160:  # room for an entry per line, each run's id in full
                assert named == 3 * len(splits), legend
            elif by_run:  # each earlier run once, after its lines' marks, the live run's lines named
                assert [e.split(" ", 1)[0] for e in by_run] == ["━" + "┅" * (len(splits) - 1)] * 2, legend
                assert named == len(splits), legend
            elif named < 3 * len(splits):  # the lines not named are counted, never cut mid-word
                assert legend.endswith(f"+{3 * len(splits) - named}"), legend
            if size in ((160, 45), (80, 24)):  # a chart as wide as the grid: each earlier run's id stays whole
                assert "c9d75d…" in legend and "4807d5…" in legend, legend
        chart = grid.chart("mean_score")
        if chart.has_class("-compact"):  # a text row per line: its mark, its run and split, last and best
            rows = str(chart.query_one(".chart-lines").render()).splitlines()
            assert [row.split()[1] for row in rows[2:]] == ["c9d75d…", "c9d75d…", "4807d5…", "4807d5…"], rows
            assert all("best" in row for row in rows), rows
            return
        readouts = str(chart.query_one(".chart-readouts").render())
        overlay_rows = [row for row in readouts.splitlines() if "c9d75d" in row or "4807d5" in row]
        assert len(overlay_rows) == 4 and all("last" in row and "step 19" in row for row in overlay_rows[::2]), \
            readouts


async def test_an_earlier_runs_eval_is_drawn_and_named_by_its_run():
    store = MetricStore()
    store.add(points("train.mean_score", range(0, 9)) + points("eval.mean_score", range(0, 9, 4)))
    earlier = ComparedRun("job_f035a1b2c3d4e5f6a7b8c9d0")
    earlier.store.add(points("train.mean_score", range(0, 9)) + points("eval.mean_score", range(0, 9, 4)))
    app = GridApp(store, data_interval=0)
    async with app.run_test(size=(100, 30)) as pilot:
        grid = app.query_one(MetricsGrid)
        grid.set_overlays([earlier])
        await wait_for(pilot, lambda: grid.charts and grid.charts[0].shows_current_view)
        chart = grid.charts[0]
        assert [label for _, _, label in chart.overlay_series()] == ["f035a1… train", "f035a1… eval"]
        legend = chart.legend()
        assert "f035a1… train" in legend and "f035a1… eval" in legend
        # Its eval is dotted: not the same mark as its train in its run's grey.
        assert len(set(legend_glyphs(legend)[2:])) == 2


async def test_a_rerun_draws_its_overlays_before_its_own_first_metrics():
    store = MetricStore()
    earlier = ComparedRun("job_earlier")
    earlier.store.add(points("train.mean_score", range(0, 9)))
    app = GridApp(store, data_interval=0)
    async with app.run_test(size=(100, 30)) as pilot:
        grid = app.query_one(MetricsGrid)
        grid.set_overlays([earlier])
        await wait_for(pilot, lambda: grid.charts and grid.charts[0].shows_current_view)
        chart = grid.charts[0]
        await pilot.pause()
        assert "waiting" not in chart_text(chart) and "earlier train" in chart_text(chart)
        assert braille_columns(chart.query_one(PlotCanvas)), "the earlier run is drawn"


async def test_readouts_say_min_for_a_loss_and_steps_per_minute_for_the_rate():
    store = MetricStore()
    store.add([MetricPoint(name=name, step=step, value=value(step), created_at=f"2026-01-01T12:{step:02d}:00Z")
               for step in range(0, 6)
               for name, value in (("train.mean_score", lambda s: s / 10), ("train.loss", lambda s: 1 - s / 10))])
    app = GridApp(store, data_interval=0)
    async with app.run_test(size=(200, 40)) as pilot:
        grid = app.query_one(MetricsGrid)
        grid.data_changed()
        await wait_for(pilot, lambda: len(grid.charts) == 2 and all(c.redraws for c in grid.charts))
        await pilot.pause()
        score, loss = chart_text(grid.chart("mean_score")), chart_text(grid.chart("loss"))
        assert "best 0.5000" in score and "1.0 steps/min" in score
        assert "best" not in loss and "min 0.5000" in loss and "max 1.0000" in loss and "steps/min" in loss


async def test_a_tiny_loss_is_labelled_and_read_in_scientific_notation():
    """An lm job's loss near -2e-08: plotext would label its axis "-0.00000002000" and 4
    decimals would read "-0.0000" (issue 37)."""
    store = MetricStore()
    store.add([MetricPoint(name="train.loss", step=step, value=-2.24e-8 + step * 1e-10) for step in range(6)])
    app = GridApp(store, data_interval=0)
    async with app.run_test(size=(100, 30)) as pilot:
        grid = app.query_one(MetricsGrid)
        grid.data_changed()
        await wait_for(pilot, lambda: grid.charts and grid.charts[0].shows_current_view)
        chart = grid.charts[0]
        plot = "\n".join("".join(char for char, _ in row) for row in cells(chart.query_one(PlotCanvas).frame_strips()))
        assert "-2.24e-08" in plot and "-2.19e-08" in plot, plot
        assert "0.0000000" not in plot
        assert "-2.19e-08" in chart_text(chart) and "-0.0000" not in chart_text(chart)


NINE_MEASURES = ["mean_score", "loss", "entropy", "kl", "grad_norm", "allreduce_s", "generation_tokens_per_s", "lr",
                 "clip"]


def nine_metric_job(job_id: str) -> ScriptedJob:
    """Nine measures, as an lm job with KL and data-parallel timings emits them."""
    timeline = [("running", [event(1, "rl.train.started")], [])]
    for step in range(8):
        points = [metric(f"train.{name}", step, 0.1 * step + i) for i, name in enumerate(NINE_MEASURES)]
        timeline.append(("running", [event(step + 2, "rl.train.step")], points))
    timeline.append(("succeeded", [event(20, "rl.job.completed")], []))
    return ScriptedJob(job_id, timeline)


async def test_nine_charts_and_the_final_panel_at_160x45_plot_what_fits_and_leave_no_rows_empty(faulty_backend):
    """Issue 37: with 9 charts (or once the final panel showed) every chart fell back to a
    text row and about 14 rows of the grid stayed empty. The first charts are plots, the rest
    text rows under them, and together they fill the grid."""
    faulty_backend.add_job(nine_metric_job("job_a"))
    app = make_dashboard_app(faulty_backend, JobContext("job_a"))
    async with app.run_test(size=(160, 45)) as pilot:
        screen = dashboard(app)
        await wait_for(pilot, lambda: screen.ended)
        grid = screen.query_one(MetricsGrid)
        await wait_for(pilot, lambda: len(grid.charts) == 9 and all(c.redraws for c in grid.charts))
        await pilot.pause()
        plotted = [chart for chart in grid.charts if not chart.has_class("-compact")]
        assert len(plotted) >= 4 and all(chart.size.height >= 9 for chart in plotted)
        cells = grid.query_one("#grid-cells")
        bottom = max(chart.region.bottom for chart in grid.charts)
        assert cells.region.bottom - bottom <= 1, (cells.region, bottom)


@pytest.mark.parametrize(("lines", "columns", "height", "plots"), [
    ([1, 1, 1], 2, 30, 3),  # all fit: 2 rows of 15
    ([1] * 9, 2, 30, 4),  # 5 text rows of 2 leave 20: 2 rows of plots of 10
    ([2] * 9, 2, 40, 6),  # plots need 10 rows, text rows 3 each: 3 of them leave 31 for 3 rows
    ([1] * 9, 1, 12, 0),  # not one plot fits: all text rows
])
def test_plotted_count(lines, columns, height, plots):
    from widgets.metrics_grid import plotted_count

    assert plotted_count(lines, columns, height) == plots


@pytest.mark.parametrize("value", [-1.13, 640.0, 0.0])
async def test_a_single_value_sits_between_labels_that_read_downwards(value):
    """One point (a first step) or a constant (a clip ratio of 0): plotext's own range was upside
    down for a negative value (-1.70 above -0.57) and its labels fell between rows (640 drawn
    on the row labelled 746.7); the value is now the middle label of a range of its own."""
    from support.screen_text import screen_lines

    store = MetricStore()
    store.add([MetricPoint(name="train.loss", step=step, value=value) for step in range(3)])
    app = GridApp(store, data_interval=0)
    async with app.run_test(size=(100, 30)) as pilot:
        grid = app.query_one(MetricsGrid)
        grid.data_changed()
        await wait_for(pilot, lambda: grid.charts and grid.charts[0].redraws >= 1)
        await pilot.pause()
        labels = [float(m.group(1)) for line in screen_lines(app)
                  if (m := re.search(r"(-?\d+(?:\.\d+)?)\s*┤", line))]
    assert len(labels) == 3, labels
    assert labels == sorted(labels, reverse=True)  # the top label is the highest
    assert labels[1] == pytest.approx(value)
