"""The dashboard's header line: a job's id, status, age and where it runs, with the states
that need the user right after the status (docs/product.md#live-dashboard).

Labelled when the line has room, bare (the backend as its host) when not, on two lines when
even that does not fit: at 80x24 every fact stays visible.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from textual.content import Content
from textual.markup import escape as escape_markup
from textual.widgets import Static

from app.core.api.wire import shown_status
from app.core.redact import printable

STATUS_CLASSES = {"succeeded": "ok", "completed": "ok", "failed": "bad", "error": "bad", "cancelled": "warn",
                  "canceled": "warn"}


def shown_text(text: object, limit: int = 200) -> str:
    """Text from a server or a file, for a markup line: control characters made visible,
    markup escaped, cut to `limit` characters."""
    cleaned = printable(str(text))
    return escape_markup(cleaned if len(cleaned) <= limit else cleaned[:limit] + "…")


def status_markup(status: str, queue_position: int | None = None) -> str:
    """The status with a dot in its colour (the backend's words: neither markup nor codes), and
    the job's place in its backend's queue while it waits: "queued #3"."""
    dot = {"ok": "$success", "bad": "$error", "warn": "$warning"}.get(STATUS_CLASSES.get(status, ""), "$accent")
    return f"[{dot}]●[/] {shown_text(shown_status(status, queue_position), 40)}"


def age(seconds: int) -> str:
    clock = f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    return clock[3:] if seconds < 3600 else clock


class JobHeader(Static):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fit: tuple[tuple, str] | None = None  # (what the choice was made for, the choice)
        self._shown: str | None = None

    def show(self, *, job_id: str, status: str, elapsed: int, backend: str, config_path: str | None,
             model: str | None, states: list[str], policy: tuple[str, bool] | None = None,
             queue_position: int | None = None) -> None:
        """``states``: markup, already escaped (filter, paused, reconnecting, not watched).
        ``policy``: what trains (events.policy_badge): the language model itself ("lm") or a
        stand-in in its place, said in the warning colour beside the model's name.
        Called every second for the clock: the line is measured again only when something
        but the clock's digits changed, and the widget repaints only when the text did."""
        clock = age(elapsed)
        head = [f"[b]{shown_text(job_id)}[/b]", status_markup(status, queue_position), clock]
        facts = [("backend", shown_text(backend), shown_text(urlsplit(backend).netloc or backend))]
        if config_path:
            config = shown_text(Path(config_path).name)
            facts.append(("config", config, config))
        if model or policy:
            name = shown_text(model or "?")
            if policy is None:
                facts.append(("model", name, name))
            elif policy[1]:  # a stand-in trains in the model's place
                badge = shown_text(policy[0], 40)
                facts.append(("model", f"{name} [$warning]⚠ {badge}[/]", f"{name} [$warning]⚠ stand-in[/]"))
            else:
                kind = shown_text(policy[0], 40)
                facts.append((kind, name, f"{kind} {name}"))
        labelled = "   ".join([*head, *states, *(f"{label} {full}" for label, full, _ in facts)])
        bare = "  ".join([*head, *states, *(short for _, _, short in facts)])
        split = "  ".join([*head, *states]) + "\n" + "  ".join(short for _, _, short in facts)
        # The header spans the screen: before its first layout (drawn from the screen's on_mount,
        # for the first frame) its width is the terminal's.
        room = (self.size.width or self.app.size.width) - 2  # the header's padding
        # The clock's width is all of it that matters to the fit (05:09 and 05:10 fit alike).
        shape = (room, len(clock), labelled.replace(clock, "", 1))
        if self._fit is None or self._fit[0] != shape:
            if Content.from_markup(labelled).cell_length <= room:
                choice = "labelled"
            elif Content.from_markup(bare).cell_length <= room:
                choice = "bare"
            else:
                choice = "split"
            self._fit = (shape, choice)
        text = {"labelled": labelled, "bare": bare, "split": split}[self._fit[1]]
        if text == self._shown:
            return  # a frozen clock (the job ended) or a second not yet over: nothing to repaint
        # No layout pass unless the line count changes: a full layout costs more than the repaint.
        layout = text.count("\n") != (self._shown or "").count("\n")
        self._shown = text
        self.update(text, layout=layout)
