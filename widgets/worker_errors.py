"""Every worker's failure takes one path to the user: the node that ran the worker posts a
``WorkerFailed`` message, which bubbles up to the app (``SynthTuiApp.on_worker_failed``), the
one place that decides between a toast and a dialog (docs/architecture.md#threads-and-workers).

Textual posts ``Worker.StateChanged`` to the worker's node only (it does not bubble), so a
widget or dialog whose worker failed would otherwise tell nobody."""

from __future__ import annotations

from textual.message import Message
from textual.message_pump import MessagePump
from textual.worker import Worker, WorkerState


class WorkerFailed(Message):
    """A worker of the sender failed with ``error`` (bubbles to the app)."""

    def __init__(self, worker: Worker, error: BaseException) -> None:
        super().__init__()
        self.worker = worker
        self.error = error


class ReportsWorkerFailures(MessagePump):
    """Mixed into a screen or widget that runs workers (``exit_on_error=False``): their
    failures go to the app. Textual calls each class's handler in the MRO, so a subclass that
    handles ``Worker.StateChanged`` too (to show the failure in place) need not call this one."""

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            self.post_message(WorkerFailed(event.worker, event.worker.error))
