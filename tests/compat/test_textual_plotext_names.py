"""What widgets/compat/textual_plotext_compat.py takes from textual-plotext is still there and
behaves as the charts rely on. A failure names the version the module was written against and
the one installed."""

from __future__ import annotations

from importlib.metadata import version

from textual.app import App, ComposeResult
from textual_plotext import PlotextPlot

from widgets.compat import textual_plotext_compat
from widgets.compat.textual_plotext_compat import plotext_theme_name


def changed(what: str) -> str:
    return (f"{what}: widgets/compat/textual_plotext_compat.py was written against "
            f"{textual_plotext_compat.WRITTEN_FOR}, textual-plotext {version('textual-plotext')} is installed")


class Plotting(App):
    def compose(self) -> ComposeResult:
        yield PlotextPlot()


async def test_the_plotext_theme_follows_the_apps():
    app = Plotting()
    async with app.run_test() as pilot:
        plot = app.query_one(PlotextPlot)
        await pilot.pause()
        assert plotext_theme_name(plot, "nord") == "textual-auto-nord", \
            changed("PlotextPlot._get_plotext_theme_name")
        plot.theme = "pro"
        assert plotext_theme_name(plot, "nord") == "pro", changed("PlotextPlot._get_plotext_theme_name")
