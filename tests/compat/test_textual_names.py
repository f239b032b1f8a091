"""What widgets/compat/textual_compat.py takes from Textual is still there and behaves as the app
relies on. A failure names the Textual version the module was written against and the one
installed: update the module (and its callers) to the installed Textual's names."""

from __future__ import annotations

import inspect
from importlib.metadata import version

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.events import Key
from textual.geometry import Size
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Header, Label, Log

from widgets.compat import textual_compat
from widgets.compat.textual_compat import (
    FooterKey,
    HeaderTitle,
    deliver_as_driver,
    footer_bindings_ready,
    give_empty_result_callback,
    has_queued_callbacks,
    is_being_removed,
    log_line_width,
    measured_in_place,
    notifications,
    update_scroll_range,
    withdraw_notification,
)


def changed(what: str) -> str:
    return (f"{what}: widgets/compat/textual_compat.py was written against {textual_compat.WRITTEN_FOR}, "
            f"Textual {version('textual')} is installed")


class Keys(App):
    BINDINGS = [Binding("k", "pressed", "Press")]

    def __init__(self) -> None:
        super().__init__()
        self.pressed = 0

    def compose(self) -> ComposeResult:
        yield Header()
        yield Label("x")
        yield Footer()

    def action_pressed(self) -> None:
        self.pressed += 1


async def test_the_footer_and_header_are_built_of_the_widgets_named():
    assert issubclass(FooterKey, Widget) and issubclass(HeaderTitle, Widget), changed("FooterKey, HeaderTitle")
    app = Keys()
    async with app.run_test() as pilot:
        await pilot.pause()
        assert [key.key for key in app.query(FooterKey)][:1] == ["k"], changed("the Footer's keys are FooterKey")
        assert len(app.query_one(Header).query(HeaderTitle)) == 1, changed("the Header's title is a HeaderTitle")
        assert footer_bindings_ready(app.query_one(Footer)), changed("Footer._bindings_ready")
    assert not footer_bindings_ready(Footer()), changed("Footer._bindings_ready")


async def test_notifications_are_listed_and_withdrawn():
    app = Keys()
    async with app.run_test() as pilot:
        app.notify("first", timeout=60)
        app.notify("second", timeout=60)
        await pilot.pause()
        shown = notifications(app)
        assert [n.message for n in shown] == ["first", "second"], changed("App._notifications")
        assert withdraw_notification(app, shown[0]), changed("App._unnotify")
        assert [n.message for n in notifications(app)] == ["second"], changed("App._unnotify")
        assert not withdraw_notification(app, shown[0]), changed("App._notifications (membership)")


async def test_callbacks_queued_by_call_next_are_seen_until_they_run():
    app = Keys()
    ran = []
    async with app.run_test() as pilot:
        await pilot.pause()
        assert not has_queued_callbacks(app), changed("MessagePump._next_callbacks")
        app.call_next(lambda: ran.append(1))
        assert has_queued_callbacks(app), changed("MessagePump._next_callbacks (call_next's queue)")
        await pilot.pause()
        assert ran == [1] and not has_queued_callbacks(app), changed("MessagePump._next_callbacks")


async def test_a_default_screen_given_an_empty_result_callback_can_be_switched():
    assert list(inspect.signature(Screen._push_result_callback).parameters)[:3] == ["self", "requester", "callback"], \
        changed("Screen._push_result_callback")

    class Switching(App):
        def get_default_screen(self) -> Screen:
            screen = Screen()
            give_empty_result_callback(screen)
            return screen

    app = Switching()
    async with app.run_test() as pilot:
        await app.switch_screen(Screen())  # Textual 8.2 fails here for a default screen without one
        await pilot.pause()
        assert len(app.screen_stack) == 1


async def test_a_widget_being_removed_is_told_from_one_not_built_yet():
    app = Keys()
    async with app.run_test() as pilot:
        label = app.query_one(Label)
        assert not is_being_removed(label) and not is_being_removed(Label("new")), changed("_pruning, _closing")
        await label.remove()
        await pilot.pause()
        assert is_being_removed(label), changed("DOMNode._pruning or MessagePump._closing after remove()")


async def test_a_key_delivered_as_the_driver_does_reaches_the_bindings():
    app = Keys()
    async with app.run_test() as pilot:
        key = Key("k", "k")
        key.set_sender(app)
        deliver_as_driver(app, key)
        await pilot.pause()
        assert app.pressed == 1, changed("App._driver.send_message")


@measured_in_place
class LogMeasuredInPlace(Log):
    """A Log as the app's event log makes one."""


class Logs(App):
    def compose(self) -> ComposeResult:
        yield LogMeasuredInPlace()


async def test_the_log_measures_its_new_lines_in_place():
    app = Logs()
    async with app.run_test(size=(40, 10)) as pilot:
        log = app.query_one(LogMeasuredInPlace)
        workers: list[object] = []
        app.workers.add_worker = lambda *a, **k: workers.append(a)  # type: ignore[method-assign]
        log.write_lines(["short", "a line of thirty characters...", "漢字"])
        await pilot.pause()
        assert workers == [], changed("Log._update_size (a write measured its lines on a worker)")
        assert log.virtual_size.width == 30, changed("Log._update_maximum_width")
    assert log_line_width(LogMeasuredInPlace, "漢字") == 4, changed("Log._process_line")
    assert log_line_width(LogMeasuredInPlace, "a\tb") == len("a\tb".expandtabs()), changed("Log._process_line")
    assert "_update_size" in vars(Log), changed("Log._update_size (the method overridden)")


async def test_the_scroll_range_follows_a_virtual_size_without_a_layout():
    assert list(inspect.signature(Widget._scroll_update).parameters) == ["self", "virtual_size"], \
        changed("Widget._scroll_update")
    app = Logs()
    async with app.run_test(size=(40, 10)) as pilot:
        log = app.query_one(LogMeasuredInPlace)
        log.write_lines([f"line {n}" for n in range(50)])
        await pilot.pause()
        update_scroll_range(log, Size(40, 500))
        assert log.vertical_scrollbar.window_virtual_size == 500, changed("Widget._scroll_update")


def test_the_parse_the_kept_css_wraps_has_its_shape():
    """look_up_parsed_rules (app/screens/css_cache.py's lookup) wraps ``Stylesheet._parse_rules``
    with these parameters; when they change it installs nothing, and the CSS is parsed as usual."""
    assert textual_compat.parse_rules_signature() == textual_compat.PARSE_RULES_PARAMETERS, \
        changed(f"Stylesheet._parse_rules{textual_compat.parse_rules_signature()}")


def test_the_kept_css_wrapper_refuses_a_changed_parse(monkeypatch):
    from textual.css.stylesheet import Stylesheet

    def changed_parse(self, css, read_from, is_default_rules=False, tie_breaker=0, scope="", extra=None):
        raise AssertionError("not called")

    monkeypatch.setattr(Stylesheet, "_parse_rules", changed_parse)
    assert textual_compat.look_up_parsed_rules({}, {}) is None
    assert Stylesheet._parse_rules is changed_parse
