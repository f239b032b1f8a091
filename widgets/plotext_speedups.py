"""Exact, faster stand-ins for the two plotext helpers a chart frame spends most of its time in.

Profiled on the metrics grid's chart (benchmarks/bench_chart.py): once the ANSI round trip is
gone, plotext filling its matrix is most of a frame, and two thirds of that is rasterizing
the lines into braille dots: ``get_lines`` (every dot of every segment between two points)
and ``hd_group`` (the dots grouped into braille cells, a small list of lists per dot). These
compute the same lists, in the same order, with the same float arithmetic, from plain loops
and a bit mask instead; any input they were not written for (non-integer coordinates, mixed
marker sizes, nothing to draw) goes to plotext's own function. ``faster_plotext`` swaps them
in only while a ``PlotCanvas`` fills its matrix; tests/tui/test_plotext_speedups.py checks
them against plotext's on random inputs and the canvas against textual-plotext's own path.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

from widgets.compat.plotext_compat import line_helpers_replaced, plotext_get_lines, plotext_hd_group, transpose


def _all_ints(values: list[Any]) -> bool:
    return all(type(value) is int for value in values)


def get_lines(x: list[Any], y: list[Any], *other: list[Any]) -> list[list[Any]]:
    """plotext's ``get_lines``: the dots from each point to the next (its ``get_line``:
    ``int`` of ``linspace`` between them, the last dot left to the next segment), then the
    last point; ``other`` (markers, colours, styles) repeated alongside."""
    if not x or len(x) != len(y) or not _all_ints(x) or not _all_ints(y):
        return plotext_get_lines(x, y, *other)
    per_point = transpose(other, len(other))
    xs: list[int] = []
    ys: list[int] = []
    extra: list[Any] = []
    for n in range(len(x) - 1):
        x0, x1, y0, y1 = x[n], x[n + 1], y[n], y[n + 1]
        steps = max(abs(x1 - x0), abs(y1 - y0))  # plotext's linspace length, less the last dot
        if not steps:
            continue
        # linspace: lower + i * slope, slope = (upper - lower) / (length - 1); then int().
        x_slope, y_slope = (x1 - x0) / steps, (y1 - y0) / steps
        xs += [int(x0 + i * x_slope) for i in range(steps)]
        ys += [int(y0 + i * y_slope) for i in range(steps)]
        extra += [per_point[n]] * steps
    xs.append(x[-1])
    ys.append(y[-1])
    extra.append(per_point[-1])
    return [xs, ys, *transpose(extra, len(other))]


@cache
def _cell_patterns(columns: int, rows: int) -> tuple[tuple[int, ...], ...]:
    """Every dot pattern of a cell as plotext spells it: the rows top first (plotext's
    ``el[::-1]``), flattened, 1 for a dot; indexed by a bit mask of the same order."""
    size = columns * rows
    return tuple(tuple((mask >> bit) & 1 for bit in range(size)) for mask in range(1 << size))


def hd_group(x: list[Any], y: list[Any], xf: list[int], yf: list[int]) -> tuple[list, list, list]:
    """plotext's ``hd_group``: the dots grouped by the cell they fall in (cells in order of
    their first dot), each with its pattern of dots."""
    if not x or len(x) != len(y) or not _all_ints(x) or not _all_ints(y):
        return plotext_hd_group(x, y, xf, yf)
    columns, rows = xf[-1], yf[-1]
    if any(factor != columns for factor in xf) or any(factor != rows for factor in yf):
        return plotext_hd_group(x, y, xf, yf)
    masks: dict[tuple[int, int], int] = {}
    for xi, yi in zip(x, y, strict=True):
        key = (xi // columns, yi // rows)
        masks[key] = masks.get(key, 0) | 1 << ((rows - 1 - yi % rows) * columns + xi % columns)
    patterns = _cell_patterns(columns, rows)
    return [key[0] for key in masks], [key[1] for key in masks], [patterns[mask] for mask in masks.values()]


@contextmanager
def faster_plotext() -> Iterator[None]:
    """plotext's ``get_lines`` and ``hd_group`` replaced by these while the block runs (one
    thread draws: the UI's)."""
    with line_helpers_replaced(get_lines, hd_group):
        yield
