"""What a Pilot test's screen shows, as text: the lines as drawn, not the widgets' content."""

from __future__ import annotations


def screen_lines(app) -> list[str]:
    """Every line of the current screen as the terminal would show it."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def footer_text(app) -> str:
    """The bottom line: the footer of every flow screen."""
    return screen_lines(app)[-1]
