"""Textual's private names the app relies on, in one place. Written against Textual 8.2.8.

Textual 8.2 has no public way to do what each of these does. tests/compat/test_textual_names.py fails,
naming the version this was written against, when Textual changes or removes one of them.
"""

from __future__ import annotations

import inspect
import os
import zlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, TypeVar

from rich.cells import cell_len
from textual.app import App
from textual.css.stylesheet import Stylesheet
from textual.dom import DOMNode
from textual.geometry import Size
from textual.message import Message
from textual.message_pump import MessagePump
from textual.notifications import Notification
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer
from textual.widgets._footer import FooterKey  # one key the Footer shows; not exported
from textual.widgets._header import HeaderTitle  # the Header's title line; not exported

if TYPE_CHECKING:
    from textual.widgets import Log

WRITTEN_FOR = "Textual 8.2.8"
LogT = TypeVar("LogT", bound="Log")

# Stylesheet._parse_rules' parameters, as look_up_parsed_rules calls them.
PARSE_RULES_PARAMETERS = ("self", "css", "read_from", "is_default_rules", "tie_breaker", "scope")

__all__ = [
    "PARSE_RULES_PARAMETERS", "WRITTEN_FOR", "FooterKey", "HeaderTitle", "deliver_as_driver",
    "footer_bindings_ready", "give_empty_result_callback", "has_queued_callbacks", "is_being_removed",
    "log_line_width", "look_up_parsed_rules", "measured_in_place", "notifications", "origin_name",
    "parse_rules_signature", "source_key", "update_scroll_range", "withdraw_notification",
]


def notifications(app: App) -> list[Notification]:
    """The notifications the app shows now, oldest first (``App._notifications``)."""
    return list(app._notifications)


def withdraw_notification(app: App, notification: Notification) -> bool:
    """Take `notification` off the screen before its timeout, if the app still shows it
    (``App._notifications``, ``App._unnotify``); whether it did."""
    if notification not in app._notifications:
        return False
    app._unnotify(notification)
    return True


def has_queued_callbacks(node: MessagePump) -> bool:
    """Whether `node` still has callbacks queued by ``call_next`` to run (``_next_callbacks``)."""
    return bool(node._next_callbacks)


def give_empty_result_callback(screen: Screen) -> None:
    """Give `screen` what ``push_screen`` gives a screen and ``switch_screen`` takes back: a
    result callback that calls nothing (``Screen._push_result_callback``)."""
    screen._push_result_callback(screen, None)


def is_being_removed(node: DOMNode) -> bool:
    """Whether `node` is being removed: pruned with its parent, or closing (``_pruning``,
    ``_closing``). ``is_mounted`` is still False for a node that is merely not built yet."""
    return node._pruning or node._closing


def footer_bindings_ready(footer: Footer) -> bool:
    """Whether the Footer has read its screen's bindings since it was mounted
    (``Footer._bindings_ready``): until then it composes no keys."""
    return footer._bindings_ready


def update_scroll_range(widget: Widget, virtual_size: Size) -> None:
    """Update `widget`'s scroll range and scrollbars to `virtual_size` without laying out the
    screen, as ``refresh(layout=True)`` would (``Widget._scroll_update``)."""
    widget._scroll_update(virtual_size)


def deliver_as_driver(app: App, message: Message) -> None:
    """Put `message` in the app's queue as its driver does with what the terminal sends
    (``App._driver``), without waiting for the app (Pilot.press waits)."""
    assert app._driver is not None, "the app is not running"
    app._driver.send_message(message)


def measured_in_place(log_class: type[LogT]) -> type[LogT]:
    """Make `log_class` (a Log) measure each write's new lines in place, as a class decorator.
    Textual's Log measures them on a thread worker (``Log._update_size``) and hands the widest
    back through the UI's queue (``Log._update_maximum_width``): a thread, three state messages
    and a blocking call back, per write. A decorator, not a base class: a Log subclass here
    would import the Log, and build a class, before the first frame, which shows no log
    (docs/performance.md#first-paint)."""

    def update_size(self: LogT, updates: int, lines: list[str]) -> None:
        if lines:
            self._update_maximum_width(updates, max(log_line_width(type(self), line) for line in lines))

    log_class._update_size = update_size  # type: ignore[method-assign,assignment]
    return log_class


def log_line_width(log_class: type[Log], line: str) -> int:
    """The cells `line` takes as a Log of `log_class` draws it: control codes replaced, tabs
    expanded (``Log._process_line``)."""
    if line.isascii() and line.isprintable():
        return len(line)  # the common case: one cell a character, nothing to replace
    return cell_len(log_class._process_line(line))


def parse_rules_signature() -> tuple[str, ...]:
    """The parameters of Textual's ``Stylesheet._parse_rules`` as installed now."""
    return tuple(inspect.signature(Stylesheet._parse_rules).parameters)


def source_key(text: str) -> str:
    """A 64-bit digest of `text` and its length: zlib's CRC-32 and Adler-32, as zlib is loaded
    already (hashlib's OpenSSL costs 1.3 ms of a start); a few dozen sources, none adversarial
    (the file is the user's own, docs/performance.md#first-paint)."""
    data = text.encode()
    return f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}-{len(data)}"


def origin_name(read_from: Any) -> Any:
    """Where a source came from, without the folders: its file's name and what in it (a widget's
    default CSS, a part of styles.tcss). The parsed rules hold no path, so a key without the
    folders fits every install, and the rules shipped with the package (app/screens/css_cache.py's
    seed) serve a checkout or a wheel anywhere (docs/performance.md#first-paint)."""
    if isinstance(read_from, tuple) and len(read_from) == 2 and isinstance(read_from[0], str):
        return os.path.basename(read_from[0]), read_from[1]
    return read_from


def look_up_parsed_rules(known: Mapping[str, Any], parsed: MutableMapping[str, Any]) -> Callable[[], None] | None:
    """Give every stylesheet the rules in `known` instead of parsing their source again, and put
    what it still parses into `parsed` (docs/performance.md#first-paint: a start parses its CSS in
    13-15 ms, and reads it back in about 1). The key hashes all that the parse depends on: the CSS
    text, where it came from (origin_name), its default/tie-breaker/scope, and the stylesheet's variables,
    substituted as it parses (another theme, other rules). A source the stylesheet already holds
    (``Stylesheet._parse_cache``: each parse of the stylesheet asks for every source again,
    hundreds of times a start) is not hashed again. Wraps ``Stylesheet._parse_rules`` at class
    level; returns the undo, or None, installing nothing, when its parameters are not the ones
    this was written for (tests/compat/test_textual_names.py says so)."""
    if parse_rules_signature() != PARSE_RULES_PARAMETERS:
        return None
    original = Stylesheet._parse_rules
    variables_digest: list[Any] = [None, ""]  # the last variables seen (kept alive), their digest

    def parse_rules(self: Stylesheet, css: str, read_from: Any, is_default_rules: bool = False,
                    tie_breaker: int = 0, scope: str = "") -> Any:
        held = (css, read_from, is_default_rules, tie_breaker, scope)  # Textual's own key, without the variables
        rules = self._parse_cache.get(held)  # what Textual's parse looks up first
        if rules is not None:
            return rules
        if variables_digest[0] is not self._variables:  # set_variables replaces the dict, never edits it
            variables_digest[:] = [self._variables, repr(sorted(self._variables.items()))]
        key = source_key(repr((css, origin_name(read_from), is_default_rules, tie_breaker, scope, variables_digest[1])))
        try:
            rules = known[key]
        except KeyError:
            rules = parsed[key] = original(self, css, read_from, is_default_rules, tie_breaker, scope)
            return rules
        self._parse_cache[held] = rules
        return rules

    Stylesheet._parse_rules = parse_rules  # type: ignore[method-assign]

    def undo() -> None:
        Stylesheet._parse_rules = original  # type: ignore[method-assign]

    return undo
