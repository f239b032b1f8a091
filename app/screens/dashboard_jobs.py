"""The dashboard's keys that act on its job through the backend: cancel (c) and rerun (r),
on the steps the jobs view shares (app/screens/job_actions.py). A mixin of the
:class:`DashboardScreen`, cut from dashboard.py (docs/architecture.md#where-things-live).
"""

from __future__ import annotations

import asyncio
from typing import Any

from textual import events, on, work
from textual.screen import Screen

from app.core.runs.compare import ComparedRun
from app.core.runs.jobs import JobContext
from app.core.runs.series import MetricStore
from app.screens import job_actions
from app.screens.base import FlowScreen
from app.screens.dialogs.overlay_picker import MAX_OVERLAYS
from widgets.metrics_grid import MetricsGrid


class JobKeys(FlowScreen):
    """Mixed into the dashboard, which has ``job``, ``store``, ``ended`` and a MetricsGrid."""

    job: JobContext
    store: MetricStore
    status: str
    ended: bool
    back_to_history: bool
    _asking_rerun = False  # r reads the payload from the run history before it asks
    _resumed: asyncio.Event  # set while this screen is the active one (_until_active)

    def _needs_backend(self, what: str) -> bool:
        """Whether the backend can be asked (a read-only dashboard says why not)."""
        return True

    def action_cancel_job(self) -> None:
        if not self._needs_backend("Cancel"):
            return
        if self.ended:
            self.notify(f"The job has already ended ({self.status}).", severity="warning")
            return
        job_actions.confirm_cancel(self, self.job.job_id, self._cancel)

    @work(exclusive=True, group="cancel", exit_on_error=False, name="Cancel")
    async def _cancel(self) -> None:
        self.notify(f"Cancel requested: {await job_actions.request_cancel(self, self.job.job_id)}")

    def action_rerun(self) -> None:
        if not self._needs_backend("Rerun"):
            return
        self._asking_rerun = True
        self._ask_rerun()

    def holds_key(self, key: str) -> bool:
        """Keys typed after r (its question's y) wait until the question is asked."""
        return self._asking_rerun or super().holds_key(key)

    @work(exclusive=True, group="rerun-ask", exit_on_error=False, name="Rerun")
    async def _ask_rerun(self) -> None:
        try:
            # The run history is a SQLite file: read off the UI thread.
            payload = self.job.payload or await asyncio.to_thread(job_actions.payload_from_history,
                                                                     self.job.job_id)
        finally:
            self._asking_rerun = False
        self.flow_app.tell_history_repairs()
        if payload is None:
            self.notify("No payload is known for this job (it was not launched from this machine).",
                        severity="error")
            return
        self.flow_app.confirm(f"Rerun job {self.job.job_id}?", lambda: self._rerun(payload), label="Rerun",
                              detail="The same payload is submitted with a new Idempotency-Key; "
                                     "the old job stays in the history.")

    def rerun_screen(self, context: JobContext, overlays: list[ComparedRun]) -> Screen[Any]:
        """The dashboard of the rerun, with the chart keys' settings (the dashboard makes its own kind)."""
        raise NotImplementedError

    @work(exclusive=True, group="rerun", exit_on_error=False, name="Rerun")
    async def _rerun(self, payload: dict[str, Any]) -> None:
        context = await job_actions.submit_rerun(self, payload, rerun_of=self.job.job_id,
                                                 config_path=self.job.config_path,
                                                 submitted=lambda job_id: f"Rerun submitted as {job_id}")
        if context is None:
            return
        # A dialog opened meanwhile (a quit question) is answered first: switching now would
        # replace the dialog, not this dashboard.
        await self._until_active()
        # The run it repeats stays on the charts, dimmed, beside the new one.
        overlays = [ComparedRun(self.job.job_id, self.store), *self.query_one(MetricsGrid).overlays][:MAX_OVERLAYS]
        self.app.switch_screen(self.rerun_screen(context, overlays))

    async def _until_active(self) -> None:
        """Return once this screen is the app's active screen (now, or when it is resumed)."""
        while not self.is_active:
            self._resumed.clear()
            await self._resumed.wait()

    @on(events.ScreenResume)
    def _screen_resumed(self) -> None:
        self._resumed.set()

    @on(events.ScreenSuspend)
    def _screen_suspended(self) -> None:
        self._resumed.clear()
