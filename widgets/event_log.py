"""The event log: time, seq, type, level, message; noise hidden, a filter, tail mode.

Built on Textual's ``Log``, which renders only the visible lines, so tens of thousands of
events a second cost little. It keeps at most ``max_lines`` lines on screen and
``max_kept`` events in memory (to re-filter); the full stream goes to the run's folder.
"""

from __future__ import annotations

import textwrap
from collections import deque
from typing import Any

from rich.cells import cell_len
from rich.highlighter import Highlighter
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import Reactive
from textual.strip import Strip
from textual.widgets import Log, Static

from app.core.api.wire import JobEvent, parse_iso
from app.core.runs.events import is_noise, mask_model_urls
from widgets.compat.textual_compat import measured_in_place, update_scroll_range

LEVEL_WIDTH = 7


def event_time(event: JobEvent) -> str:
    at = parse_iso(event.created_at)
    return at.astimezone().strftime("%H:%M:%S") if at else "--:--:--"


def event_head(event: JobEvent) -> str:
    """Time, seq, level and type: the columns before the message."""
    level = (event.level or "info").upper()[:LEVEL_WIDTH]
    return f"{event_time(event)} {event.seq:>6} {level:<{LEVEL_WIDTH}} {event.type}  "


def event_message(event: JobEvent) -> str:
    return " ".join(mask_model_urls(event.message).split())


def format_event(event: JobEvent) -> str:
    return event_head(event) + event_message(event)


# Continuation lines start past the time, seq and level columns, so those stay readable.
CONTINUATION_INDENT = 16 + LEVEL_WIDTH + 1
MIN_WRAP_WIDTH = 20
NARROW_INDENT = 2
NARROWEST_WRAP = NARROW_INDENT + 8  # below this a log is too narrow to read wrapped either


def event_lines(event: JobEvent, width: int) -> list[str]:
    """The event as it reads in ``width`` columns: the message wrapped (not cut at the edge),
    each continuation line indented under the message when there is room, else under the type,
    else (a narrow log) by two columns."""
    head = event_head(event)
    line = head + event_message(event)
    if len(line) <= width or width < NARROWEST_WRAP:
        return [line]
    head_length = len(head)
    if width - head_length >= MIN_WRAP_WIDTH:
        indent = head_length
    elif width - CONTINUATION_INDENT >= MIN_WRAP_WIDTH:
        indent = CONTINUATION_INDENT
    else:  # a narrow log still wraps (a line cut at the edge hides its words): a small indent
        indent = NARROW_INDENT
    wrapped = textwrap.wrap(line, width, subsequent_indent=" " * indent, break_on_hyphens=False)
    return wrapped or [line]


class LevelHighlighter(Highlighter):
    """Colours the level column with the app theme's colours."""

    def __init__(self, styles: dict[str, Style]) -> None:
        self.styles = styles
        self.dim = styles.get("dim", Style(dim=True))

    def highlight(self, text: Text) -> None:
        text.stylize(self.dim, 0, 15)
        style = self.styles.get(text.plain[16:16 + LEVEL_WIDTH].strip())
        if style is not None:
            text.stylize(style, 16, 16 + LEVEL_WIDTH)


@measured_in_place
class LogLines(Log):
    """Textual's Log, with each write's cost proportional to the lines written.

    - No layout of the screen per write. A Log's virtual size (its line count) is a layout
      reactive: every write re-laid out the whole screen and repainted all of it, the
      dashboard's largest cost while events streamed (benchmarks/bench_cpu.py). The log's box
      comes from the stylesheet (1fr), not from its lines, so a new line needs the scroll
      range and the scrollbar updated, nothing more. What does move things still lays out: a
      scrollbar appearing (its own layout reactive), a size that follows the content (auto).
    - No thread per write (``measured_in_place``). The Log measures the widest new line on a
      thread worker and hands the answer back through the UI's queue (a thread, three state
      messages and a blocking call back, per write); the lines here are wrapped to the width
      already, and measuring them here costs less than that round trip.
    - Rendered lines are not cached (as in Textual 8's Log, whose cache is filled only while
      text is selected): every batch scrolls the log, so the visible lines are mostly new, and
      a kept Strip keeps seven small caches alive with it; caching them (tried) made the
      garbage collector's full passes ten times busier than the renders it saved.
    - The widget's style once per repaint, not once per line (it walks the ancestors)."""

    # End scrolls to the last line, which resumes following the log (EventLog.tailing): said so
    # on `?` and in the footer, where the focused log's key would otherwise hide the dashboard's
    # own "Follow log" (a spare key of the dashboard's footer: NARROW_FOOTER_LEAVES).
    BINDINGS = [Binding("end", "scroll_end", "Follow log")]

    virtual_size: Reactive[Size] = Reactive(Size(0, 0), layout=False)

    class Resized(Message):
        """The lines' own box changed size: the event log wraps them again."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._repaint_style: Style | None = None

    def watch_virtual_size(self, size: Size) -> None:
        styles = self.styles
        if not self.container_size or (styles.width is not None and styles.width.is_auto) or \
                (styles.height is not None and styles.height.is_auto):
            self.refresh(layout=True)  # not laid out yet, or sized by its lines
            return
        # Textual 8.2 has no public call that updates the scroll range and the scrollbars
        # without laying out the screen (refresh(layout=True), what this avoids).
        update_scroll_range(self, size)

    @property
    def rich_style(self) -> Style:
        return self._repaint_style if self._repaint_style is not None else super().rich_style

    def on_resize(self) -> None:
        # The lines are wrapped to this widget's width, so its own resize (not its
        # container's, which can come before this one is laid out again) re-wraps them.
        self.post_message(self.Resized())

    def render_lines(self, crop: Region) -> list[Strip]:
        self._repaint_style = super().rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._repaint_style = None


class EventLog(Vertical):
    def __init__(self, *, max_lines: int = 5000, max_kept: int = 20000, id: str | None = None) -> None:
        super().__init__(id=id)
        self.max_lines = max_lines
        self.kept: deque[JobEvent] = deque(maxlen=max_kept)
        self.show_noise = False
        self.filter_text = ""
        self.hidden_noise = 0
        self.new_while_away = 0
        self.total = 0
        # The events shown (past the noise toggle and the filter): counted as they come, and again
        # from the kept ones when either changes; the status says it while a filter is on.
        self.matching = 0
        # Tail mode: follow the newest line until the user scrolls up; scrolling back to the
        # end resumes it. Tracked here because the Log's own flag is set on every write.
        self.tailing = True
        self._wrapped_at = 0
        self._status_text: str | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="log-status", markup=False)
        log = LogLines(max_lines=self.max_lines, highlight=True, auto_scroll=True, id="log-lines")
        yield log

    def on_mount(self) -> None:
        variables = self.app.theme_variables

        def colour(name: str, fallback: str) -> Style:
            try:
                return Style.parse(variables.get(name, fallback))
            except Exception:  # a theme value such as "auto 60%" is not a Rich colour
                return Style.parse(fallback)

        styles = {
            "ERROR": colour("text-error", "red") + Style(bold=True),
            "WARNING": colour("text-warning", "yellow"),
            "INFO": colour("text-success", "green"),
            "DEBUG": Style(dim=True),
            "dim": Style(dim=True),
        }
        log = self.query_one(Log)
        log.highlighter = LevelHighlighter(styles)
        self.watch(log, "scroll_y", self._scrolled, init=False)
        self._update_status()

    def _scrolled(self) -> None:
        log = self.log_view
        tailing = log.is_vertical_scroll_end or log.max_scroll_y == 0
        if tailing != self.tailing:
            self.tailing = tailing
            if tailing:
                self.new_while_away = 0
            self._update_status()

    def on_log_lines_resized(self, event: LogLines.Resized) -> None:
        event.stop()
        self._update_status()  # its parts fitted to the new width
        if self._wrapped_at != self._wrap_width and self.kept:
            self.rebuild()  # the messages are wrapped to the width: wrap them again
        elif self.tailing:
            self.log_view.call_after_refresh(self._keep_tail)

    def _keep_tail(self) -> None:
        """A scroll to the end deferred until after a refresh: only if still tailing (the user
        may have scrolled up meanwhile, and is not pulled back down)."""
        if self.tailing:
            self.log_view.scroll_end(animate=False, immediate=True)

    @property
    def _wrap_width(self) -> int:
        """Columns a line may use: the log's width less room for its scrollbar, which appears
        only once the lines overflow (0 before layout: nothing is wrapped then)."""
        log = self.log_view
        return max(0, log.size.width - log.gutter.width - log.styles.scrollbar_size_vertical)

    @property
    def log_view(self) -> Log:
        """The Log of the lines (not `log`: that is Textual's logger on every widget)."""
        return self.query_one("#log-lines", Log)

    @property
    def shown(self) -> int:
        """How many kept events pass the noise toggle and the filter (a line may wrap)."""
        return sum(1 for event in self.kept if self._visible(event))

    def _visible(self, event: JobEvent) -> bool:
        if not self.show_noise and is_noise(event):
            return False
        if self.filter_text:
            needle = self.filter_text.lower()
            return needle in event.type.lower() or needle in event.message.lower() or \
                needle in (event.level or "").lower()
        return True

    def add_events(self, events: list[JobEvent]) -> None:
        """One coalesced batch from the worker."""
        lines = []
        width = self._wrapped_at = self._wrap_width
        for event in events:
            self.kept.append(event)
            self.total += 1
            if is_noise(event):
                self.hidden_noise += 1
            if self._visible(event):
                self.matching += 1
                lines.extend(event_lines(event, width))
        if lines:
            log = self.log_view
            log.auto_scroll = self.tailing
            if not self.tailing:
                self.new_while_away += len(lines)
            log.write_lines(lines)
            if self.tailing and not log.is_vertical_scroll_end:
                # The Log scrolls as it writes, unless it was not at the end (a scroll still
                # running, a size not laid out yet): then once the lines are laid out.
                log.call_after_refresh(self._keep_tail)
        self._update_status()

    def rebuild(self) -> None:
        """After the filter or the noise toggle changed: redraw from the kept events."""
        log = self.log_view
        log.clear()
        log.auto_scroll = True
        self.tailing = True
        self.new_while_away = 0
        width = self._wrapped_at = self._wrap_width
        visible = [event for event in self.kept if self._visible(event)]
        self.matching = len(visible)
        log.write_lines([line for event in visible for line in event_lines(event, width)])
        self._update_status()

    def toggle_noise(self) -> None:
        self.show_noise = not self.show_noise
        self.rebuild()

    def set_filter(self, text: str) -> None:
        self.filter_text = text.strip()
        self.rebuild()

    def follow(self) -> None:
        """Back to tail mode."""
        self.new_while_away = 0
        self.tailing = True
        self.log_view.auto_scroll = True
        self.log_view.scroll_end(animate=False)
        self._update_status()

    def _matches(self) -> str:
        """"12 of 340 events match": the events the filter shows (past the noise toggle) of all."""
        verb = "matches" if self.matching == 1 else "match"
        return f"{self.matching} of {self.total} event{'' if self.total == 1 else 's'} {verb}"

    def _update_status(self) -> None:
        """One line, never cut: what the user set comes first, and whole parts leave from its end
        (the noise count, then the events') where the pane is too narrow (the walk: a filter
        pushed them past the edge, cut mid-word)."""
        parts = [f"filter {self.filter_text!r} (esc clears)"] if self.filter_text else []
        # While filtering, the matches (the walk: the count of every event stood beside a filter).
        parts.append(self._matches() if self.filter_text else f"{self.total} events")
        if self.new_while_away:
            parts.insert(0, f"▼ {self.new_while_away} new (end to follow)")
        noise = "shown" if self.show_noise else "hidden"
        parts.append(f"{self.hidden_noise} hatchet/modal {noise} (n)")
        width = self.query_one("#log-status", Static).size.width if self.is_mounted else 0
        while len(parts) > 1 and 0 < width < cell_len("  ·  ".join(parts)):
            parts.pop()
        text = "  ·  ".join(parts)
        if text != self._status_text:  # the same text again would still repaint the line
            self._status_text = text
            self.query_one("#log-status", Static).update(text, layout=False)  # height 1
