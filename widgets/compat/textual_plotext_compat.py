"""textual-plotext's private names the charts rely on, in one place. Written against
textual-plotext 1.0.1.

tests/compat/test_textual_plotext_names.py fails, naming the version this was written against, when
textual-plotext changes or removes one of them.
"""

from __future__ import annotations

from textual_plotext import PlotextPlot

WRITTEN_FOR = "textual-plotext 1.0.1"


def plotext_theme_name(plot: PlotextPlot, app_theme: str) -> str:
    """The plotext theme `plot` draws with under the app's theme `app_theme`, as its own
    ``render`` chooses it (``PlotextPlot._get_plotext_theme_name``)."""
    return plot._get_plotext_theme_name(app_theme)
