"""Step 4: the exact job payload, the overrides, and the submit the user confirms.

Nothing is sent before ``s``. The JSON shown is the JSON sent: the screen keeps the prepared
job it displays and submits that one. Every submit of this session carries the session's
Idempotency-Key, so retrying after a lost answer can never create a second job.
"""

from __future__ import annotations

import asyncio
import json
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.reactive import var
from textual.timer import Timer
from textual.widgets import Button, Input, Label, Static, Switch

from app.core.api.errors import ApiError, ConflictError, PayloadRefused
from app.core.api.results import CreateResult
from app.core.errors import SynthTuiError
from app.core.invocation import as_run
from app.core.launch import service
from app.core.launch.asked_model import asked_model
from app.core.launch.steps import PreparedJob
from app.core.redact import redact
from app.core.runs.jobs import payload_model
from app.screens.base import FlowScreen
from app.screens.commands import palette_tooltip
from widgets.app_header import AppHeader
from widgets.json_view import json_highlighted
from widgets.steady_footer import SteadyFooter

PREPARE_WORKER = "Rebuilding the payload"
SUBMIT_WORKER = "Submitting the job"


class PayloadPreviewScreen(FlowScreen):
    TITLE = "Payload preview"
    # Start on the JSON, not in an override field, so that s submits instead of typing an "s".
    AUTO_FOCUS = "#payload-json-scroll"
    RESPONSE_PREVIEW_CHARS: ClassVar[int] = 400
    # Typing in an override rebuilds the payload once the user pauses, not on every key.
    REBUILD_DELAY_S: ClassVar[float] = 0.3

    BINDINGS = [
        Binding("s,ctrl+s", "submit", "Submit", id="preview.submit", key_display="s",
                tooltip=palette_tooltip("Preview: submit the job", "POST /rl/jobs with the payload shown")),
        # s's other face once the task URL or the model changed since verification: nothing is
        # sent unverified; s goes back to verify them first (check_action shows the one that
        # applies; docs/product.md#payload-preview).
        Binding("s,ctrl+s", "reverify", "Verify again", id="preview.reverify", key_display="s",
                tooltip=palette_tooltip("Preview: verify the change", "Back to verification for the new task URL "
                                        "or model; nothing is sent")),
        Binding("x", "toggle_response", "Full response", id="preview.expand",
                tooltip=palette_tooltip("Preview: expand or collapse the response", "Show the backend's whole answer")),
        Binding("escape", "back", "Back", id="preview.back",
                tooltip=palette_tooltip("Preview: back to verification", "Leave without sending anything")),
    ]

    # The screen's state; any change redraws the status, the problem line and the response.
    prepared: var[PreparedJob | None] = var(None)  # what is shown, and so what a submit sends
    problem: var[SynthTuiError | None] = var(None)
    rebuilding = var(True)
    submitting = var(False)
    submit_error: var[SynthTuiError | None] = var(None)
    response: var[CreateResult | None] = var(None)
    response_expanded = var(False)
    STATE = ("prepared", "problem", "rebuilding", "submitting", "submit_error", "response", "response_expanded")

    def __init__(self) -> None:
        super().__init__()
        self.shown_json = ""
        self._generation = 0
        self._rebuild_timer: Timer | None = None
        self._prefilled = False

    def compose(self) -> ComposeResult:
        overrides = self.session.overrides
        yield AppHeader()
        with Vertical(id="payload-facts", classes="flow-header"):
            yield Static(Content.assemble(("Step 4 of 4 · ", "$text-muted"), ("Review the job, then submit", "bold"),
                                          (" · nothing is sent before s", "$text-muted")))
            yield Static(id="payload-target")
            yield Static(Content.assemble(("A retry uses the same Idempotency-Key", "bold"),
                                          ", so it can never create a second job."))
        with Vertical(id="payload-overrides"):
            with Horizontal(classes="override-row"):
                yield Label("Model", classes="override-label")
                yield Input(overrides.model or "", placeholder="from the config", compact=True, id="override-model")
            with Horizontal(classes="override-row"):
                yield Label("Task URL", classes="override-label")
                yield Input(overrides.task_url or "", placeholder="from TASK_APP_URL or the config", compact=True,
                            id="override-task-url")
            with Horizontal(classes="override-row"):
                yield Label("Experimental", classes="override-label")
                # The text first, in the column where the other rows' values start (the walk).
                yield Static(id="override-experimental-note", classes="override-note muted")
                yield Switch(bool(overrides.allow_experimental), id="override-experimental")
        yield Static(id="payload-problem")
        with VerticalScroll(id="payload-json-scroll", can_focus=True) as scroll:
            scroll.border_title = "POST /rl/jobs"
            yield Static(id="payload-json")
        with Vertical(id="payload-submit-area"):
            with Horizontal(id="payload-submit-row"):
                yield Button("Submit (s)", variant="primary", compact=True, id="payload-submit")
                yield Static(id="payload-status")
            with VerticalScroll(id="payload-response-scroll", classes="-hidden"):
                yield Static(id="payload-response", markup=False)
        yield SteadyFooter()

    def on_mount(self) -> None:
        session = self.session
        self.query_one("#payload-target", Static).update(Content.assemble(
            ("Backend ", "$text-muted"), session.backend_base, ("  ·  Idempotency-Key ", "$text-muted"),
            (session.idempotency_key, "bold")))
        self._show_experimental_note()
        for name in self.STATE:
            self.watch(self, name, self._show_state, init=False)
        self._show_state()
        self._rebuild()

    def watch_prepared(self, prepared: PreparedJob | None) -> None:
        if prepared is not None:
            self._show_payload(prepared)

    # -- overrides ----------------------------------------------------------------------

    @on(Input.Changed, "#override-model")
    def _model_changed(self, event: Input.Changed) -> None:
        if self.session.override(model=event.value.strip() or None):
            self._schedule_rebuild()

    @on(Input.Changed, "#override-task-url")
    def _task_url_changed(self, event: Input.Changed) -> None:
        value = event.value.strip() or None
        shown = self.prepared.task_url if self.prepared else None
        if self.session.overrides.task_url is None and value == shown:
            return  # the prefill
        if self.session.override(task_url=value):
            self._schedule_rebuild()

    @on(Switch.Changed, "#override-experimental")
    def _experimental_changed(self, event: Switch.Changed) -> None:
        self._show_experimental_note()
        if event.value != bool(self.session.overrides.allow_experimental):
            self.session.override(allow_experimental=event.value)
            self._schedule_rebuild()

    def _show_experimental_note(self) -> None:
        # A one-line switch shows its state only by colour; say it in words too.
        allowed = self.query_one("#override-experimental", Switch).value
        self.query_one("#override-experimental-note", Static).update(
            "on: experimental models allowed" if allowed else "off: experimental models are refused")

    def _schedule_rebuild(self) -> None:
        self._generation += 1
        self.rebuilding = True
        if self._rebuild_timer is not None:
            self._rebuild_timer.stop()
        self._rebuild_timer = self.set_timer(self.REBUILD_DELAY_S, self._rebuild)

    def _rebuild(self) -> None:
        self.run_worker(self._prepare(self._generation), name=PREPARE_WORKER, group="payload-prepare",
                        exit_on_error=False)

    async def _prepare(self, generation: int) -> None:
        try:
            prepared: PreparedJob | None = await asyncio.to_thread(self.session.prepare)
            problem = None
        except SynthTuiError as exc:  # an unsupported model, a bad URL…: shown inline, submit disabled
            prepared, problem = None, exc
        if generation != self._generation:
            return  # the user changed something meanwhile; the newer rebuild decides
        self.prepared, self.problem, self.rebuilding = prepared, problem, False

    # -- submit -------------------------------------------------------------------------

    @on(Button.Pressed, "#payload-submit")
    def _submit_pressed(self) -> None:
        self.action_submit()

    def holds_key(self, key: str) -> bool:
        return self.rebuilding and key == "s"  # typed while the payload is built: submits it once built

    def unverified_changes(self) -> list[str]:
        """What the payload shown changed since verification passed (the task URL, the model),
        each with the value verified; empty when nothing was verified in this session."""
        prepared, session = self.prepared, self.session
        if prepared is None or session.verified_task_url is None:
            return []
        changes = []
        if prepared.task_url != session.verified_task_url:
            changes.append(f"the task URL (verified: {session.verified_task_url})")
        model = asked_model(prepared.payload).model
        if session.verified_model is not None and model != session.verified_model:
            changes.append(f"the model (verified: {session.verified_model})")
        return changes

    def action_reverify(self) -> None:
        """A paid job is never sent unverified by one key: back to the checks, which run again
        for what changed; enter there comes back here to submit."""
        changes = self.unverified_changes()
        self.notify(f"{_sentence_start(' and '.join(changes))} changed since verification: nothing was sent; "
                    "verifying again (enter there brings you back to submit).", timeout=6, markup=False)
        self.flow_app.go_back("preview")

    def action_submit(self) -> None:
        if self.unverified_changes() and not self.submitting and not self.rebuilding:
            self.action_reverify()  # the button, as s (check_action)
        elif self.submitting:
            self.notify("Already submitting…", severity="warning")
        elif self.rebuilding:
            self.notify("The payload is being rebuilt with your change; submit again in a moment.",
                        severity="warning")
        elif self.problem is not None or self.prepared is None:
            message = self.problem.message if self.problem else "there is no payload yet"
            self.notify(f"Cannot submit: {message}", severity="error", timeout=6)
        else:
            self.submitting = True
            self.submit_error = None
            self.run_worker(self._submit(self.prepared), name=SUBMIT_WORKER, group="payload-submit",
                            exclusive=True, exit_on_error=False)

    async def _submit(self, prepared: PreparedJob) -> None:
        """The launch service's submit: the session's Idempotency-Key, the one rule for what
        counts as created, the run history; an answer that is not a created job stays here."""
        session = self.session
        config_path = str(session.config_path) if session.config_path else None
        try:
            submitted = await service.submit(session, prepared.payload, config_path=config_path)
        except service.JobCreationFailed as exc:
            self.submitting, self.submit_error = False, exc
            self.response = exc.result
            self.flow_app.exit_code = exc.exit_code  # quitting now ends as headless does
            return
        except SynthTuiError as exc:
            self.submitting, self.submit_error, self.response = False, exc, None
            self.flow_app.exit_code = exc.exit_code
            self.flow_app.show_error("Submit failed", exc)
            return
        self.submitting, self.response = False, submitted.result
        self.flow_app.go_to_dashboard(submitted.job, history_warning=submitted.history_warning)

    def action_toggle_response(self) -> None:  # only once there is an answer (check_action)
        self.response_expanded = not self.response_expanded

    def action_back(self) -> None:
        self.flow_app.go_back("preview")

    # -- view ---------------------------------------------------------------------------

    def _show_payload(self, prepared: PreparedJob) -> None:
        secrets = self.session.secret_values()
        self.shown_json = redact(json.dumps(prepared.payload, indent=2), secrets)
        self.query_one("#payload-json", Static).update(json_highlighted(self.shown_json))
        model_input = self.query_one("#override-model", Input)
        model_input.placeholder = f"from the config: {payload_model(prepared.payload) or '?'}"
        if not self._prefilled:  # once: later, an empty field is the user's own doing
            self._prefilled = True
            url_input = self.query_one("#override-task-url", Input)
            if not url_input.value:
                url_input.value = prepared.task_url

    def _response_text(self) -> tuple[int | None, str] | None:
        """(status, body) of the last answer: the create result, or the failed attempt's body."""
        if self.response is not None:
            return self.response.status, self.response.response.preview(10**7)
        error = self.submit_error
        if isinstance(error, ApiError) and error.status is not None:
            body = error.body
            text = json.dumps(body, indent=2) if isinstance(body, (dict, list)) else str(body or "(empty body)")
            return error.status, text
        return None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # x expands an answer: none before a submit (the walk), so not in the footer until one came.
        if action == "toggle_response":
            return self._response_text() is not None
        # s submits, or verifies again what changed since verification (the walk: it submitted).
        if action == "submit":
            return not self.unverified_changes()
        if action == "reverify":
            return bool(self.unverified_changes())
        return True

    def _show_state(self) -> None:
        self.refresh_bindings()  # x comes with the first answer (check_action)
        secrets = self.session.secret_values()
        self._show_problem(secrets)
        submit_ready = not (self.rebuilding or self.submitting or self.problem or self.prepared is None)
        button = self.query_one("#payload-submit", Button)
        button.disabled = not submit_ready
        button.label = "Verify again (s)" if self.unverified_changes() else "Submit (s)"
        self.query_one("#payload-overrides").disabled = self.submitting
        self.query_one("#payload-status", Static).update(_redacted_content(self._status_parts(), secrets))
        response = self._response_text()
        scroll = self.query_one("#payload-response-scroll")
        scroll.set_class(response is None, "-hidden")
        if response is not None:
            code, text = response
            text = redact(text, secrets)
            limit = len(text) if self.response_expanded else self.RESPONSE_PREVIEW_CHARS
            more = len(text) - limit
            tail = f"\n… {more} more characters: x shows all" if more > 0 else ""
            self.query_one("#payload-response", Static).update(f"Response {code}:\n{text[:limit]}{tail}")
            scroll.set_class(self.response_expanded, "expanded")

    def _show_problem(self, secrets: list[str]) -> None:
        parts: list[str | tuple[str, str]] = []
        if self.problem is not None:
            parts = [("✗ ", "bold $text-error"), self.problem.message]
            if self.problem.hint:
                parts += ["\n", ("  Fix: ", "bold $text-primary"), self.problem.hint]
        elif changes := self.unverified_changes():
            parts = [("! ", "bold $text-warning"), f"{_sentence_start(' and '.join(changes))} changed since "
                     "verification: s verifies again before anything is sent."]
        line = self.query_one("#payload-problem", Static)
        line.set_class(not parts, "-hidden")
        line.update(_redacted_content(parts, secrets))

    def _status_parts(self) -> list[str | tuple[str, str]]:
        key = ("same Idempotency-Key", "bold")
        if self.submitting:
            return [f"Submitting… (Idempotency-Key {self.session.idempotency_key})"]
        if self.rebuilding:
            return [("Rebuilding the payload…", "$text-warning")]
        if self.response is not None and service.created(self.response):
            return [("✓ ", "bold $text-success"), f"Job {self.response.job_id} created."]
        if self.response is not None and not self.response.job_id:
            return [("✗ The backend answered without a job id", "bold $text-error"),
                    f" (HTTP {self.response.status}), so there is no job to watch. s retries with the ", key,
                    "."]
        if self.response is not None:
            return [("✗ Not created: ", "bold $text-error"),
                    f"the backend answered HTTP {self.response.status} (job {self.response.job_id}), not 200 or 201. "
                    "s retries with the ", key, ", which gives back a job the backend did create."]
        if isinstance(self.submit_error, ConflictError):
            # The key already names a job with the payload as it was before an override changed it.
            return [("✗ Submit failed: ", "bold $text-error"),
                    as_run("the backend already has a job for this Idempotency-Key with another payload, so an "
                           "earlier submit reached it; nothing new was created. Check synth-tui history or the "
                           "backend's jobs.")]
        if isinstance(self.submit_error, PayloadRefused):
            # The same payload is refused again: no retry is offered, the config is what to fix.
            return [("✗ Refused: ", "bold $text-error"), self.submit_error.message, " ",
                    self.submit_error.hint or ""]
        if self.submit_error is not None:
            return [("✗ Submit failed: ", "bold $text-error"), self.submit_error.message, " s retries with the ",
                    key, ", so it can never create a second job."]
        if self.problem is not None:
            return [("Fix the override above to submit.", "$text-muted")]
        if self.unverified_changes():
            return [("Nothing has been sent yet. ", "$text-muted"), "s verifies the change first."]
        return [("Nothing has been sent yet. ", "$text-muted"), "s submits this payload."]


def _sentence_start(text: str) -> str:
    """`text` with its first letter upper case, the rest as it is (a model id keeps its case)."""
    return text[:1].upper() + text[1:]


def _redacted_content(parts: list[str | tuple[str, str]], secrets: list[str]) -> Content:
    """Styled text from (text, style) parts; a server's message may quote a key, so redact each."""
    return Content.assemble(*(redact(p, secrets) if isinstance(p, str) else (redact(p[0], secrets), p[1])
                              for p in parts))
