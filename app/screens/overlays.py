"""The dashboard's overlays of earlier runs (docs/product.md#compare-runs): choose them (o),
read their metrics from the backend, draw them dimmed on the metrics grid."""

from __future__ import annotations

import asyncio

from textual import work

from app.core.api.wire import check_job_id
from app.core.runs.compare import earlier_runs, read_runs
from app.core.runs.history import RunRecord
from app.core.runs.history_refresh import needs_refresh, refresh_statuses
from app.core.runs.jobs import JobContext
from app.screens.base import FlowScreen
from app.screens.dialogs.overlay_picker import OverlayPickerDialog
from widgets.metrics_grid import MetricsGrid


class OverlayActions(FlowScreen):
    """Mixed into the dashboard, which has ``job`` and a MetricsGrid."""

    job: JobContext
    # From `o` until its dialog is shown: keys typed meanwhile (a job id) wait for the dialog.
    _opening_overlay_dialog = False

    def action_overlay(self) -> None:
        if self._needs_backend("Overlay"):
            self._opening_overlay_dialog = True
            self._choose_overlays()

    def holds_key(self, key: str) -> bool:
        return self._opening_overlay_dialog or super().holds_key(key)

    def _needs_backend(self, what: str) -> bool:
        """Whether the backend can be asked (a read-only dashboard says why not)."""
        return True

    @work(exclusive=True, group="overlay", exit_on_error=False, name="Overlay")
    async def _choose_overlays(self) -> None:
        grid = self.query_one(MetricsGrid)
        try:
            earlier = await asyncio.to_thread(earlier_runs, self.job.config_path, self.job.job_id,
                                              self.session.backend_base)
        finally:
            # The dialog is on the stack as soon as it is pushed: the keys wait for it to mount.
            self._opening_overlay_dialog = False
        dialog = OverlayPickerDialog(earlier, [run.job_id for run in grid.overlays])
        if any(map(needs_refresh, earlier)):
            self._refresh_statuses(dialog, earlier)
        chosen = await self.app.push_screen_wait(dialog)
        if chosen is None:
            return
        if self.job.job_id in chosen:
            chosen = [job_id for job_id in chosen if job_id != self.job.job_id]
            self.notify("This job is the live one; it is not overlaid on itself.", severity="warning")
        await self._read_overlays(chosen)

    @work(exclusive=True, group="overlay-statuses", exit_on_error=False, name="Overlay statuses")
    async def _refresh_statuses(self, dialog: OverlayPickerDialog, earlier: list[RunRecord]) -> None:
        """The dialog lists the statuses the history last recorded; a job not seen to end is asked
        about (as `synth-tui history` does, which also records the answer), and its row shows
        what the backend says. A backend that does not answer leaves the row as it was."""
        async for answer in refresh_statuses(self.session, earlier):
            if answer.status is not None:
                dialog.show_status(answer.job_id, answer.status)

    @work(exclusive=True, group="overlay", exit_on_error=False, name="Overlay")
    async def _overlay(self, job_ids: list[str]) -> None:
        await self._read_overlays(job_ids)

    async def _read_overlays(self, chosen: list[str]) -> None:
        grid = self.query_one(MetricsGrid)
        have = {run.job_id: run for run in grid.overlays}
        missing = [job_id for job_id in chosen if job_id not in have]
        for job_id in missing:
            check_job_id(job_id)
        if missing:
            self.notify(f"Reading the metrics of {', '.join(missing)}…")
            async with self.session.client() as client:
                have.update({run.job_id: run for run in await read_runs(client, missing)})
        runs = [have[job_id] for job_id in chosen]
        grid.set_overlays(runs)
        if any(run.truncated for run in runs):
            self.notify("A run has more points than are read for an overlay: its start is shown.",
                        severity="warning")

