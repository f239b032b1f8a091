"""The guard every screen of the app has against being closed as it opens."""

from __future__ import annotations

from textual import events, on
from textual.binding import Binding
from textual.screen import ModalScreen, Screen

from widgets.compat.textual_compat import is_being_removed
from widgets.steady_footer import footer_rows_classes


class BuildGuard(Screen):
    """A screen removed before its widgets were mounted (closed as it opened: a key typed ahead,
    a browser tab closed at once, a quit in the first second) handles no event but its unmount:
    its mount, resume and resize handlers would look for widgets that never existed and raise
    (docs/architecture.md#threads-and-workers). Textual cancels the screen's workers on unmount.

    A dialog lists it after ModalScreen (``class X(ModalScreen[T], BuildGuard)``): Textual applies
    default CSS by class order, and Screen's, inherited here, would cover ModalScreen's dimmed
    background."""

    # Ctrl+C with text selected copies it (Textual's own screen binding, replaced here); without,
    # it is the app's interrupt. Here because a dialog (a modal screen) hides the app's bindings,
    # and Ctrl+C must do the same over a dialog as under it (docs/product.md#exit-codes).
    BINDINGS = [Binding("ctrl+c", "copy_or_interrupt", "Copy the selection, else quit",
                        id="screen.copy_or_interrupt", show=False)]

    _removed_unbuilt = False

    def action_copy_or_interrupt(self) -> None:
        selection = self.get_selected_text()
        if selection:
            self.app.copy_to_clipboard(selection)
        else:
            self.app.action_help_quit()

    @on(events.Mount)
    def _toasts_as_the_screen_beneath(self) -> None:
        """A dialog's toasts stand where those of the screen it covers do (its footer's rows,
        styles.tcss: ToastRack): Textual draws both screens' toasts, the dimmed ones beneath
        too, and a rack a row off showed each toast twice, over the footer."""
        stack = self.app.screen_stack
        if isinstance(self, ModalScreen) and self in stack and (index := stack.index(self)) > 0:
            self.add_class(*footer_rows_classes(stack[index - 1]))

    async def on_event(self, event: events.Event) -> None:
        # Textual has no public flag for "being removed", and is_mounted is still False for a
        # screen that is merely not built yet.
        if isinstance(event, events.Mount) and is_being_removed(self):
            self._removed_unbuilt = True
        if self._removed_unbuilt and not isinstance(event, events.Unmount):
            return
        await super().on_event(event)
