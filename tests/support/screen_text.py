"""What a Pilot test's screen shows, as text: the lines as drawn, not the widgets' content."""

from __future__ import annotations

from textual.content import Content
from textual.notifications import Notification

from support.textual_compat import compositor
from widgets.compat import textual_compat


def screen_lines(app) -> list[str]:
    """Every line of the current screen as the terminal would show it."""
    return [strip.text for strip in compositor(app.screen).render_strips()]


def footer_text(app) -> str:
    """The bottom line: the footer of every flow screen ("" before the screen's first layout,
    when it has no lines yet: a wait on the footer goes on waiting)."""
    lines = screen_lines(app)
    return lines[-1] if lines else ""


def notifications(app) -> list[Notification]:
    """The notifications (toasts) the app shows now, oldest first."""
    return textual_compat.notifications(app)


def toast_text(notification: Notification) -> str:
    """The words a toast draws for a notification: its message read as markup unless it says not."""
    message = notification.message
    return str(Content.from_markup(message) if notification.markup else Content(message))
