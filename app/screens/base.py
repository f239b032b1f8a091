"""The base of every flow screen: a title, a footer, and worker failures sent to one place."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from textual.binding import Binding, BindingType

from widgets.build_guard import BuildGuard
from widgets.hollow import Hollow
from widgets.worker_errors import ReportsWorkerFailures

if TYPE_CHECKING:
    from app.core.launch.session import LaunchSession
    from app.tui import SynthTuiApp


class FlowScreen(Hollow, ReportsWorkerFailures, BuildGuard):
    """Workers on these screens use ``exit_on_error=False``; their failures go to the app
    (``SynthTuiApp.on_worker_failed``) instead of ending it. The screen's own background rows
    are drawn once (widgets/hollow.py)."""

    TITLE: ClassVar[str] = ""
    # The help key first in every flow screen's footer: a footer too narrow for all its keys
    # (80 columns) cuts the last ones, and the app's own keys come last (docs/product.md#keys).
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f1,question_mark", "app.help", "Help", id="flow.help", key_display="?"),
    ]

    @property
    def flow_app(self) -> SynthTuiApp:
        return self.app  # type: ignore[return-value]

    @property
    def session(self) -> LaunchSession:
        return self.flow_app.session

    def on_mount(self) -> None:
        if self.TITLE:
            # Textual reads Screen.TITLE as the header's title; keep the app's name there.
            self.title = self.app.title
            self.sub_title = self.TITLE

    def leave(self) -> None:
        """q or Esc on a pushed screen: back to the screen below; only the first screen quits."""
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()
        else:
            self.request_quit()

    def holds_key(self, key: str) -> bool:
        """Whether a key typed now waits (SynthTuiApp.on_event) until this screen has decided
        where the flow goes: a step busy choosing, reading or checking takes it when done, or
        the next screen does. Keys typed after a held one wait behind it, in order."""
        return False

    def request_quit(self) -> None:
        """Ctrl+Q or the palette's Quit on this screen: the flow screen below decides (a
        dashboard under its rollout inspector asks first while its job runs); the first quits."""
        screen = self._flow_screen_below()
        if screen is not None:
            screen.request_quit()
        else:
            self.flow_app.quit_flow()

    def request_interrupt(self) -> None:
        """Ctrl+C on this screen (SynthTuiApp.action_help_quit): decided as a quit is, by the
        flow screen below; the first ends the app with 130 (SynthTuiApp.interrupt_flow)."""
        screen = self._flow_screen_below()
        if screen is not None:
            screen.request_interrupt()
        else:
            self.flow_app.interrupt_flow()

    def _flow_screen_below(self) -> FlowScreen | None:
        stack = self.app.screen_stack
        below = stack[: stack.index(self)] if self in stack else []
        return next((s for s in reversed(below) if isinstance(s, FlowScreen)), None)
