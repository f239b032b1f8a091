"""An image of a rollout's observation, drawn in the terminal with rich-pixels (half-cell blocks:
every terminal with colours shows them, over SSH and tmux too, and nothing asks the terminal
anything) or, where it cannot be drawn, a note saying why (docs/product.md#rollout-inspector).

Decoding runs in a thread worker: an image may be a few hundred kilobytes of base64."""

from __future__ import annotations

import base64
import binascii
import io
import re
import warnings
from typing import Any

from textual import work
from textual.content import Content
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from app.core.redact import printable
from widgets.worker_errors import ReportsWorkerFailures

# Images are drawn at most this many cells wide and tall (two pixels a cell, one above the other).
MAX_COLUMNS = 48
MAX_ROWS = 16
# Pillow refuses images past this many pixels before decoding them (a small file may claim a huge size).
MAX_PIXELS = 40_000_000
_DATA_URL = re.compile(r"data:image/[A-Za-z0-9.+-]+;base64,(?P<data>.*)\Z", re.DOTALL)


def decode_image(source: str, columns: int = MAX_COLUMNS, rows: int = MAX_ROWS) -> tuple[Any, str]:
    """(a rich-pixels renderable, its caption) for a data:image URL; (None, why not) otherwise.
    Blocking: call it from a worker."""
    match = _DATA_URL.match(source)
    if match is None:
        if source.startswith(("http://", "https://")):
            shown = source if len(source) <= 80 else source[:80] + "…"
            return None, f"an image at {printable(shown)} (not fetched: open it in a browser)"
        return None, "an image in a form that cannot be drawn here"
    try:
        raw = base64.b64decode(match.group("data"), validate=False)
    except (binascii.Error, ValueError):
        return None, "an image whose data is not valid base64"
    from PIL import Image  # Pillow: imported with the first image, not with the app
    from rich_pixels import Pixels

    Image.MAX_IMAGE_PIXELS = MAX_PIXELS
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(raw)) as opened:
                width, height = opened.size
                picture = opened.convert("RGB")
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError, Image.DecompressionBombWarning):
        return None, "an image that could not be decoded"
    scale = min(columns / width, (rows * 2) / height, 1.0)
    size = (max(1, round(width * scale)), max(1, round(height * scale)))
    return Pixels.from_image(picture, resize=size), f"{width}×{height} image"


class RolloutImage(ReportsWorkerFailures, Static):
    """One image of an observation: a note while it is decoded, then the picture or why not."""

    def __init__(self, source: str) -> None:
        super().__init__(Content.styled("[decoding an image…]", "$text-muted"))
        self.source = source
        self.drawn = False  # tests wait on it

    def on_mount(self) -> None:
        if not self.app.console.color_system:
            self.update(Content.styled("[an image: this terminal shows no colours, so it is not drawn]",
                                       "$text-muted"))
            self.drawn = True
            return
        self._decode()

    @work(thread=True, exit_on_error=False, group="rollout-image", name="Image")
    def _decode(self) -> None:
        picture, caption = decode_image(self.source)
        self.app.call_from_thread(self._show, picture, caption)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A decode that crashed says so in place (the app tells why: ReportsWorkerFailures)."""
        if event.state is WorkerState.ERROR:
            self._show(None, "an image that could not be drawn (an error: see the notice)")

    def _show(self, picture: Any, caption: str) -> None:
        self.update(picture if picture is not None else Content.styled(f"[{caption}]", "$text-muted"))
        self.tooltip = caption
        self.drawn = True
