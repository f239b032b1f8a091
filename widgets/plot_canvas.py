"""A plotext chart painted straight from plotext's character matrix into Textual strips.

textual-plotext's ``PlotextPlot.render`` asks plotext for its figure as one ANSI string
(``build``: fill the matrix, then write escape codes at every colour change), Rich parses
that string back into styled text, and Textual turns the text into strips: three passes
over every cell of every frame, together costlier than filling the matrix (profiled at
94x38: about 27 ms against 15). ``PlotCanvas`` keeps
plotext as the plotting engine (layout, axes, ticks, labels, braille lines, the theme) but
stops once plotext has filled its matrix, and turns the matrix rows into strips itself: a
segment per run of cells of equal colours, styled as the round trip would style them.

What does not change between frames is reused until the view changes:

- the frame: a repaint that does not change the figure (a refresh, a region uncovered)
  paints the strips already built; plotext runs again only when the
  figure changed (``figure_changed``) or the size, the theme or the widget's style did;
- the blank matrix plotext starts each frame from (spaces, the canvas colour inside the plot
  area, the axes colour around it): copied from the last one while the layout holds;
- a row's strip: when a row's cells and colours equal the last frame's (the axes and tick
  labels while the range holds, the title, rows the lines do not cross), its strip is reused;
- the styles: one per colour triple, and one per run start, kept while the theme holds.

Rasterizing the lines into braille dots is then most of a frame: while the canvas fills its
matrix, plotext's two helpers for it run as exact, faster stand-ins (widgets/plotext_speedups.py).

Relies on plotext 5's figure internals, as textual-plotext itself does: through
widgets/compat/plotext_compat.py (``monitor.matrix`` is read here); pyproject pins plotext below 6.
"""

from __future__ import annotations

from typing import Any

from rich.segment import Segment
from rich.style import Style as RichStyle
from rich.text import Text
from textual.content import Content
from textual.message import Message
from textual.strip import Strip
from textual.style import Style
from textual_plotext import PlotextPlot

from widgets.compat.plotext_compat import (
    PlotextMatrix,
    colors_to_ansi,
    fill_figure_matrix,
    lay_out_figure,
    set_figure_size,
)
from widgets.compat.textual_plotext_compat import plotext_theme_name
from widgets.plotext_speedups import faster_plotext

# A cell's colours as plotext keeps them: (foreground, style, background).
Colors = tuple[Any, Any, Any]
# A matrix row: markers, foregrounds, styles, backgrounds.
Row = tuple[list, list, list, list]
# A run's style depends on its first cell's offset (see _row_strip); past this many
# (colours, offset) pairs (about 370 bytes each) the cache starts over rather than grow with
# every picture drawn.
MAX_RUN_STYLES = 4096


class BlankMatrix(PlotextMatrix):
    """plotext's matrix, whose blank start is copied from ``template`` when the layout is the
    one it was made for (plotext builds it cell by cell, asking each cell if it is in the
    plot area)."""

    LAYERS = ("marker", "fullground", "background", "style")

    def __init__(self, template: dict) -> None:
        self.template = template
        super().__init__()

    def set_matrices(self) -> None:
        key = (self.rows, self.cols, self.Rows_canvas, self.Cols_canvas, self.canvas_color, self.axes_color)
        try:
            blank = self.template.get(key)
        except TypeError:  # a colour given as a list: no reuse
            super().set_matrices()
            return
        if blank is None:
            super().set_matrices()
            if len(self.template) > 8:  # a few layouts (sizes) at most: start over
                self.template.clear()
            self.template[key] = tuple([row[:] for row in getattr(self, name)] for name in self.LAYERS)
            return
        for name, rows in zip(self.LAYERS, blank, strict=True):
            setattr(self, name, [row[:] for row in rows])


class PlotCanvas(PlotextPlot):
    """A ``PlotextPlot`` (the same ``plt``, the same theme handling) painted from plotext's
    matrix. Change the figure through ``plt``, then call ``figure_changed``. ``builds``
    counts plotext builds and ``rows_built`` the rows made into strips anew (tests and the
    benchmark check what is reused)."""

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None,
                 disabled: bool = False) -> None:
        super().__init__(name=name, id=id, classes=classes, disabled=disabled)
        self.builds = 0
        self.rows_built = 0
        self._version = 0
        self._frame_key: tuple | None = None
        self._strips: list[Strip] = []
        self._rows: list[Row] = []  # the last frame's rows, top first, beside its strips
        self._blank: dict = {}
        self._cell_styles: dict[Colors, Style] = {}
        self._run_styles: dict[tuple[Colors, int, int], RichStyle] = {}
        self._styles_key: tuple | None = None

    class Resized(Message):
        """The canvas's size changed on its own (a row beside it came or went): what its
        owner drew for a size, such as the y ticks, may need drawing again."""

    def on_resize(self) -> None:
        self.post_message(self.Resized())

    def figure_changed(self) -> None:
        """The figure (its data or settings) changed: build it again at the next paint."""
        self._version += 1
        self.refresh()

    # -- painting --------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        strips = self.frame_strips()
        if y < len(strips):
            return strips[y]
        return Strip.blank(self.size.width, self.visual_style.rich_style)

    def frame_strips(self) -> list[Strip]:
        """The figure's rows as strips, top first; built again only when the figure, the
        size, the theme or the widget's style changed since the last frame."""
        width, height = self.size
        if width <= 0 or height <= 0:
            return []
        theme = plotext_theme_name(self, self.app.theme)
        visual_style = self.visual_style
        key = (self._version, width, height, theme, visual_style)
        if key != self._frame_key:
            self._styles_for(theme, visual_style)
            self._fill_matrix(width, height, theme)
            self._strips = self._matrix_strips()
            self._frame_key = key
        return self._strips

    def _fill_matrix(self, width: int, height: int, theme: str) -> None:
        """plotext's ``build`` without its last step, the ANSI string (``set_canvas``)."""
        plt: Any = self.plt  # plotext's figure internals are not in textual-plotext's stubs
        # What PlotextPlot.render sets before each build (the size twice: see its comments).
        plt.plotsize(width, height)
        set_figure_size(plt, width, height)
        plt.theme(theme)
        if not isinstance(plt.monitor.matrix, BlankMatrix):  # a new figure (clear_figure)
            plt.monitor.matrix = BlankMatrix(self._blank)
        lay_out_figure(plt)
        with faster_plotext():
            fill_figure_matrix(plt)
        self.builds += 1

    def _matrix_strips(self) -> list[Strip]:
        matrix = self.plt.monitor.matrix  # type: ignore[attr-defined]  # see _fill_matrix
        previous, previous_strips = self._rows, self._strips
        rows: list[Row] = []
        strips: list[Strip] = []
        for y, row in enumerate(range(matrix.rows - 1, -1, -1)):  # plotext's row 0 is the bottom
            cells = (matrix.marker[row], matrix.fullground[row], matrix.style[row], matrix.background[row])
            rows.append(cells)
            if y < len(previous) and previous[y] == cells:
                strips.append(previous_strips[y])
            else:
                strips.append(self._row_strip(y, *cells))
                self.rows_built += 1
        self._rows = rows
        return strips

    def _row_strip(self, y: int, markers: list[str], fullground: list, style: list, background: list) -> Strip:
        """Row ``y`` (0 at the top): a segment per run of cells of equal colours, each with
        its first cell's offset in its style's meta, as Textual's own text rendering gives
        (text selection reads it; equal runs in other places stay apart, as they were)."""
        cells = list(zip(fullground, style, background, strict=True))
        if not cells:
            return Strip([])
        starts = [0, *(x for x in range(1, len(cells)) if cells[x] != cells[x - 1]), len(cells)]
        run_styles = self._run_styles
        if len(run_styles) > MAX_RUN_STYLES:
            run_styles.clear()
        segments = []
        for start, end in zip(starts, starts[1:], strict=False):
            key = (cells[start], start, y)
            rich_style = run_styles.get(key)
            if rich_style is None:
                rich_style = run_styles[key] = self._cell_style(cells[start]).rich_style_with_offset(start, y)
            segments.append(Segment("".join(markers[start:end]), rich_style))
        return Strip(segments)

    def _styles_for(self, theme: str, visual_style: Style) -> None:
        """Forget styles (and the strips carrying them) made for another theme or style."""
        key = (theme, visual_style, self.app.ansi_theme)
        if key != self._styles_key:
            self._cell_styles.clear()
            self._run_styles.clear()
            self._rows = []
            self._styles_key = key

    def _cell_style(self, colors: Colors) -> Style:
        """A cell's style as the ANSI round trip makes it: plotext's escape codes for its
        colours, parsed by Rich, laid on this widget's style by Textual."""
        style = self._cell_styles.get(colors)
        if style is None:
            visual_style = self.visual_style
            text = Text.from_ansi(colors_to_ansi(*colors) + "x")
            content = Content.from_rich_text(text, console=self.app.console)
            ((_, text_style),) = content.render(visual_style, end="")
            style = self._cell_styles[colors] = visual_style + text_style
        return style
