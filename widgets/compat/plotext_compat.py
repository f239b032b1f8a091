"""plotext's private names the charts rely on, in one place. Written against plotext 5.3.2.

plotext's public API ends at ``build`` (the figure as one ANSI string); the canvas
(widgets/plot_canvas.py) stops once the figure's matrix is filled and reads the matrix itself,
and the speedups (widgets/plotext_speedups.py) replace two of plotext's helpers while it does.
tests/compat/test_plotext_names.py fails, naming the version this was written against, when plotext
changes or removes one of them. pyproject pins plotext below 6.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import plotext._utility as plotext_utility
from plotext._matrix import matrix_class

WRITTEN_FOR = "plotext 5.3.2"

# The figure's character matrix (``monitor.matrix``): its rows, their markers and colours.
PlotextMatrix = matrix_class

# plotext's own helpers, as they are before anything replaces them.
plotext_get_lines: Callable[..., list[list[Any]]] = plotext_utility.get_lines
plotext_hd_group: Callable[..., Any] = plotext_utility.hd_group
transpose: Callable[..., list[Any]] = plotext_utility.transpose
colors_to_ansi: Callable[..., str] = plotext_utility.colors_to_ansi


def set_figure_size(figure: Any, width: int, height: int) -> None:
    """Size `figure` to `width` x `height` cells (``_set_size``)."""
    figure._set_size(width, height)


def lay_out_figure(figure: Any) -> None:
    """Place the subplots, axes and labels of `figure` for its size (``_set_sizes``)."""
    figure._set_sizes()


def fill_figure_matrix(figure: Any) -> None:
    """``build`` without its last step: the figure's matrix filled, no ANSI string made
    (``_build_matrix``)."""
    figure._build_matrix()


def line_helpers() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The ``get_lines`` and ``hd_group`` plotext draws lines with now."""
    return plotext_utility.get_lines, plotext_utility.hd_group


@contextmanager
def line_helpers_replaced(get_lines: Callable[..., Any], hd_group: Callable[..., Any]) -> Iterator[None]:
    """plotext draws lines with `get_lines` and `hd_group` while the block runs, then with its
    own again (plotext looks both up in ``plotext._utility`` at each call)."""
    plotext_utility.get_lines, plotext_utility.hd_group = get_lines, hd_group
    try:
        yield
    finally:
        plotext_utility.get_lines, plotext_utility.hd_group = plotext_get_lines, plotext_hd_group
