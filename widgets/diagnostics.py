"""A table of check attempts: what was tried, what came back, the verdict and the fix.

Drawn as a Rich table so long reasons wrap to the terminal's width (a DataTable cuts them
off); at spaces, never inside a word (widgets/cells.py). Colours come from component classes
styled in ``styles.tcss`` with theme variables, so every theme works; the rows are redacted
before they get here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich import box
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.widget import Widget

from app.core.invocation import as_run
from app.core.launch.diagnosis import DiagnosticRow, Verdict, format_latency
from app.core.redact import printable
from widgets.cells import wrapped_cell

NARROW_WIDTH = 100


class DiagnosticsTable(Widget):
    """One row per attempt: Check | What was tried | HTTP | Time (latency) | ✓/✗ | Reason and fix."""

    COMPONENT_CLASSES = {
        "diagnostics--header",
        "diagnostics--ok",
        "diagnostics--failed",
        "diagnostics--pending",
        "diagnostics--warning",
        "diagnostics--fix-label",
        "diagnostics--rule",
    }

    def __init__(self, rows: Sequence[DiagnosticRow] = (), *, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._rows: list[DiagnosticRow] = list(rows)

    @property
    def rows(self) -> list[DiagnosticRow]:
        return list(self._rows)

    def show(self, rows: Sequence[DiagnosticRow]) -> None:
        """Replace the rows (the size changes with them, so lay out again)."""
        self._rows = list(rows)
        self.refresh(layout=True)

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"diagnostics--{name}", partial=True, default=Style())

    def render(self) -> RenderableType:
        return _FitToWidth(self._table)

    def _table(self, width: int) -> Table:
        table = Table(box=box.SIMPLE_HEAD, expand=True, show_edge=False, pad_edge=False, padding=(0, 1),
                      header_style=self._style("header"), border_style=self._style("rule"))
        # On a narrow terminal "backend verify" wraps, so that the reason keeps room to read.
        narrow = width < NARROW_WIDTH
        table.add_column("Check", min_width=8, max_width=8 if narrow else None, no_wrap=not narrow)
        # Narrow, what was tried gets as much room as the reason: its endpoints and header
        # names are single words, cut with "…" only when longer than the column.
        table.add_column("What was tried", ratio=3 if narrow else 2, overflow="ellipsis")
        table.add_column("HTTP", justify="right", no_wrap=True, min_width=4)
        table.add_column("Time", justify="right", no_wrap=True, min_width=6)
        table.add_column("", no_wrap=True, width=1)
        table.add_column("Reason and fix", ratio=3, overflow="ellipsis")
        verdict_styles = {Verdict.OK: self._style("ok"), Verdict.FAILED: self._style("failed"),
                          Verdict.PENDING: self._style("pending"), Verdict.WARNING: self._style("warning")}
        fix_label = self._style("fix-label")
        for row in self._rows:
            verdict_style = verdict_styles[row.verdict]
            reason = wrapped_cell(printable(row.reason), style=verdict_style if row.verdict is Verdict.PENDING else "")
            if row.fix:
                reason.append("\nFix: ", style=fix_label)
                reason.append(as_run(row.fix))  # a command it names, as it was run
            table.add_row(
                wrapped_cell(row.check),
                wrapped_cell(printable(row.tried)),
                Text("—" if row.status is None else str(row.status)),
                Text("" if row.verdict is Verdict.PENDING else format_latency(row.latency_ms)),
                Text(row.verdict.symbol, style=verdict_style),
                reason,
            )
        if not self._rows:
            table.add_row(Text("—"), Text("nothing checked yet"), "", "", "", "")
        return table


class _FitToWidth:
    """Builds the table for the width it is drawn at: Textual measures the height and draws
    with the real width, which the widget's own size may not know yet."""

    def __init__(self, build: Callable[[int], Table]) -> None:
        self.build = build

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.build(options.max_width)
