"""What widgets/compat/plotext_compat.py takes from plotext is still there and behaves as the
charts rely on. A failure names the plotext version the module was written against and the one
installed: update the module (and its callers) to the installed plotext's names."""

from __future__ import annotations

from importlib.metadata import version

from textual_plotext import Plot

from widgets.compat import plotext_compat
from widgets.compat.plotext_compat import (
    PlotextMatrix,
    colors_to_ansi,
    fill_figure_matrix,
    lay_out_figure,
    line_helpers,
    line_helpers_replaced,
    plotext_get_lines,
    plotext_hd_group,
    set_figure_size,
    transpose,
)


def changed(what: str) -> str:
    return (f"{what}: widgets/compat/plotext_compat.py was written against {plotext_compat.WRITTEN_FOR}, "
            f"plotext {version('plotext')} is installed")


def filled_figure(width: int = 40, height: int = 12) -> Plot:
    figure = Plot()
    figure.plot([1, 2, 3, 4], [1, 4, 9, 16], marker="braille")
    figure.plotsize(width, height)
    set_figure_size(figure, width, height)
    figure.theme("pro")
    lay_out_figure(figure)
    fill_figure_matrix(figure)
    return figure


def test_a_figure_fills_its_matrix_without_building_its_text():
    matrix = filled_figure().monitor.matrix
    assert isinstance(matrix, PlotextMatrix), changed("plotext._matrix.matrix_class (monitor.matrix)")
    assert (matrix.rows, matrix.cols) == (12, 40), changed("_set_size, _set_sizes, _build_matrix")
    for layer in ("marker", "fullground", "style", "background"):
        rows = getattr(matrix, layer)
        assert len(rows) == 12 and all(len(row) == 40 for row in rows), changed(f"the matrix's {layer} rows")
    assert any(cell.strip() for row in matrix.marker for cell in row), changed("_build_matrix drew nothing")
    for name in ("set_matrices", "Rows_canvas", "Cols_canvas", "canvas_color", "axes_color"):
        assert hasattr(matrix, name), changed(f"matrix_class.{name} (widgets/plot_canvas.BlankMatrix)")


def test_plotext_draws_its_lines_with_the_helpers_in_place():
    calls: list[str] = []

    def get_lines(*args):  # type: ignore[no-untyped-def]
        calls.append("get_lines")
        return plotext_get_lines(*args)

    def hd_group(*args):  # type: ignore[no-untyped-def]
        calls.append("hd_group")
        return plotext_hd_group(*args)

    with line_helpers_replaced(get_lines, hd_group):
        assert line_helpers() == (get_lines, hd_group)
        filled_figure()
    assert "get_lines" in calls and "hd_group" in calls, changed("plotext._utility.get_lines / hd_group")
    assert line_helpers() == (plotext_get_lines, plotext_hd_group)


def test_the_helpers_answer_as_the_charts_use_them():
    assert transpose([[1, 2], [3, 4]], 2) == [[1, 3], [2, 4]], changed("plotext._utility.transpose")
    assert "\x1b[" in colors_to_ansi((255, 0, 0), "default", (0, 0, 0)), changed("plotext._utility.colors_to_ansi")
