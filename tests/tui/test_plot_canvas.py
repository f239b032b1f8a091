"""PlotCanvas: the chart painted from plotext's matrix must look exactly as textual-plotext's
ANSI round trip made it look (characters, colours, offsets), and reuse only what did not
change (widgets/plot_canvas.py says what)."""

from __future__ import annotations

import random
from itertools import pairwise

import pytest
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.visual import Visual, visualize
from textual_plotext import PlotextPlot

from support.pilot_waits import wait_for
from widgets.metric_chart import OVERLAY_COLORS, integer_ticks, plot_line
from widgets.plot_canvas import PlotCanvas


class CanvasApp(App[None]):
    CSS = "PlotCanvas { width: 1fr; height: 1fr; }"

    def compose(self) -> ComposeResult:
        yield PlotCanvas()


def cells(strips) -> list[list[tuple[str, object]]]:
    """Each row as (character, style) per cell: what the screen shows, offsets included."""
    return [[(char, segment.style) for segment in strip for char in segment.text] for strip in strips]


def stock_cells(plot: PlotCanvas) -> list[list[tuple[str, object]]]:
    """What textual-plotext's own path paints: plotext's ANSI string, parsed by Rich, laid
    out by Textual."""
    width, height = plot.size
    text = PlotextPlot.render(plot)
    return cells(Visual.to_strips(plot, visualize(plot, text), width, height, plot.visual_style))


def chart_figure(plot: PlotCanvas, *, count: int = 400, last: int = 400, overlay: bool = True, title: str | None = None,
                 seed: int = 3) -> None:
    """A figure like the metrics grid's: a banded live line, a thin one, a dimmed overlay."""
    rng = random.Random(seed)
    plt = plot.plt
    plt.clear_figure()
    xs = [last * i / (count - 1) for i in range(count)]
    ys = [0.2 + 0.6 * i / count + rng.gauss(0, 0.05) for i in range(count)]
    if overlay:
        plot_line(plt, xs, [y - 0.1 for y in ys], True, color=OVERLAY_COLORS[0])
    plot_line(plt, xs, ys, True, color="cyan")
    plot_line(plt, xs[::10], ys[::10], False, color="orange")
    plt.xticks([*integer_ticks(xs[0], xs[-1])])
    if title:
        plt.title(title)
    plot.figure_changed()


async def painted(pilot, plot: PlotCanvas) -> list[list[tuple[str, object]]]:
    """The rows the canvas gave Textual's last paint (before Textual's own line filters,
    which treat both paths alike), checked against the screen's characters."""
    await pilot.pause()
    width, height = plot.size
    shown = cells(plot.frame_strips())
    on_screen = cells(plot.render_lines(Region(0, 0, width, height)))
    assert [[char for char, _ in row] for row in on_screen] == [[char for char, _ in row] for row in shown]
    return shown


@pytest.mark.parametrize("size", [(100, 30), (60, 16)])
async def test_the_strips_show_what_the_ansi_round_trip_showed(size):
    app = CanvasApp()
    async with app.run_test(size=size) as pilot:
        plot = app.query_one(PlotCanvas)
        await wait_for(pilot, lambda: plot.size.width > 0)
        chart_figure(plot)
        shown = await painted(pilot, plot)
        assert len(shown) == size[1]
        assert shown == stock_cells(plot)
        # Braille from the lines, the overlay's own colour, the tick labels: a real chart.
        text = "".join(char for row in shown for char, _ in row)
        assert any("\u2800" <= char <= "\u28ff" for char in text)
        assert "┤" in text and "400" in text
        colours = {style.color.triplet for row in shown for _, style in row if style.color and style.color.triplet}
        assert (120, 120, 150) in colours


async def test_a_title_alone_and_another_theme_look_the_same_too():
    app = CanvasApp()
    async with app.run_test(size=(80, 20)) as pilot:
        plot = app.query_one(PlotCanvas)
        await wait_for(pilot, lambda: plot.size.width > 0)
        plot.plt.clear_figure()
        plot.plt.title("waiting for metrics…")
        plot.figure_changed()
        shown = await painted(pilot, plot)
        assert shown == stock_cells(plot)
        assert "waiting for metrics…" in "".join(char for row in shown for char, _ in row)
        chart_figure(plot)
        dark = await painted(pilot, plot)
        app.theme = "textual-light"
        await pilot.pause()
        light = await painted(pilot, plot)
        assert light == stock_cells(plot)
        assert light != dark, "the canvas follows the app's theme"


async def test_a_repaint_of_the_same_figure_reuses_the_frame():
    app = CanvasApp()
    async with app.run_test(size=(100, 30)) as pilot:
        plot = app.query_one(PlotCanvas)
        await wait_for(pilot, lambda: plot.size.width > 0)
        chart_figure(plot)
        first = await painted(pilot, plot)
        builds = plot.builds
        plot.refresh()  # a repaint that is not a new figure
        assert await painted(pilot, plot) == first
        assert plot.builds == builds
        chart_figure(plot, seed=4)  # new data: built again
        assert await painted(pilot, plot) != first
        assert plot.builds == builds + 1


async def test_unchanged_rows_are_reused_and_the_axis_is_rebuilt_when_the_range_changes():
    app = CanvasApp()
    async with app.run_test(size=(100, 30)) as pilot:
        plot = app.query_one(PlotCanvas)
        await wait_for(pilot, lambda: plot.size.width > 0)
        chart_figure(plot, overlay=False, seed=1)
        await painted(pilot, plot)
        before = list(plot.frame_strips())
        axis_row = len(before) - 1  # the x tick labels
        # Same range, other data in between: the tick labels' row is the very same strip.
        built = plot.rows_built
        plt = plot.plt
        plt.clear_figure()
        plt.plot([0, 150, 250, 400], [0.1, 0.7, 0.3, 0.9], marker="braille", color="cyan")
        plt.xticks([*integer_ticks(0, 400)])
        plot.figure_changed()
        same_range = await painted(pilot, plot)
        assert same_range == stock_cells(plot)
        assert plot.frame_strips()[axis_row] is before[axis_row]
        assert plot.rows_built - built < len(before), "only rows that changed are made anew"
        # A longer run: new ticks, a new axis row, still what plotext drew.
        chart_figure(plot, overlay=False, seed=1, last=900)
        longer = await painted(pilot, plot)
        assert plot.frame_strips()[axis_row] is not before[axis_row]
        assert longer == stock_cells(plot)
        assert "900" in "".join(char for char, _ in longer[axis_row])


async def test_a_new_size_builds_the_frame_again():
    app = CanvasApp()
    async with app.run_test(size=(100, 30)) as pilot:
        plot = app.query_one(PlotCanvas)
        await wait_for(pilot, lambda: plot.size.width > 0)
        chart_figure(plot)
        await painted(pilot, plot)
        builds = plot.builds
        await pilot.resize_terminal(70, 20)
        await wait_for(pilot, lambda: plot.size.width == 70)
        shown = await painted(pilot, plot)
        assert plot.builds > builds
        assert len(shown) == 20 and all(sum(1 for _ in row) == 70 for row in shown)
        assert shown == stock_cells(plot)


@pytest.mark.parametrize(("first", "last"), [(0, 16), (1, 16), (1, 30), (0, 400), (3, 4)])
def test_the_step_axis_is_labelled_at_its_first_and_last_step(first, last):
    """The walk: a 16-step run's mean score axis read 0…15 (its last label 15, the run's last step
    16), and a 30-step run's ended at 25. The first and the last step are labelled, whole steps
    between them, none crowding the last."""
    ticks = integer_ticks(first, last)
    assert ticks[0] == first and ticks[-1] == last
    assert ticks == sorted(set(ticks)) and len(ticks) <= 7
    gaps = [b - a for a, b in pairwise(ticks)]
    assert min(gaps) * 2 >= max(gaps[:-1] or gaps)  # the last gap at least half the others
