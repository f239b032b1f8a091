"""The dashboard's line under its header for a data-parallel job: each rank's generation
tokens/s and all-reduce time at the latest step (app/core/runs/ranks.py says what they are).
Hidden for a job trained in one process; the longest wording that fits its width is shown,
so at 80 columns it stays one readable line."""

from __future__ import annotations

from typing import Any

from rich.cells import cell_len
from textual.widgets import Static

from app.core.runs.ranks import RankFigures, rank_texts


class RankLine(Static):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__("", *args, markup=False, **kwargs)
        self.figures: RankFigures | None = None
        self._shown: str | None = None

    def show(self, figures: RankFigures | None) -> None:
        """The ranks of the latest step; None hides the line (one process, or not known)."""
        self.figures = figures
        self.set_class(figures is not None, "-shown")  # styles.tcss: hidden without it
        self._fit()

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        if self.figures is None:
            return
        texts = rank_texts(self.figures)
        room = self.size.width - 2  # the padding
        text = next((t for t in texts if cell_len(t) <= room), texts[-1]) if room > 0 else texts[-1]
        if text != self._shown:
            self._shown = text
            self.update(text)
