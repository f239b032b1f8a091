"""What a Pilot test's screen shows, as text: the lines as drawn, not the widgets' content."""

from __future__ import annotations

from textual.content import Content
from textual.notifications import Notification
from textual.widgets import Footer

from support.textual_compat import compositor
from widgets.compat import textual_compat
from widgets.steady_footer import left_out


def screen_lines(app) -> list[str]:
    """Every line of the current screen as the terminal would show it."""
    return [strip.text for strip in compositor(app.screen).render_strips()]


def footer_text(app) -> str:
    """The footer's rows at the bottom of every flow screen, one line each ("" before the screen's
    first layout, when it has no lines yet: a wait on the footer goes on waiting). A footer
    whose keys do not fit in one row has two or three (widgets/steady_footer.py)."""
    lines = screen_lines(app)
    footers = app.screen.query(Footer)
    rows = max(1, footers.first().region.height) if footers else 1
    return "\n".join(lines[-rows:]) if lines else ""


def notifications(app) -> list[Notification]:
    """The notifications (toasts) the app shows now, oldest first."""
    return textual_compat.notifications(app)


def toast_text(notification: Notification) -> str:
    """The words a toast draws for a notification: its message read as markup unless it says not."""
    message = notification.message
    return str(Content.from_markup(message) if notification.markup else Content(message))


def footer_keys_expected(app) -> list[str]:
    """Each key the screen's footer should show, as drawn ("r Reload"), in the screen's order."""
    seen: dict[str, str] = {}
    spare = left_out(app.screen, app.size.width)  # a screen's spare keys below 110 columns: the help's
    for _, binding, _enabled, _tooltip in app.screen.active_bindings.values():
        if binding.show and binding.action not in spare:
            seen.setdefault(binding.action, f"{app.get_key_display(binding)} {binding.description}")
    return list(seen.values())


def footer_keys_missing(app) -> list[str]:
    """The footer's keys that are not drawn whole ([] when every one shows: docs/product.md#keys)."""
    text = footer_text(app)
    return [key for key in footer_keys_expected(app) if key not in text]
