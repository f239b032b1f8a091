"""Step 3: verify the task app through the backend and directly, check the model, and say what to fix.

Three checks run at once, each in its own worker, with the elapsed time ticking: the backend's
``POST /rl/verify_task_app`` (its outcome also tells whether the backend is reachable and
accepts SYNTH_API_KEY), the direct ``/health`` + ``/task_info`` check, and the backend's check
of the model (``POST /rl/verify_model``, or the hosted service's list). Each is bounded by
``check_timeout``. ``app.core.launch.diagnosis`` turns the outcomes into rows and a verdict.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.reactive import var
from textual.timer import Timer
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from app.core.api.errors import ApiError
from app.core.errors import SynthTuiError
from app.core.invocation import as_run
from app.core.launch import service
from app.core.launch.asked_model import asked_model
from app.core.launch.diagnosis import (
    BackendCheck,
    ModelCheck,
    OverallVerdict,
    TaskAppCheck,
    backend_rows,
    diagnostics_payload,
    diagnostics_text,
    model_rows,
    pending_backend_row,
    pending_model_row,
    pending_task_app_row,
    task_app_rows,
)
from app.core.redact import mask_secret, redact
from app.screens.base import FlowScreen
from app.screens.commands import palette_tooltip
from app.screens.dialogs.json_report import JsonReportDialog
from widgets.app_header import AppHeader
from widgets.diagnostics import DiagnosticsTable
from widgets.flow_footer import FlowFooter

WORKER_GROUP = "verification"
PREPARE_WORKER = "Preparing the payload"
BACKEND_WORKER = "Backend verification"
TASK_APP_WORKER = "Task app health check"
MODEL_WORKER = "Model check"


@dataclass(frozen=True)
class CheckTarget:
    """What one run of the checks is about; fixed when the payload is prepared."""

    task_url: str
    backend_base: str
    synth_key_hint: str
    env_key_hint: str
    model: str = ""


class VerificationScreen(FlowScreen):
    TITLE = "Verification"
    AUTO_FOCUS = "#verify-scroll"
    # Each check's budget: the launch service's (service.CHECK_TIMEOUT_S), unless a test sets
    # this class attribute to shorten it for every instance.
    CHECK_TIMEOUT_S: ClassVar[float | None] = None
    TICK_S: ClassVar[float] = 0.1

    BINDINGS = [
        Binding("enter", "continue", "Preview payload", id="verify.continue",
                tooltip=palette_tooltip("Verification: preview the payload", "Continue when the checks passed")),
        # Enter's other face once the checks failed: it only says why, so the footer does not
        # offer it (check_action shows the one that applies; the help lists it).
        Binding("enter", "blocked", "Say why it cannot go on", id="verify.blocked", show=False),
        Binding("r", "retry", "Retry", id="verify.retry",
                tooltip=palette_tooltip("Verification: retry",
                                        "Run the backend verification, the health check and the model check again")),
        Binding("d", "diagnostics", "Diagnostics", id="verify.diagnostics",
                tooltip=palette_tooltip("Verification: full diagnostics", "Show and copy everything the checks saw")),
        Binding("b,escape", "back", "Back to env", id="verify.back",
                tooltip=palette_tooltip("Verification: back to env review", "Edit the .env values")),
    ]

    # The clock behind elapsed times and latencies; snapshot tests fix it.
    clock = staticmethod(time.monotonic)

    # The checks' state; any change redraws the rows and the verdict (the ticker redraws the
    # elapsed times in between).
    target: var[CheckTarget | None] = var(None)
    setup_problem: var[SynthTuiError | None] = var(None)
    backend_check: var[BackendCheck | None] = var(None)
    task_app_check: var[TaskAppCheck | None] = var(None)
    model_check: var[ModelCheck | None] = var(None)

    def __init__(self, *, check_timeout: float | None = None) -> None:
        super().__init__()
        self.check_timeout = service.check_timeout(check_timeout or self.CHECK_TIMEOUT_S)
        self._checks_started = 0.0
        self._ticker: Timer | None = None
        # Each retry is a new run; a result from an older run is dropped, never shown as current.
        self._run = 0
        self._failed_shown = False

    def compose(self) -> ComposeResult:
        yield AppHeader()
        yield Static(id="verify-target", classes="flow-header")
        with VerticalScroll(id="verify-scroll", can_focus=True):
            yield DiagnosticsTable(id="verify-table")
        yield Static(id="verify-verdict")
        yield FlowFooter()

    def on_mount(self) -> None:
        for name in ("target", "setup_problem", "backend_check", "task_app_check", "model_check"):
            self.watch(self, name, self._show, init=False)
        scroll = self.query_one("#verify-scroll", VerticalScroll)
        for name in ("scroll_y", "virtual_size"):
            self.watch(scroll, name, self._recheck_fold, init=False)

    def on_resize(self) -> None:
        self.call_after_refresh(self._recheck_fold)
        self.action_retry()

    def on_screen_resume(self) -> None:
        """Back from the preview with another task URL or model: what was verified no longer applies."""
        prepared, target = self.session.prepared, self.target
        if target is None or prepared is None:
            return
        changed = [what for what, now, then in (("task URL", prepared.task_url, target.task_url),
                                                 ("model", asked_model(prepared.payload).model, target.model))
                   if now != then]
        if changed:
            self.notify(f"The {' and the '.join(changed)} changed: verifying again.", timeout=4)
            self.action_retry()

    # -- state --------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        if self.setup_problem is not None:
            return False
        return (self.target is None or self.backend_check is None or self.task_app_check is None
                or self.model_check is None)

    @property
    def outcome(self) -> service.CheckOutcome | None:
        if self.backend_check is None or self.task_app_check is None or self.model_check is None:
            return None
        return service.CheckOutcome(self.backend_check, self.task_app_check, self.model_check)

    @property
    def verdict(self) -> OverallVerdict | None:
        outcome = self.outcome
        return outcome.verdict if outcome is not None else None

    # -- workers ------------------------------------------------------------------------

    def action_retry(self) -> None:
        """(Re)start the checks; an exclusive worker cancels a run still in flight."""
        self._run += 1
        self.target = None
        self.setup_problem = None
        self.backend_check = None
        self.task_app_check = None
        self.model_check = None
        # The coroutine is made when the worker starts: one replaced first is never left unawaited.
        self.run_worker(partial(self._prepare_then_check, self._run),  # type: ignore[arg-type]  # Textual's overloads infer Never
                        name=PREPARE_WORKER, group=WORKER_GROUP,
                        exclusive=True, exit_on_error=False)
        if self._ticker is None:
            self._ticker = self.set_interval(self.TICK_S, self._show)
        else:
            self._ticker.resume()
        self._show()

    async def _prepare_then_check(self, run: int) -> None:
        try:
            prepared = await asyncio.to_thread(self.session.prepare)
            secrets = self.session.secrets()
        except SynthTuiError as exc:  # a bad config or missing keys: explained in place
            if run == self._run:
                self.setup_problem = exc
            return
        if run != self._run:
            return
        # Started before the target is set: setting it draws the pending rows, with their elapsed time.
        self._checks_started = self.clock()
        self.target = CheckTarget(prepared.task_url, self.session.backend_base,
                                  mask_secret(self.session.synth_api_key()),
                                  mask_secret(secrets.get("ENVIRONMENT_API_KEY")),
                                  asked_model(prepared.payload).model)
        self.run_worker(self._verify_with_backend(run, self.target), name=BACKEND_WORKER, group=WORKER_GROUP,
                        exit_on_error=False)
        self.run_worker(self._check_task_app(run, self.target), name=TASK_APP_WORKER, group=WORKER_GROUP,
                        exit_on_error=False)
        self.run_worker(self._check_model(run), name=MODEL_WORKER, group=WORKER_GROUP, exit_on_error=False)

    async def _verify_with_backend(self, run: int, target: CheckTarget) -> None:
        check = await service.check_backend(self.session, timeout=self.check_timeout, clock=self.clock)
        if run == self._run:
            self.backend_check = check

    async def _check_task_app(self, run: int, target: CheckTarget) -> None:
        check = await service.check_task_app(self.session, timeout=self.check_timeout, clock=self.clock)
        if run == self._run:
            self.task_app_check = check

    async def _check_model(self, run: int) -> None:
        check = await service.check_model(self.session, timeout=self.check_timeout, clock=self.clock)
        if run == self._run:
            self.model_check = check

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A check that crashed still ends (FlowScreen shows the error): no endless 'verifying…'."""
        if event.state is not WorkerState.ERROR or event.worker.group != WORKER_GROUP:
            return
        error = event.worker.error
        stopped = f"the check stopped: {type(error).__name__}: {error}"
        if event.worker.name == PREPARE_WORKER:
            self.setup_problem = SynthTuiError(f"Preparing the payload failed: {type(error).__name__}: {error}")
        elif event.worker.name == BACKEND_WORKER and self.target and self.backend_check is None:
            self.backend_check = BackendCheck(self.target.backend_base, self.target.synth_key_hint,
                                              self.check_timeout, error=ApiError(stopped))
        elif event.worker.name == TASK_APP_WORKER and self.target and self.task_app_check is None:
            self.task_app_check = TaskAppCheck(self.target.task_url, self.target.env_key_hint, self.check_timeout,
                                               error=stopped)
        elif event.worker.name == MODEL_WORKER and self.target and self.model_check is None:
            self.model_check = ModelCheck(self.target.model, self.check_timeout, error=ApiError(stopped))

    # -- view ---------------------------------------------------------------------------

    def _show(self) -> None:
        """Redraw the rows (pending ones with their elapsed time) and the verdict."""
        if not self.is_mounted:
            return
        secrets = self.session.secret_values()
        target = self.target
        rows = []
        if target is not None:
            elapsed = self.clock() - self._checks_started
            rows += (backend_rows(self.backend_check) if self.backend_check
                     else [pending_backend_row(target.synth_key_hint, elapsed)])
            rows += (task_app_rows(self.task_app_check) if self.task_app_check
                     else [pending_task_app_row(target.env_key_hint, elapsed)])
            rows += model_rows(self.model_check) if self.model_check else [pending_model_row(target.model, elapsed)]
        self.query_one("#verify-target", Static).update(self._header())
        self.query_one("#verify-table", DiagnosticsTable).show([row.redacted(secrets) for row in rows])
        self._show_verdict()
        if self.failed != self._failed_shown:  # enter previews, or says why not (check_action)
            self._failed_shown = self.failed
            self.refresh_bindings()
        if not self.running and self._ticker is not None:
            self._ticker.pause()
        self._set_exit_code()

    @property
    def failed(self) -> bool:
        """The checks ended and stop the launch (or the payload could not be prepared)."""
        verdict = self.verdict
        return self.setup_problem is not None or (verdict is not None and not verdict.ready)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Enter previews the payload, or, once the checks failed, only says why it cannot
        (the walk: the footer still offered `⏎ Preview payload` then)."""
        if action == "continue":
            return not self.failed
        if action == "blocked":
            return self.failed
        return True

    def _set_exit_code(self) -> None:
        """Quitting here ends with the exit code headless gives for the same checks."""
        outcome = self.outcome
        if self.setup_problem is not None:
            self.flow_app.exit_code = self.setup_problem.exit_code
        elif outcome is not None:
            self.flow_app.exit_code = outcome.exit_code

    def _header(self) -> Content:
        step = ("Step 3 of 4 · ", "$text-muted")
        if self.target is None:
            return Content.assemble(step, ("Verify the task app", "bold"), " · preparing the payload…")
        return Content.assemble(step, ("Verify the task app", "bold"), " ", self.target.task_url,
                                (" through the backend ", "$text-muted"), self.target.backend_base)

    def _show_verdict(self) -> None:
        secrets = self.session.secret_values()
        parts = [_redacted(part, secrets) for part in self._verdict_parts()]
        self.query_one("#verify-verdict", Static).update(Content.assemble(*parts))

    def _verdict_parts(self) -> list[str | tuple[str, str]]:
        """The one place that says what to do next: ready, still checking, or each problem + fix."""
        failed, fix = ("✗ ", "bold $text-error"), ("  Fix: ", "bold $text-primary")
        keys_hint = ("  r retries · d shows the full diagnostics · b goes back to the .env", "$text-muted")
        problem, verdict = self.setup_problem, self.verdict
        if problem is not None:
            parts: list[str | tuple[str, str]] = [failed, ("Cannot prepare the payload: ", "bold"), problem.message]
            if problem.hint:
                parts += ["\n", fix, problem.hint]
            return [*parts, "\n", keys_hint]
        if verdict is None:
            done = sum(check is not None for check in (self.backend_check, self.task_app_check, self.model_check))
            return [(f"Checking… {done} of 3 done.", "$text-warning"),
                    (f" Each check gives up after {self.check_timeout:g} s · r restarts · b goes back",
                     "$text-muted")]
        if verdict.ready:
            return [("✓ ", "bold $text-success"), (verdict.ready_line(below_fold=self._rows_below_fold()), "bold")]
        parts = []
        for item in verdict.problems:
            parts += [failed, item.message, "\n"]
            if item.fix:
                parts += [fix, item.fix, "\n"]
        return [*parts, keys_hint]

    def _rows_below_fold(self) -> bool:
        """The rows go on below what is in view (the model's `!` rows come last)."""
        scroll = self.query_one("#verify-scroll", VerticalScroll)
        return scroll.scroll_y < scroll.max_scroll_y

    def _recheck_fold(self, *_: object) -> None:
        """After a layout or a scroll: the ready line's "scroll ↓" follows what is in view."""
        if self.is_mounted and (verdict := self.verdict) is not None and verdict.ready and verdict.warnings:
            self._show_verdict()

    # -- actions ------------------------------------------------------------------------

    def holds_key(self, key: str) -> bool:
        # Enter typed while the checks run continues once they end (when they pass); r, b and
        # esc act at once.
        return self.running and self.setup_problem is None and key == "enter"

    def action_continue(self) -> None:
        if self.setup_problem is not None:
            self.notify(f"Cannot continue: {self.setup_problem.message}", severity="error")
        elif self.running:
            self.notify("The checks are still running: wait for them, or press r to restart them.",
                        severity="warning")
        elif (verdict := self.verdict) is not None and not verdict.ready:
            self.notify(f"Cannot continue: {verdict.headline}", severity="error", timeout=6)
        else:
            self.session.verified_task_url = self.target.task_url if self.target else None
            self.session.verified_model = self.target.model if self.target else None
            self.flow_app.go_to_preview()

    def action_blocked(self) -> None:
        self.action_continue()  # refused, with the reason (the footer no longer offers enter)

    def action_back(self) -> None:
        self.flow_app.go_back("verify")

    def action_diagnostics(self) -> None:
        payload = diagnostics_payload(self.backend_check, self.task_app_check, self.verdict, self.model_check)
        if self.setup_problem is not None:
            payload["setup_problem"] = {"message": self.setup_problem.message, "hint": self.setup_problem.hint}
        if self.running:
            payload["note"] = "checks still running"
        text = diagnostics_text(payload, self.session.secret_values())
        self.app.push_screen(JsonReportDialog("Verification diagnostics (secrets masked)", text,
                                             copied_message="Diagnostics copied"))



def _redacted(part: str | tuple[str, str], secrets: list[str]) -> str | tuple[str, str]:
    """Messages can quote what a server sent back; no full secret reaches the screen. A command
    they name is named as it was run (app/core/invocation.py)."""
    if isinstance(part, tuple):
        return as_run(redact(part[0], secrets)), part[1]
    return as_run(redact(part, secrets))
