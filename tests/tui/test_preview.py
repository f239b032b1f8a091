"""The payload preview and submit against a real loopback backend, and its snapshots.

Live tests open the app on the preview step with a FaultyBackend and a TinyTaskApp behind a
.env. Snapshot tests use fixed session values (backend, task URL, Idempotency-Key) and a
fake client, so nothing random reaches an SVG.
"""

from __future__ import annotations

import functools
import json
import socket

import httpx
import pytest
from textual.widgets import Button, Input, Switch

from app.core.api.errors import AuthError
from app.core.api.health import HealthAttempt, HealthReport
from app.core.api.results import ApiResponse, CreateResult, VerifyResult
from app.screens.dashboard import DashboardScreen
from app.screens.dialogs.common import ErrorDialog
from app.screens.env_review import EnvReviewScreen
from app.screens.preview import PayloadPreviewScreen
from app.screens.verification import VerificationScreen
from support.pilot_waits import type_ahead, wait_for, wait_for_screen
from support.screen_text import footer_text, notifications
from widgets.env_table import MaskedEnvTable

ENV_KEY = "env_key_0123456789abcdef0123456789abcdef"
SYNTH_KEY = "sk_test_backend_key_0123456789"
FIXED_BACKEND = "http://127.0.0.1:8000"
FIXED_TASK_URL = "http://127.0.0.1:8001"
SIZE = (120, 36)


# --------------------------------------------------------------------------- setup


@pytest.fixture
def preview_app(flow_app):
    """An app opened on the preview step, with the config and .env chosen as the earlier
    steps would leave the session (see flow_app); the keys are this file's unless given."""
    return functools.partial(flow_app, "preview", synth_key=SYNTH_KEY, env_key=ENV_KEY)


async def preview_ready(pilot) -> PayloadPreviewScreen:
    await wait_for_screen(pilot, PayloadPreviewScreen, "the preview screen")
    screen = pilot.app.screen
    await wait_for(pilot, lambda: not screen.rebuilding, what="the payload")
    await pilot.pause()
    return screen


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def text_of(screen, selector: str) -> str:
    return str(screen.query_one(selector).content)


def create_requests(backend) -> list[tuple[str, str, dict, object]]:
    return [r for r in backend.requests if r[0] == "POST" and r[1] == "/api/rl/jobs"]


def assert_no_secrets(*texts: str) -> None:
    for text in texts:
        assert ENV_KEY not in text and SYNTH_KEY not in text and "sk_wrong_key_0123456789" not in text
        assert "Traceback" not in text


@pytest.fixture
def live(preview_app, faulty_backend, tiny_task_app):
    return preview_app(backend=faulty_backend.url, task_url=tiny_task_app.url)


# --------------------------------------------------------------------------- live


async def test_the_json_shown_is_the_payload_and_nothing_is_sent_before_submit(live, faulty_backend, tiny_task_app):
    async with live.run_test(size=SIZE) as pilot:
        screen = await preview_ready(pilot)
        assert screen.focused is screen.query_one("#payload-json-scroll")  # so s submits, not types
        shown = json.loads(screen.shown_json)
        assert shown == screen.prepared.payload == live.session.prepared.payload
        assert screen.query_one("#payload-json").content.plain == screen.shown_json  # what the pane highlights
        assert shown["data"]["endpoint_base_url"] == tiny_task_app.url
        assert shown["metadata"]["backend_base_url"] == f"{faulty_backend.url}/api"
        facts = text_of(screen, "#payload-target")
        assert f"{faulty_backend.url}/api" in facts and live.session.idempotency_key in facts
        assert "retry uses the same Idempotency-Key" in str(screen.query_one("#payload-facts").children[2].content)
        assert screen.query_one("#override-task-url", Input).value == tiny_task_app.url
        assert create_requests(faulty_backend) == []
        assert_no_secrets(screen.shown_json, facts)


async def test_x_full_response_shows_in_the_footer_only_once_there_is_a_response(live, faulty_backend):
    """The walk: `x Full response` was in the footer before anything was submitted."""
    faulty_backend.create_answer = (200, {"status": "accepted"})
    async with live.run_test(size=SIZE) as pilot:
        screen = await preview_ready(pilot)
        await wait_for(pilot, lambda: "s Submit" in footer_text(live), what="the footer")
        assert "Full response" not in footer_text(live)
        await pilot.press("s")
        await wait_for(pilot, lambda: screen.response is not None, what="the answer")
        await wait_for(pilot, lambda: "x Full response" in footer_text(live), what="x in the footer")


async def test_submit_creates_exactly_one_job_with_the_shown_key(live, faulty_backend):
    async with live.run_test(size=SIZE) as pilot:
        screen = await preview_ready(pilot)
        key = live.session.idempotency_key
        payload = screen.prepared.payload
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(live.screen, DashboardScreen), what="the dashboard")
        assert live.session.job_id == "job_0001"
        [(_, _, headers, body)] = create_requests(faulty_backend)
        assert headers["Idempotency-Key"] == key
        assert body == payload
        assert list(faulty_backend.jobs) == ["job_0001"]


async def test_retry_after_dropped_answers_reuses_the_key_and_makes_one_job(live, faulty_backend):
    # The client retries a create twice by itself (it carries a key); three drops exhaust that.
    faulty_backend.inject("create", "drop", "drop", "drop")
    async with live.run_test(size=SIZE) as pilot:
        screen = await preview_ready(pilot)
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(live.screen, ErrorDialog), what="the error dialog")
        modal = live.screen
        assert modal.title_text == "Submit failed"
        assert "broke during job creation" in modal.message and modal.hint
        await pilot.press("escape")
        await wait_for(pilot, lambda: live.screen is screen, what="the dialog to close")
        status = text_of(screen, "#payload-status")
        assert "Submit failed" in status and "same Idempotency-Key" in status
        assert not screen.query_one("#payload-submit", Button).disabled
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(live.screen, DashboardScreen), what="the dashboard")
        keys = {headers["Idempotency-Key"] for _, _, headers, _ in create_requests(faulty_backend)}
        assert keys == {live.session.idempotency_key}
        assert len(create_requests(faulty_backend)) == 4
        assert list(faulty_backend.jobs) == ["job_0001"]


async def test_a_retry_after_a_lost_answer_gets_the_same_job(live, faulty_backend):
    async with live.run_test(size=SIZE) as pilot:
        screen = await preview_ready(pilot)
        # The first submit reached the backend and created the job, but its answer was lost.
        lost = httpx.post(f"{faulty_backend.url}/api/rl/jobs", json=screen.prepared.payload,
                          headers={"Authorization": f"Bearer {SYNTH_KEY}",
                                   "Idempotency-Key": live.session.idempotency_key})
        assert lost.json()["job_id"] == "job_0001"
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(live.screen, DashboardScreen), what="the dashboard")
        assert live.session.job_id == "job_0001"
        assert list(faulty_backend.jobs) == ["job_0001"]


async def test_an_answer_without_a_job_id_is_a_clear_error_and_submit_stays(live, faulty_backend):
    faulty_backend.create_answer = (200, {"status": "accepted", "note": "x" * 600})
    async with live.run_test(size=SIZE) as pilot:
        screen = await preview_ready(pilot)
        await pilot.press("s")
        await wait_for(pilot, lambda: screen.response is not None, what="the answer")
        await pilot.pause()
        assert isinstance(live.screen, PayloadPreviewScreen)
        status = text_of(screen, "#payload-status")
        assert "The backend answered without a job id" in status and "(HTTP 200)" in status
        response = text_of(screen, "#payload-response")
        assert response.startswith("Response 200:\n{")
        assert "x shows all" in response
        assert len(response.split("\n", 1)[1].split("\n… ")[0]) == PayloadPreviewScreen.RESPONSE_PREVIEW_CHARS
        await pilot.press("x")
        assert '"x' not in text_of(screen, "#payload-response").rsplit("xxx", 1)[-1]  # the whole body now
        assert "x shows all" not in text_of(screen, "#payload-response")
        assert not screen.query_one("#payload-submit", Button).disabled
        faulty_backend.create_answer = None
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(live.screen, DashboardScreen), what="the dashboard")
        keys = {headers["Idempotency-Key"] for _, _, headers, _ in create_requests(faulty_backend)}
        assert keys == {live.session.idempotency_key}


async def test_a_refused_payload_says_fix_the_config_and_offers_no_retry(live, faulty_backend):
    """A 422 is the payload's own problem (issue 37): the same payload is refused again, so the
    preview names the backend's words and the fix, not "s retries with the same Idempotency-Key";
    quitting then ends with 2, a config problem."""
    faulty_backend.create_answer = (422, {"detail": "Invalid RL job payload: data.config.trainig: unknown section; "
                                                    "did you mean [training]?"})
    async with live.run_test(size=SIZE) as pilot:
        screen = await preview_ready(pilot)
        await pilot.press("s")
        await wait_for_screen(pilot, ErrorDialog, "the error dialog")
        await pilot.press("escape")
        await wait_for(pilot, lambda: live.screen is screen, what="the dialog to close")
        status = text_of(screen, "#payload-status")
        assert "✗ Refused: The backend at " in status and "(HTTP 422)" in status
        assert "data.config.trainig: unknown section; did you mean [training]?" in status
        assert "Fix the config" in status and "Idempotency-Key" not in status and "s retries" not in status
        assert text_of(screen, "#payload-response").startswith("Response 422:")
        assert live.exit_code == 2


async def test_wrong_synth_key_on_submit_shows_the_fix(preview_app, faulty_backend, tiny_task_app):
    app = preview_app(backend=faulty_backend.url, task_url=tiny_task_app.url,
                      synth_key="sk_wrong_key_0123456789")
    async with app.run_test(size=SIZE) as pilot:
        await preview_ready(pilot)
        await pilot.press("s")
        await wait_for_screen(pilot, ErrorDialog, "the error dialog")
        modal = app.screen
        assert "rejected the SYNTH_API_KEY" in modal.message and "HTTP 401" in modal.message
        assert "SYNTH_API_KEY" in modal.hint
        assert_no_secrets(modal.message, modal.hint)


async def test_model_override_rebuilds_the_payload_and_a_bad_one_disables_submit(live, faulty_backend):
    async with live.run_test(size=SIZE) as pilot:
        screen = await preview_ready(pilot)
        assert screen.prepared.payload["data"]["base_model"] == "Qwen/Qwen3-4B"
        model = screen.query_one("#override-model", Input)
        model.focus()
        type_ahead(live, *"Qwen/Qwen3-8B")  # as a terminal sends it: no frame per key
        await wait_for(pilot, lambda: not screen.rebuilding and live.session.overrides.model == "Qwen/Qwen3-8B",
                       what="the rebuilt payload")
        shown = json.loads(screen.shown_json)
        assert shown["data"]["model"] == "Qwen/Qwen3-8B" and "base_model" not in shown["data"]
        assert shown == screen.prepared.payload
        model.value = "gpt-unknown"
        await wait_for(pilot, lambda: screen.problem is not None and not screen.rebuilding, what="the problem")
        problem = str(screen.query_one("#payload-problem").render())
        assert "gpt-unknown" in problem and "Fix:" in problem
        assert screen.query_one("#payload-submit", Button).disabled
        await pilot.press("ctrl+s")  # refused, with the reason
        await pilot.pause()
        assert any("Cannot submit" in n.message for n in notifications(live))
        assert create_requests(faulty_backend) == []
        model.value = ""
        await wait_for(pilot, lambda: screen.problem is None and not screen.rebuilding, what="the fix")
        assert json.loads(screen.shown_json)["data"]["base_model"] == "Qwen/Qwen3-4B"


async def test_experimental_switch_allows_an_experimental_model(live):
    async with live.run_test(size=SIZE) as pilot:
        screen = await preview_ready(pilot)
        screen.query_one("#override-model", Input).value = "Qwen/Qwen3-4B-Thinking-2507"
        await wait_for(pilot, lambda: screen.problem is not None and not screen.rebuilding, what="the problem")
        assert "experimental" in screen.problem.message.lower() or "experimental" in (screen.problem.hint or "")
        screen.query_one("#override-experimental", Switch).value = True
        await wait_for(pilot, lambda: screen.problem is None and not screen.rebuilding, what="the rebuild")
        assert live.session.overrides.allow_experimental is True
        assert json.loads(screen.shown_json)["data"]["model"] == "Qwen/Qwen3-4B-Thinking-2507"


async def test_task_url_override_changes_the_payload_and_warns_it_is_unverified(flow_app, faulty_backend,
                                                                                 tiny_task_app):
    app = flow_app("verify", backend=faulty_backend.url, task_url=tiny_task_app.url, synth_key=SYNTH_KEY,
                   env_key=ENV_KEY)
    async with app.run_test(size=SIZE) as pilot:
        verification = app.screen
        assert isinstance(verification, VerificationScreen)
        await wait_for(pilot, lambda: verification.verdict is not None and verification.verdict.ready,
                       what="the verification to pass")
        await pilot.press("enter")
        screen = await preview_ready(pilot)
        assert app.session.verified_task_url == tiny_task_app.url
        assert not screen.query_one("#payload-problem").display
        screen.query_one("#override-task-url", Input).value = "https://other.example.test/"
        await wait_for(pilot, lambda: not screen.rebuilding and app.session.overrides.task_url is not None,
                       what="the rebuild")
        await wait_for(pilot, lambda: "example" in screen.shown_json, what="the new URL")
        assert json.loads(screen.shown_json)["data"]["endpoint_base_url"] == "https://other.example.test"
        warning = str(screen.query_one("#payload-problem").render())
        assert "changed since verification" in warning
        assert not screen.query_one("#payload-submit", Button).disabled
        assert app.session.options.task_url is None  # the flags stay as given; the override is the session's


async def verified_preview(pilot):
    """From the checks, once they pass, to the preview (enter)."""
    verification = pilot.app.screen
    await wait_for(pilot, lambda: verification.verdict is not None and verification.verdict.ready,
                   what="the verification to pass")
    await pilot.press("enter")
    return await preview_ready(pilot)


@pytest.mark.parametrize("changed", ["model", "task URL"])
async def test_s_after_a_change_since_verification_verifies_again_and_sends_nothing(
        changed, flow_app, faulty_backend, tiny_task_app):
    """The walk: ctrl+s submitted a paid job after the task URL or the model was changed in the
    preview, despite the warning that it changed. s (and ctrl+s, and the button) go back to the
    checks, which run again for the change; enter there comes back, and s then submits."""
    app = flow_app("verify", backend=faulty_backend.url, task_url=tiny_task_app.url, synth_key=SYNTH_KEY,
                   env_key=ENV_KEY)
    async with app.run_test(size=SIZE) as pilot:
        screen = await verified_preview(pilot)
        await wait_for(pilot, lambda: "s Submit" in footer_text(app), what="s Submit in the footer")
        if changed == "model":
            screen.query_one("#override-model", Input).value = "Qwen/Qwen3-1.7B"
            await wait_for(pilot, lambda: not screen.rebuilding and "Qwen3-1.7B" in screen.shown_json,
                           what="the rebuild")
        else:
            url = tiny_task_app.url.replace("127.0.0.1", "localhost")
            screen.query_one("#override-task-url", Input).value = url
            await wait_for(pilot, lambda: not screen.rebuilding and "localhost" in screen.shown_json,
                           what="the rebuild")
        await wait_for(pilot, lambda: "s Verify again" in footer_text(app), what="s saying it verifies again")
        assert "Submit" not in footer_text(app)
        assert f"The {changed} (verified: " in str(screen.query_one("#payload-problem").render())
        assert str(screen.query_one("#payload-submit", Button).label) == "Verify again (s)"
        screen.query_one("#payload-json-scroll").focus()
        verified_before = faulty_backend.count("/rl/verify_task_app")
        await pilot.press("ctrl+s")
        await wait_for_screen(pilot, VerificationScreen, "verification again")
        assert create_requests(faulty_backend) == []
        verification = app.screen
        await wait_for(pilot, lambda: faulty_backend.count("/rl/verify_task_app") > verified_before,
                       what="the checks run again")
        await wait_for(pilot, lambda: verification.verdict is not None and verification.verdict.ready,
                       what="the verification to pass again")
        await pilot.press("enter")
        screen = await preview_ready(pilot)
        await wait_for(pilot, lambda: "s Submit" in footer_text(app), what="s Submit again")
        await pilot.press("ctrl+s")
        await wait_for(pilot, lambda: isinstance(app.screen, DashboardScreen), what="the dashboard")
        assert len(create_requests(faulty_backend)) == 1


async def test_escape_goes_back_to_verification(live):
    async with live.run_test(size=SIZE) as pilot:
        await preview_ready(pilot)
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(live.screen, VerificationScreen), what="verification")


# --------------------------------------------------------------------------- snapshots (fixed data)


class CannedClient:
    """Stands in for SynthClient on submit: answers with a fixed result or error."""

    def __init__(self, answer) -> None:
        self.answer = answer

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        return None

    async def create_job(self, payload, *, idempotency_key):
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def fixed_app(preview_app, monkeypatch, *, answer=None):
    app = preview_app(backend=FIXED_BACKEND, task_url=FIXED_TASK_URL, idempotency="fixed-key")
    body = {"any_ok": True, "candidates_first15": ["env_key_012345"], "attempts": [{"status": 200}]}

    async def verify(*, timeout: float = 30.0):
        return VerifyResult(200, body, ApiResponse(200, body, json.dumps(body)))

    async def health(*, timeout: float = 30.0):
        attempts = [HealthAttempt(e, f"{FIXED_TASK_URL}{e}", "env_…ef", 200, 5.0, True, "OK")
                    for e in ("/health", "/task_info")]
        return HealthReport(FIXED_TASK_URL, attempts)

    monkeypatch.setattr(app.session, "verify", verify)
    monkeypatch.setattr(app.session, "health", health)
    monkeypatch.setattr(VerificationScreen, "clock", staticmethod(lambda: 100.0))
    if answer is not None:
        monkeypatch.setattr(app.session, "client", lambda **kwargs: CannedClient(answer))
    return app


def test_snapshot_preview(snap_compare, preview_app, monkeypatch):
    app = fixed_app(preview_app, monkeypatch)

    async def run_before(pilot) -> None:
        screen = await preview_ready(pilot)
        assert "fixed-key" in text_of(screen, "#payload-target")
        assert_no_secrets(pilot.app.export_screenshot())

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_snapshot_preview_after_an_answer_without_job_id(snap_compare, preview_app, monkeypatch):
    body = {"status": "accepted", "detail": "queued for review"}
    answer = CreateResult(202, body, ApiResponse(202, body, json.dumps(body)), "fixed-key")
    app = fixed_app(preview_app, monkeypatch, answer=answer)

    async def run_before(pilot) -> None:
        screen = await preview_ready(pilot)
        await pilot.press("s")
        await wait_for(pilot, lambda: screen.response is not None, what="the answer")
        await pilot.pause()
        assert_no_secrets(pilot.app.export_screenshot())

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_snapshot_preview_after_a_failed_submit(snap_compare, preview_app, monkeypatch):
    error = AuthError("The backend rejected the SYNTH_API_KEY on POST /rl/jobs (job creation): HTTP 401, "
                      "Invalid API key.",
                      "Check SYNTH_API_KEY in your .env or shell: it must be a key for this backend.",
                      status=401, body={"detail": "Invalid API key"})
    app = fixed_app(preview_app, monkeypatch, answer=error)

    async def run_before(pilot) -> None:
        screen = await preview_ready(pilot)
        await pilot.press("s")
        await wait_for_screen(pilot, ErrorDialog, "the error dialog")
        await pilot.press("escape")
        await wait_for(pilot, lambda: pilot.app.screen is screen, what="the dialog to close")
        await pilot.pause()
        assert_no_secrets(pilot.app.export_screenshot())

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


@pytest.mark.parametrize("size", [(80, 24), (160, 45)])
async def test_layout_fits_small_and_large_terminals(preview_app, monkeypatch, size):
    """And `? Help` is in the footer at both sizes (at 80x24 this was its own test,
    test_the_help_key_is_in_the_footer_at_80x24, on the same app)."""
    app = fixed_app(preview_app, monkeypatch)
    async with app.run_test(size=size) as pilot:
        screen = await preview_ready(pilot)
        # The footer is filled after the screen is: wait for what it reads.
        await wait_for(pilot, lambda: "? Help" in footer_text(app), what="? Help in the footer")
        json_pane = screen.query_one("#payload-json-scroll")
        submit = screen.query_one("#payload-submit", Button)
        assert json_pane.region.height >= 5
        assert submit.region.bottom <= size[1] - 1 and submit.region.height >= 1
        for widget_id in ("#override-model", "#override-task-url", "#override-experimental"):
            region = screen.query_one(widget_id).region
            assert region.height >= 1 and region.right <= size[0]


async def test_the_experimental_row_lines_up_with_the_other_overrides(preview_app, monkeypatch):
    """The walk: the Experimental row's text ("off: experimental models are refused") started
    further right than Model's and Task URL's, after the switch. Every row's text starts in the
    same column; the switch follows the Experimental row's text."""
    app = fixed_app(preview_app, monkeypatch)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await preview_ready(pilot)
        await pilot.pause()
        model = screen.query_one("#override-model").region.x
        assert screen.query_one("#override-task-url").region.x == model
        note = screen.query_one("#override-experimental-note").region
        assert note.x == model and "experimental models" in text_of(screen, "#override-experimental-note")
        assert screen.query_one("#override-experimental").region.x > note.x  # after the text
        labels = [label.region.x for label in screen.query(".override-label")]
        assert len(set(labels)) == 1


async def test_a_mistyped_task_url_is_named_as_the_previews_and_replaced_in_the_env_review(
        flow_app, faulty_backend, tiny_task_app):
    """The walk: a Task URL mistyped in the preview failed verification again, and then the env
    review called it the --task-url flag's, said editing could not change it, and the user could
    not get back to the preview. The row says it is the preview's; an edit there replaces it."""
    app = flow_app("verify", backend=faulty_backend.url, task_url=tiny_task_app.url, synth_key=SYNTH_KEY,
                   env_key=ENV_KEY)
    async with app.run_test(size=SIZE) as pilot:
        screen = await verified_preview(pilot)
        offline = f"http://127.0.0.1:{free_port()}"  # nothing listens: the task app is offline
        screen.query_one("#override-task-url", Input).value = offline
        await wait_for(pilot, lambda: not screen.rebuilding and offline in screen.shown_json, what="the rebuild")
        screen.query_one("#payload-json-scroll").focus()
        await pilot.press("s")
        await wait_for_screen(pilot, VerificationScreen, "verification again")
        verification = app.screen
        await wait_for(pilot, lambda: verification.verdict is not None and not verification.running,
                       what="the checks to fail")
        assert not verification.verdict.ready
        await pilot.press("escape")
        await wait_for_screen(pilot, EnvReviewScreen, "the env review")
        env = app.screen
        await wait_for(pilot, lambda: not env.loading, what="the .env")
        table = env.query_one(MaskedEnvTable)
        assert [str(c) for c in table.get_row("TASK_APP_URL")][1:3] == [offline, "preview"]
        table.select_key("TASK_APP_URL")
        await pilot.pause()
        assert "payload preview's Task URL override" in str(env.query_one("#env-detail").render())
        await pilot.press("enter")
        dialog = app.screen
        note = str(dialog.query_one("#env-preview-note").render())
        assert "replaces it for this session" in note and "latest choice wins" in note
        assert not dialog.query("#env-shell-warning")  # no --task-url flag was passed
        dialog.query_one("#env-value", Input).value = tiny_task_app.url
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.screen is env, what="the dialog to close")
        assert app.session.overrides.task_url is None  # the preview's override is gone
        assert [str(c) for c in table.get_row("TASK_APP_URL")][1:3] == [tiny_task_app.url, "not saved yet"]
        await pilot.press("c")  # the value is the one the file holds: nothing to save
        await wait_for_screen(pilot, VerificationScreen, "verification")
        verification = app.screen
        await wait_for(pilot, lambda: verification.verdict is not None and verification.verdict.ready,
                       what="the verification to pass with the .env's URL")
        await pilot.press("enter")
        screen = await preview_ready(pilot)
        assert screen.prepared.task_url == tiny_task_app.url
        assert screen.query_one("#override-task-url", Input).value == tiny_task_app.url
