"""The stand-ins for plotext's get_lines and hd_group (widgets/plotext_speedups.py) return
exactly what plotext's own functions return, for any input: the chart must not change."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support.tiers import examples
from widgets.compat.plotext_compat import line_helpers, plotext_get_lines, plotext_hd_group
from widgets.plotext_speedups import faster_plotext, get_lines, hd_group

coordinates = st.lists(st.tuples(st.integers(-300, 300), st.integers(-300, 300)), max_size=60)
# Cell sizes plotext uses: braille 2x4, fhd 2x3, hd 2x2, and plain markers 1x1.
factors = st.sampled_from([(2, 4), (2, 3), (2, 2), (1, 1)])


@settings(max_examples=examples(300), deadline=None)
@given(coordinates)
def test_get_lines_draws_the_dots_plotext_draws(points):
    x = [px for px, _ in points]
    y = [py for _, py in points]
    markers, colors, styles = ["braille"] * len(x), [(120, 120, 150)] * len(x), ["default"] * len(x)
    expected = plotext_get_lines(x, y, markers, colors, styles)
    assert get_lines(x, y, markers, colors, styles) == expected


def test_get_lines_leaves_what_it_was_not_written_for_to_plotext():
    x, y = [0, 4.5, 9], [0, math.nan, 3]  # floats and a gap: plotext's own path
    assert get_lines(x, y, ["a"] * 3) == plotext_get_lines(x, y, ["a"] * 3)
    assert get_lines([], [], [], [], []) == plotext_get_lines([], [], [], [], [])


@settings(max_examples=examples(300), deadline=None)
@given(coordinates, factors)
def test_hd_group_groups_the_dots_as_plotext_does(points, factor):
    if not points:
        return  # plotext's own raises on nothing (max of an empty list); it is never asked
    x = [px for px, _ in points]
    y = [py for _, py in points]
    xf, yf = [factor[0]] * len(x), [factor[1]] * len(x)
    expected = plotext_hd_group(x, y, xf, yf)
    assert list(hd_group(x, y, xf, yf)) == list(expected)


def test_mixed_cell_sizes_go_to_plotext():
    x, y, xf, yf = [0, 1, 5], [0, 3, 7], [2, 2, 1], [4, 4, 1]
    assert list(hd_group(x, y, xf, yf)) == list(plotext_hd_group(x, y, xf, yf))


def test_the_stand_ins_apply_only_inside_the_block():
    assert line_helpers()[0] is plotext_get_lines
    with faster_plotext():
        assert line_helpers() == (get_lines, hd_group)
    assert line_helpers()[1] is plotext_hd_group
    with pytest.raises(RuntimeError), faster_plotext():
        raise RuntimeError("a failing build")
    assert line_helpers()[0] is plotext_get_lines
