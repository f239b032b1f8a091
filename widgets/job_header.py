"""The dashboard's header line: a job's id, status, age and where it runs, with the states
that need the user right after the status (docs/product.md#live-dashboard).

Labelled when the line has room, bare (the backend as its host) when not, on two lines when
even that does not fit: at 80x24 every fact stays visible.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from textual.content import Content
from textual.markup import escape as escape_markup
from textual.widgets import Static

from app.core.redact import printable

STATUS_CLASSES = {"succeeded": "ok", "completed": "ok", "failed": "bad", "error": "bad", "cancelled": "warn",
                  "canceled": "warn"}


def shown_text(text: object, limit: int = 200) -> str:
    """Text from a server or a file, for a markup line: control characters made visible,
    markup escaped, cut to `limit` characters."""
    cleaned = printable(str(text))
    return escape_markup(cleaned if len(cleaned) <= limit else cleaned[:limit] + "…")


def status_markup(status: str) -> str:
    """The status with a dot in its colour (the backend's words: neither markup nor codes)."""
    dot = {"ok": "$success", "bad": "$error", "warn": "$warning"}.get(STATUS_CLASSES.get(status, ""), "$accent")
    return f"[{dot}]●[/] {shown_text(status, 40)}"


def age(seconds: int) -> str:
    clock = f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    return clock[3:] if seconds < 3600 else clock


class JobHeader(Static):
    def show(self, *, job_id: str, status: str, elapsed: int, backend: str, config_path: str | None,
             model: str | None, states: list[str]) -> None:
        """``states``: markup, already escaped (filter, paused, reconnecting, not watched)."""
        head = [f"[b]{shown_text(job_id)}[/b]", status_markup(status), age(elapsed)]
        facts = [("backend", shown_text(backend), shown_text(urlsplit(backend).netloc or backend))]
        if config_path:
            config = shown_text(Path(config_path).name)
            facts.append(("config", config, config))
        if model:
            facts.append(("model", shown_text(model), shown_text(model)))
        room = self.size.width - 2  # the header's padding
        labelled = "   ".join([*head, *states, *(f"{label} {full}" for label, full, _ in facts)])
        bare = "  ".join([*head, *states, *(short for _, _, short in facts)])
        if Content.from_markup(labelled).cell_length <= room:
            text = labelled
        elif Content.from_markup(bare).cell_length <= room:
            text = bare
        else:
            text = "  ".join([*head, *states]) + "\n" + "  ".join(short for _, _, short in facts)
        # No layout pass unless the line count changes: a full layout costs more than the repaint.
        self.update(text, layout=text.count("\n") != str(self.content).count("\n"))
