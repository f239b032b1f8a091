"""The verification screen against real loopback servers, and its snapshots from fixed results.

Live tests start a FaultyBackend and a TinyTaskApp, point a .env at them and open the app on
the verification step. Snapshot tests replace the session's checks with fixed results (and
the screen's clock with a fixed one), so no port, path or timing reaches an SVG.
"""

from __future__ import annotations

import functools
import json
import re
import socket

import httpx
import pytest
from textual.widgets import DataTable, TextArea

from app.core.api.health import HealthAttempt, HealthReport, check_task_app
from app.core.api.results import ApiResponse, ModelVerifyResult, VerifyResult
from app.core.errors import ExitCode
from app.core.launch.diagnosis import (
    BackendCheck,
    TaskAppCheck,
    Verdict,
    backend_rows,
    key_prefix_hint,
    overall_verdict,
)
from app.core.redact import mask_secret
from app.screens import verification
from app.screens.dialogs.common import HelpDialog
from app.screens.dialogs.json_report import JsonReportDialog
from app.screens.env_review import EnvReviewScreen
from app.screens.preview import PayloadPreviewScreen
from app.screens.verification import VerificationScreen
from support.pilot_waits import wait_for, wait_for_screen
from support.screen_text import footer_text, notifications, toast_text
from widgets.diagnostics import DiagnosticsTable

ENV_KEY = "env_key_0123456789abcdef0123456789abcdef"
WRONG_ENV_KEY = "env_wrong_fedcba9876543210fedcba9876543210"
SYNTH_KEY = "sk_test_backend_key_0123456789"
FIXED_BACKEND = "http://127.0.0.1:8000"
FIXED_TASK_URL = "http://127.0.0.1:8001"
SIZE = (120, 36)


# --------------------------------------------------------------------------- setup


@pytest.fixture
def verify_app(flow_app):
    """An app opened on the verification step, with the config and .env already chosen as the
    earlier steps would leave the session (see flow_app); the keys are this file's unless given."""
    return functools.partial(flow_app, "verify", synth_key=SYNTH_KEY, env_key=ENV_KEY)


@pytest.fixture
def short_timeout(monkeypatch):
    monkeypatch.setattr(VerificationScreen, "CHECK_TIMEOUT_S", 1.0)


async def checks_done(pilot) -> VerificationScreen:
    await wait_for_screen(pilot, VerificationScreen, "the verification screen")
    screen = pilot.app.screen
    await wait_for(pilot, lambda: not screen.running, what="both checks to finish")
    await pilot.pause()
    return screen


def rows(screen: VerificationScreen):
    return screen.query_one(DiagnosticsTable).rows


def verdict_text(screen: VerificationScreen) -> str:
    return str(screen.query_one("#verify-verdict").render())


def screen_text(screen: VerificationScreen) -> str:
    table = " | ".join(f"{r.check} {r.tried} {r.status} {r.verdict.value} {r.reason} {r.fix}" for r in rows(screen))
    return f"{table}\n{verdict_text(screen)}"


def assert_no_secrets(*texts: str) -> None:
    for text in texts:
        for secret in (ENV_KEY, WRONG_ENV_KEY, SYNTH_KEY, "sk_wrong_key_0123456789"):
            assert secret not in text
        assert "Traceback" not in text


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class SilentServer:
    """Accepts connections and never answers: the task app that hangs."""

    def __enter__(self) -> SilentServer:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


# --------------------------------------------------------------------------- live checks


async def test_both_checks_pass_and_enter_opens_the_preview(verify_app, faulty_backend, tiny_task_app):
    app = verify_app(backend=faulty_backend.url, task_url=tiny_task_app.url)
    async with app.run_test(size=SIZE) as pilot:
        screen = await checks_done(pilot)
        found = rows(screen)
        assert [r.check for r in found] == ["backend", "backend verify", "backend verify", "task app", "task app",
                                            "model"]
        assert all(r.verdict is Verdict.OK for r in found)
        # FaultyBackend, like the hosted service, has no model check: the hosted list judges the model
        assert found[5].tried == "the hosted service's list · Qwen/Qwen3-4B" and found[5].reason == "supported"
        assert found[0].status == 200 and "Bearer sk_t…89" in found[0].tried
        assert [r.status for r in found[3:5]] == [200, 200]
        assert "env_…ef" in found[3].tried and "/health" in found[3].tried and "/task_info" in found[4].tried
        assert "Ready: press enter to preview the payload" in verdict_text(screen)
        # the two checks really ran: the backend was asked and the task app saw the key
        assert faulty_backend.count("/rl/verify_task_app") == 1
        assert tiny_task_app.seen_headers and tiny_task_app.seen_headers[0]["X-API-Key"] == ENV_KEY
        assert_no_secrets(screen_text(screen))
        await pilot.press("enter")
        await wait_for_screen(pilot, PayloadPreviewScreen, "the preview")


async def test_wrong_environment_key_shows_the_400_and_the_fix(verify_app, faulty_backend, tiny_task_app):
    app = verify_app(backend=faulty_backend.url, task_url=tiny_task_app.url, env_key=WRONG_ENV_KEY)
    async with app.run_test(size=SIZE) as pilot:
        screen = await checks_done(pilot)
        task_rows = [r for r in rows(screen) if r.check == "task app"]
        assert [r.status for r in task_rows] == [400, 400]
        assert all(r.verdict is Verdict.FAILED for r in task_rows)
        assert "rejected ENVIRONMENT_API_KEY env_…10" in task_rows[0].reason
        assert "the key the task app was started with" in task_rows[0].fix
        verdict = verdict_text(screen)
        assert "rejected ENVIRONMENT_API_KEY" in verdict and "started with" in verdict
        assert_no_secrets(screen_text(screen))
        await pilot.press("enter")  # refused, and says why
        await pilot.pause()
        assert isinstance(app.screen, VerificationScreen)
        assert any("Cannot continue" in n.message for n in notifications(app))


async def test_a_failed_verifications_footer_does_not_offer_the_preview(verify_app, monkeypatch):
    """The walk: after a failed check the footer still offered `⏎ Preview payload`, though
    enter only warns there. The footer leaves enter out; enter still says why; the help names
    what it does then; a retry that passes offers the preview again."""
    app = snapshot_app(verify_app, monkeypatch, env_key=WRONG_ENV_KEY)
    async with app.run_test(size=(160, 45)) as pilot:
        screen = await checks_done(pilot)
        await wait_for(pilot, lambda: "r Retry" in footer_text(app), what="the footer")
        assert "Preview payload" not in footer_text(app) and "⏎" not in footer_text(app)
        await pilot.press("enter")
        await wait_for(pilot, lambda: any("Cannot continue" in n.message for n in notifications(app)),
                       what="the toast saying why")
        assert isinstance(app.screen, VerificationScreen)
        await pilot.press("question_mark")
        help_screen = await wait_for_screen(pilot, HelpDialog)
        table = help_screen.query_one(DataTable)
        help_rows = [tuple(map(str, table.get_row_at(i))) for i in range(table.row_count)]
        assert ("⏎", "Say why it cannot go on") in help_rows
        assert not any(action == "Preview payload" for _, action in help_rows)
        await pilot.press("escape")
        await wait_for_screen(pilot, VerificationScreen)
        screen.task_app_check = healthy_task_app()  # as a retry that passes would leave it
        await wait_for(pilot, lambda: "⏎ Preview payload" in footer_text(app), what="enter offered again")


SMOL = "HuggingFaceTB/SmolLM2-135M-Instruct"


def template_problem(model: str) -> dict[str, str]:
    return {"message": f"the chat template of {model} cannot render a tool-calling conversation "
                       "(UndefinedError: 'dict object' has no attribute 'content')",
            "fix": 'set [model] chat_template = "qwen2_5" (TRL\'s, in the ChatML tokens this model was trained on)'}



RATE_WARNING = {"message": "learning_rate 0.01 is far too high for a pretrained model of 135M parameters",
                "fix": "e.g. learning_rate = 5e-5 in [training]"}


def use_model(project, model: str, **extra: str) -> None:
    """The flow's config (crafter_qwen4b.toml, copied by flow_app) with another [model] base."""
    config = project / "configs" / "crafter_qwen4b.toml"
    lines = "".join(f'{key} = "{value}"\n' for key, value in extra.items())
    config.write_text(config.read_text().replace('base = "Qwen/Qwen3-4B"', f'base = "{model}"\n{lines}', 1))


async def test_an_embedded_backends_model_check_stops_a_template_that_cannot_render(
        verify_app, faulty_backend, tiny_task_app, project):
    """Issue 37: a backend with a model check judges the model, template and learning rate the
    config names; its problem stops the launch with the fix, its warning does not."""
    faulty_backend.model_answer = (200, {"ok": False, "model": SMOL, "trains": "lm", "parameters": 134_515_008,
                                         "bytes": 538_000_000, "problems": [template_problem(SMOL)],
                                         "warnings": [RATE_WARNING]})
    app = verify_app(backend=faulty_backend.url, task_url=tiny_task_app.url)
    use_model(project, SMOL)
    app.session.choose_config(project / "configs" / "crafter_qwen4b.toml",
                              app.session.validate(project / "configs" / "crafter_qwen4b.toml"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await checks_done(pilot)
        model_rows = [r for r in rows(screen) if r.check == "model"]
        # The problem is the verdict's, said once under the rows with its fix (issue 37: a row
        # and the verdict both said it); the warning is a row.
        assert [r.verdict for r in model_rows] == [Verdict.FAILED, Verdict.WARNING]
        assert model_rows[0].tried == f"POST /rl/verify_model · {SMOL}" and model_rows[0].status == 200
        assert "far too high" in model_rows[1].reason
        verdict = verdict_text(screen)
        assert f"Model {SMOL}: the chat template" in verdict and 'chat_template = "qwen2_5"' in verdict
        shown = screen_text(screen)
        assert shown.count("cannot render a tool-calling conversation") == 1
        assert shown.count('chat_template = "qwen2_5"') == 1
        asked = [body for method, path, _, body in faulty_backend.requests if path == "/api/rl/verify_model"]
        assert asked == [{"model": SMOL, "learning_rate": 5e-05, "trainer_mode": "full"}]
        await pilot.press("enter")  # refused, and says why
        await pilot.pause()
        assert isinstance(app.screen, VerificationScreen)

        faulty_backend.model_answer = (200, {"ok": True, "model": SMOL, "trains": "lm", "parameters": 134_515_008,
                                             "bytes": 538_000_000, "template": "qwen2_5 (as written)",
                                             "problems": [], "warnings": [RATE_WARNING]})
        await pilot.press("r")
        screen = await checks_done(pilot)
        model_rows = [r for r in rows(screen) if r.check == "model"]
        assert [r.verdict for r in model_rows] == [Verdict.OK, Verdict.WARNING]
        assert model_rows[0].reason == ("the lm policy trains it: 135M parameters, 538 MB; "
                                        "template qwen2_5 (as written) renders a tool call")
        assert "Ready, 1 warning (the ! row above): press enter" in verdict_text(screen)


async def test_at_80x24_the_ready_line_says_a_warning_is_below_the_fold(verify_app, monkeypatch):
    """Issue 37: at 80x24 the `!` row was below the fold while the line under the rows said only
    `✓ Ready`; it counts the warnings at every size, and says to scroll while they are out of view."""
    result = ModelVerifyResult.from_body({"ok": True, "model": "Qwen/Qwen3-4B", "trains": "lm",
                                          "parameters": 4_022_468_096, "problems": [],
                                          "warnings": [RATE_WARNING]})
    app = snapshot_app(verify_app, monkeypatch, model_result=result)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await checks_done(pilot)
        await wait_for(pilot, lambda: "Ready, 1 warning (scroll ↓): press enter" in verdict_text(screen),
                       what="the ready line asking to scroll")
        scroll = screen.query_one("#verify-scroll")
        scroll.scroll_end(animate=False)
        await wait_for(pilot, lambda: "Ready, 1 warning (the ! row above): press enter" in verdict_text(screen),
                       what="the ready line once the warning is in view")
        await pilot.resize_terminal(160, 45)
        await wait_for(pilot, lambda: "Ready, 1 warning (the ! row above)" in verdict_text(screen),
                       what="the ready line at 160x45")


async def test_a_task_app_serving_another_environment_is_a_warning_row(
        verify_app, faulty_backend, tiny_task_app, project):
    """Issue 37: the demo's gridworld app with lm_press.toml chosen trained the stand-in on the
    gridworld and "succeeded"; a task app that names what it serves is compared with the config's
    [rollout] env_name (crafter_qwen4b.toml: "crafter"), and the difference is a `!` row."""
    tiny_task_app.taskset = {"name": "tiny", "environment": "gridworld"}
    app = verify_app(backend=faulty_backend.url, task_url=tiny_task_app.url)
    async with app.run_test(size=SIZE) as pilot:
        screen = await checks_done(pilot)
        warned = [r for r in rows(screen) if r.check == "task app" and r.verdict is Verdict.WARNING]
        assert len(warned) == 1
        assert warned[0].reason == (f"The task app at {tiny_task_app.url} serves 'gridworld'; the config's "
                                    "[rollout] env_name is 'crafter': the job would play 'gridworld'.")
        assert "Point TASK_APP_URL at the task app for 'crafter'" in warned[0].fix
        assert "Ready, 1 warning" in verdict_text(screen)


async def test_a_task_app_serving_the_configs_environment_adds_no_row(
        verify_app, faulty_backend, tiny_task_app, project):
    tiny_task_app.taskset = {"name": "tiny", "environments": ["crafter", "crafter-classic"]}
    app = verify_app(backend=faulty_backend.url, task_url=tiny_task_app.url)
    async with app.run_test(size=SIZE) as pilot:
        screen = await checks_done(pilot)
        assert [r for r in rows(screen) if r.verdict is Verdict.WARNING] == []


async def test_the_hosted_list_refuses_a_model_off_it_and_names_the_embedded_backend(
        verify_app, faulty_backend, tiny_task_app, project):
    app = verify_app(backend=faulty_backend.url, task_url=tiny_task_app.url)
    use_model(project, SMOL)
    app.session.choose_config(project / "configs" / "crafter_qwen4b.toml",
                              app.session.validate(project / "configs" / "crafter_qwen4b.toml"))
    async with app.run_test(size=SIZE) as pilot:
        screen = await checks_done(pilot)
        model_rows = [r for r in rows(screen) if r.check == "model"]
        assert [r.verdict for r in model_rows] == [Verdict.FAILED]
        assert model_rows[0].status is None and model_rows[0].reason == "not supported"
        verdict = verdict_text(screen)
        assert f"Model {SMOL}: Model '{SMOL}' is not supported by the hosted service" in verdict
        assert "--backend local" in verdict


async def test_task_app_offline_says_connection_refused(verify_app, faulty_backend):
    down = f"http://127.0.0.1:{free_port()}"
    app = verify_app(backend=faulty_backend.url, task_url=down)
    async with app.run_test(size=SIZE) as pilot:
        screen = await checks_done(pilot)
        task_rows = [r for r in rows(screen) if r.check == "task app"]
        assert task_rows and all(r.status is None and r.reason == "connection refused" for r in task_rows)
        assert "offline" in task_rows[0].fix
        verdict = verdict_text(screen)
        assert f"The task app at {down} is offline (connection refused)" in verdict
        assert "Start the task app, or fix TASK_APP_URL" in verdict


async def test_backend_down_is_unreachable_with_the_fix(verify_app, tiny_task_app):
    down = f"http://127.0.0.1:{free_port()}"
    app = verify_app(backend=down, task_url=tiny_task_app.url)
    async with app.run_test(size=SIZE) as pilot:
        screen = await checks_done(pilot)
        backend = rows(screen)[0]
        assert backend.check == "backend" and backend.verdict is Verdict.FAILED
        assert "Cannot reach the backend" in backend.reason and "connection refused" in backend.reason
        assert "--backend" in backend.fix
        verdict = verdict_text(screen)
        assert "Backend unreachable" in verdict and "Fix:" in verdict and "--backend" in verdict
        # the task app itself is fine, and says so
        assert all(r.verdict is Verdict.OK for r in rows(screen) if r.check == "task app")


async def test_wrong_synth_key_shows_401_and_the_fix(verify_app, faulty_backend, tiny_task_app):
    app = verify_app(backend=faulty_backend.url, task_url=tiny_task_app.url, synth_key="sk_wrong_key_0123456789")
    async with app.run_test(size=SIZE) as pilot:
        screen = await checks_done(pilot)
        backend = rows(screen)[0]
        assert backend.status == 401 and backend.verdict is Verdict.FAILED
        assert "rejected the SYNTH_API_KEY" in backend.reason and "SYNTH_API_KEY" in backend.fix
        # The walk: the row said POST /rl/verify_task_app and its reason "the RL job list": the
        # probe before the verification was refused, and both now name it.
        assert backend.tried.startswith("GET /rl/jobs · Bearer ")
        assert "rejected the SYNTH_API_KEY on GET /rl/jobs (the RL job list)" in backend.reason
        verdict = verdict_text(screen)
        # which backend answered (issue 37: on a busy machine another program may hold its port)
        assert (f"Wrong SYNTH_API_KEY: the backend at {faulty_backend.url}/api rejected sk_w…89 on GET /rl/jobs "
                "(HTTP 401); it may not be the backend you started." in " ".join(verdict.split()))
        assert_no_secrets(screen_text(screen))


async def test_quitting_after_a_rejected_key_exits_3(verify_app, faulty_backend, tiny_task_app):
    """The walk: a rejected SYNTH_API_KEY ended the TUI with 5, where a failed verification is 3
    (README, docs/product.md#exit-codes), as headless (tests/cli/test_headless.py)."""
    app = verify_app(backend=faulty_backend.url, task_url=tiny_task_app.url, synth_key="sk_wrong_key_0123456789")
    async with app.run_test(size=SIZE) as pilot:
        await checks_done(pilot)
        await pilot.press("ctrl+q")
    assert app.return_value == ExitCode.CHECKS_FAILED == 3


async def test_a_401_to_the_verification_itself_names_it(verify_app, faulty_backend, tiny_task_app):
    faulty_backend.inject("verify", "401")  # the probe passes, the verification is refused
    app = verify_app(backend=faulty_backend.url, task_url=tiny_task_app.url)
    async with app.run_test(size=SIZE) as pilot:
        screen = await checks_done(pilot)
        backend = rows(screen)[0]
        assert backend.status == 401 and backend.tried.startswith("POST /rl/verify_task_app · Bearer ")
        assert "on POST /rl/verify_task_app (task app verification)" in backend.reason
        assert "the RL job list" not in screen_text(screen)
        assert "rejected sk_t…89 on POST /rl/verify_task_app (HTTP 401)" in " ".join(verdict_text(screen).split())


async def test_backend_holds_no_key_the_task_app_accepts(verify_app, faulty_backend, tiny_task_app):
    faulty_backend.verify_answer = (200, {"any_ok": False, "candidates_first15": ["env_other_key_1"], "attempts": [
        {"endpoint": "/health", "header": "X-API-Key", "key_prefix": "env_other_key_1", "status": 400,
         "latency_ms": 3.2, "ok": False, "error": "API key missing or invalid"},
        {"endpoint": "/task_info", "header": "Authorization: Bearer", "key_prefix": "env_…99", "status": 400,
         "latency_ms": 2.5, "ok": False}]})
    app = verify_app(backend=faulty_backend.url, task_url=tiny_task_app.url)
    async with app.run_test(size=SIZE) as pilot:
        screen = await checks_done(pilot)
        verify_rows = [r for r in rows(screen) if r.check == "backend verify"]
        assert [r.status for r in verify_rows] == [400, 400]
        assert verify_rows[0].tried == "/health · X-API-Key · env_…"  # a prefix, never 15 characters
        assert verify_rows[1].tried == "/task_info · Authorization: Bearer · env_…"
        assert "rejected this stored key" in verify_rows[0].reason
        assert "API key missing or invalid" in verify_rows[0].reason
        assert verify_rows[0].latency_ms == pytest.approx(3.2)
        verdict = verdict_text(screen)
        assert "The backend holds no key this task app accepts" in verdict
        assert "Upload this task app's ENVIRONMENT_API_KEY" in verdict


async def test_a_verify_attempt_with_the_key_this_machine_holds_shows_its_mask(verify_app, faulty_backend,
                                                                               tiny_task_app):
    """The walk: the verify rows said "env_…" where the env review said "env_…ef" for the same
    key. A reported prefix of the held ENVIRONMENT_API_KEY (4 characters, as the embedded
    backend sends, or 15, as the hosted one does) reads as the env review's mask; another
    key's stays 4 characters."""
    faulty_backend.verify_answer = (200, {"any_ok": True, "candidates_first15": [ENV_KEY[:15]], "attempts": [
        {"endpoint": "/health", "header": "X-API-Key", "key_prefix": ENV_KEY[:4] + "…", "status": 200, "ok": True},
        {"endpoint": "/task_info", "header": "X-API-Key", "key_prefix": ENV_KEY[:15], "status": 200, "ok": True},
        {"endpoint": "/health", "header": "X-API-Key", "key_prefix": "env_other_key_1", "status": 400}]})
    app = verify_app(backend=faulty_backend.url, task_url=tiny_task_app.url)
    async with app.run_test(size=SIZE) as pilot:
        screen = await checks_done(pilot)
        verify_rows = [r for r in rows(screen) if r.check == "backend verify"]
        assert [r.tried for r in verify_rows] == ["/health · X-API-Key · env_…ef", "/task_info · X-API-Key · env_…ef",
                                                  "/health · X-API-Key · env_…"]
        assert mask_secret(ENV_KEY) == "env_…ef"  # the env review's mask (widgets/env_table.py)
        assert_no_secrets(screen_text(screen))


async def test_hosted_backend_attempts_with_only_a_status_are_shown(verify_app, faulty_backend, tiny_task_app):
    # FaultyBackend's default answer is the hosted shape: attempts carry only a status.
    app = verify_app(backend=faulty_backend.url, task_url=tiny_task_app.url)
    async with app.run_test(size=SIZE) as pilot:
        screen = await checks_done(pilot)
        verify_rows = [r for r in rows(screen) if r.check == "backend verify"]
        assert [(r.tried, r.status, r.verdict) for r in verify_rows] == [
            ("(the backend did not say)", 200, Verdict.OK)] * 2


async def test_the_elapsed_time_starts_at_zero_in_the_first_frame(verify_app, faulty_backend, short_timeout,
                                                                  monkeypatch):
    """The pending rows' first drawing counts from the checks' start, not from the clock's own
    zero (the walk: "verifying… 6294.3 s", the machine's uptime, until the first tick)."""
    seen: list[float] = []
    draw = verification.pending_task_app_row

    def pending_row(hint: str, elapsed: float):
        seen.append(elapsed)
        return draw(hint, elapsed)

    monkeypatch.setattr(verification, "pending_task_app_row", pending_row)
    monkeypatch.setattr(VerificationScreen, "clock", staticmethod(lambda: 5000.0))  # it stands still
    with SilentServer() as silent:
        app = verify_app(backend=faulty_backend.url, task_url=silent.url)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: bool(seen), what="the first pending row")
    assert seen and max(seen) == 0.0


async def test_hung_task_app_ticks_then_ends_with_the_timeout_reason(verify_app, faulty_backend, short_timeout):
    with SilentServer() as silent:
        app = verify_app(backend=faulty_backend.url, task_url=silent.url)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for_screen(pilot, VerificationScreen, "the screen")
            screen = app.screen
            seen: list[str] = []

            def pending_reason() -> bool:
                pending = [r.reason for r in rows(screen) if r.check == "task app" and r.verdict is Verdict.PENDING]
                seen.extend(pending)
                return bool(pending) and pending[0] != "verifying… 0.0 s"

            await wait_for(pilot, pending_reason, what="the elapsed time to tick")
            assert seen[-1].startswith("verifying… ") and seen[-1].endswith(" s")
            assert "Checking…" in verdict_text(screen)
            screen = await checks_done(pilot)
            task_rows = [r for r in rows(screen) if r.check == "task app"]
            assert task_rows[0].verdict is Verdict.FAILED
            assert task_rows[0].reason == "no answer within 1 s"
            assert f"The task app at {silent.url} did not answer" in verdict_text(screen)


async def test_slow_backend_times_out_with_a_reason(verify_app, faulty_backend, tiny_task_app, monkeypatch):
    monkeypatch.setattr(VerificationScreen, "CHECK_TIMEOUT_S", 0.5)
    faulty_backend.inject("verify", "slow")  # answers after 1.5 s
    app = verify_app(backend=faulty_backend.url, task_url=tiny_task_app.url)
    async with app.run_test(size=SIZE) as pilot:
        screen = await checks_done(pilot)
        backend = rows(screen)[0]
        assert backend.verdict is Verdict.FAILED and backend.reason == "no answer within 0.5 s"
        assert "did not answer within 0.5 s" in verdict_text(screen)


async def test_missing_key_is_explained_in_place(verify_app, faulty_backend, tiny_task_app):
    app = verify_app(backend=faulty_backend.url, task_url=tiny_task_app.url, env_key="")
    async with app.run_test(size=SIZE) as pilot:
        screen = await checks_done(pilot)
        assert screen.setup_problem is not None
        verdict = verdict_text(screen)
        assert "Cannot prepare the payload: Missing required keys: ENVIRONMENT_API_KEY" in verdict
        assert "Fix:" in verdict
        assert rows(screen) == []
        assert faulty_backend.count("/rl/verify_task_app") == 0  # nothing sent without a payload


async def test_retry_runs_both_checks_again(verify_app, faulty_backend, tiny_task_app):
    faulty_backend.inject("verify", "500")
    app = verify_app(backend=faulty_backend.url, task_url=tiny_task_app.url)
    async with app.run_test(size=SIZE) as pilot:
        screen = await checks_done(pilot)
        assert rows(screen)[0].status == 500 and not screen.verdict.ready
        assert "could not run the verification (HTTP 500)" in verdict_text(screen)
        await pilot.press("r")
        await pilot.pause()
        screen = await checks_done(pilot)
        assert screen.verdict.ready
        assert faulty_backend.count("/rl/verify_task_app") == 2
        assert len(tiny_task_app.seen_headers) == 4


async def test_back_returns_to_env_review(verify_app, faulty_backend, tiny_task_app):
    app = verify_app(backend=faulty_backend.url, task_url=tiny_task_app.url)
    async with app.run_test(size=SIZE) as pilot:
        await checks_done(pilot)
        await pilot.press("b")
        await wait_for_screen(pilot, EnvReviewScreen, "env review")


async def test_diagnostics_modal_shows_the_redacted_report_and_copies_it(verify_app, faulty_backend,
                                                                          tiny_task_app):
    app = verify_app(backend=faulty_backend.url, task_url=tiny_task_app.url, env_key=WRONG_ENV_KEY)
    async with app.run_test(size=SIZE) as pilot:
        await checks_done(pilot)
        await pilot.press("d")
        await wait_for_screen(pilot, JsonReportDialog, "the diagnostics")
        text = app.screen.query_one(TextArea).text
        report = json.loads(text)
        assert report["backend_verify"]["body"]["any_ok"] is True
        attempts = report["task_app_health"]["attempts"]
        assert [a["status"] for a in attempts] == [400, 400]
        assert attempts[0]["body"]["detail"]["error"]["code"] == "unauthorised"
        assert report["verdict"]["ready"] is False
        assert_no_secrets(text)
        await pilot.press("y")
        await pilot.pause()
        assert app.clipboard == text
        assert any(n.message == "Diagnostics copied" for n in notifications(app))
        app.copy_to_clipboard("")
        await pilot.press("ctrl+c")  # copies here; it does not ask to quit
        await pilot.pause()
        assert app.clipboard == text and isinstance(app.screen, JsonReportDialog)
        await pilot.press("escape")
        await wait_for_screen(pilot, VerificationScreen, "the dialog to close")


async def test_backend_answering_html_is_explained(verify_app, faulty_backend, tiny_task_app):
    faulty_backend.inject("verify", "html")
    app = verify_app(backend=faulty_backend.url, task_url=tiny_task_app.url)
    async with app.run_test(size=SIZE) as pilot:
        screen = await checks_done(pilot)
        backend = rows(screen)[0]
        assert backend.verdict is Verdict.FAILED and "HTML instead of JSON" in backend.reason
        assert "/api" in backend.fix
        assert "HTML instead of JSON" in verdict_text(screen)


# --------------------------------------------------------------------------- the view model alone


def backend_check(body, status: int = 200) -> BackendCheck:
    return BackendCheck("http://127.0.0.1:8000/api", "sk_t…89", 30.0, 0.01,
                        result=VerifyResult(status, body, ApiResponse(status, body, json.dumps(body))))


def healthy_task_app() -> TaskAppCheck:
    attempts = [HealthAttempt(e, f"{FIXED_TASK_URL}{e}", "env_…ef", 200, 1.0, True, "OK")
                for e in ("/health", "/task_info")]
    return TaskAppCheck(FIXED_TASK_URL, "env_…ef", 30.0, 0.01, report=HealthReport(FIXED_TASK_URL, attempts))


def test_verify_attempts_of_any_shape_become_rows():
    check = backend_check({"any_ok": False, "attempts": [
        {"status": 200},
        {"status": "400"},
        {"endpoint": "/health", "header": "Bearer", "key_prefix": "env_ke", "status": None, "ok": False,
         "error": "ConnectError: connection refused", "latency_ms": "3.5"},
        {},
        {"endpoint": "/task_info", "status": 400, "ok": False, "detail": {"error": {"code": "unauthorised"}}},
        "not a dict",
    ]})
    found = backend_rows(check)[1:]
    assert [(r.status, r.verdict) for r in found] == [
        (200, Verdict.OK), (400, Verdict.FAILED), (None, Verdict.FAILED), (None, Verdict.FAILED),
        (400, Verdict.FAILED)]
    assert found[2].tried == "/health · Bearer · env_…" and found[2].latency_ms == 3.5
    assert found[2].reason == "ConnectError: connection refused"
    assert found[3].tried == "(the backend did not say)" and found[3].reason == "no answer"
    assert "rejected this stored key" in found[4].reason and "unauthorised" in found[4].reason


def test_a_backend_with_no_stored_key_says_so():
    check = backend_check({"any_ok": False, "candidates_first15": [], "attempts": [],
                           "detail": "The embedded backend holds no ENVIRONMENT_API_KEY to try"})
    row = backend_rows(check)[-1]
    assert row.verdict is Verdict.FAILED and "holds no ENVIRONMENT_API_KEY" in row.reason
    verdict = overall_verdict(check, healthy_task_app())
    assert not verdict.ready
    assert verdict.headline == ("The backend holds no key this task app accepts: it has no "
                                "ENVIRONMENT_API_KEY stored for your org.")
    assert "synth-ai setup" in verdict.problems[0].fix


def test_key_prefixes_never_show_more_than_the_masks_four_characters():
    assert key_prefix_hint(ENV_KEY) == "env_…"
    assert key_prefix_hint("env_…ef") == "env_…"
    assert key_prefix_hint("short12") == "shor…"  # a "first 15" of a short key is the whole key
    assert key_prefix_hint(None) == ""


def test_both_checks_passing_is_ready():
    verdict = overall_verdict(backend_check({"any_ok": True, "attempts": [{"status": 200}]}), healthy_task_app())
    assert verdict.ready and verdict.headline == "Ready: press enter to preview the payload"


# --------------------------------------------------------------------------- snapshots (fixed data)


def fixed_verify_result() -> VerifyResult:
    body = {"any_ok": True, "candidates_first15": ["env_key_012345"], "attempts": [
        {"endpoint": "/health", "header": "X-API-Key", "key_prefix": "env_…ef", "status": 200,
         "latency_ms": 12.0, "ok": True},
        {"endpoint": "/task_info", "header": "X-API-Key", "key_prefix": "env_…ef", "status": 200,
         "latency_ms": 9.0, "ok": True}]}
    return VerifyResult(200, body, ApiResponse(200, body, json.dumps(body)))


async def fixed_health_report(env_key: str, task_url: str = FIXED_TASK_URL):
    """A real health check against canned answers (the reasons are the real ones); latencies fixed."""
    def answer(request: httpx.Request) -> httpx.Response:
        if request.headers.get("X-API-Key") != ENV_KEY:
            return httpx.Response(400, json={"detail": {"error": {
                "code": "unauthorised", "message": "API key missing or invalid",
                "allowed_first15": [ENV_KEY[:15]], "allowed_count": 1}}})
        return httpx.Response(200, json={"healthy": True} if request.url.path == "/health" else {"taskset": {}})

    report = await check_task_app(task_url, env_key, transport=httpx.MockTransport(answer))
    for attempt, latency in zip(report.attempts, (4.0, 6.0), strict=True):
        attempt.latency_ms = latency
    return report


def fixed_model_result() -> ModelVerifyResult:
    return ModelVerifyResult.from_body({"ok": True, "model": "Qwen/Qwen3-4B", "trains": "lm",
                                        "parameters": 4_022_468_096, "bytes": 8_044_936_192,
                                        "template": "TRL's training variant (the model's own is not "
                                                    "prefix-preserving)", "problems": [], "warnings": []})


def fixed_checks(app, monkeypatch, *, env_key: str, model_result: ModelVerifyResult | None = None) -> None:
    """The session answers with fixed results; the screen's clock stands still."""
    async def verify(*, timeout: float = 30.0):
        return fixed_verify_result()

    async def health(*, timeout: float = 30.0):
        return await fixed_health_report(env_key)

    async def verify_model(*, timeout: float = 30.0):
        return model_result or fixed_model_result()

    monkeypatch.setattr(app.session, "verify", verify)
    monkeypatch.setattr(app.session, "health", health)
    monkeypatch.setattr(app.session, "verify_model", verify_model)
    monkeypatch.setattr(VerificationScreen, "clock", staticmethod(lambda: 100.0))


def snapshot_app(verify_app, monkeypatch, *, env_key: str = ENV_KEY, model_result: ModelVerifyResult | None = None):
    app = verify_app(backend=FIXED_BACKEND, task_url=FIXED_TASK_URL, env_key=env_key, idempotency="fixed-key")
    fixed_checks(app, monkeypatch, env_key=env_key, model_result=model_result)
    return app


async def settle(pilot) -> None:
    await checks_done(pilot)
    await pilot.pause()


def assert_snapshot_has_no_secrets(app) -> None:
    assert_no_secrets(app.export_screenshot())


async def settled_without_secrets(pilot) -> None:
    """Before a snapshot of the finished checks: wait for them, then make sure no secret is drawn."""
    await settle(pilot)
    assert_snapshot_has_no_secrets(pilot.app)


def test_snapshot_verification_ok(snap_compare, verify_app, monkeypatch):
    app = snapshot_app(verify_app, monkeypatch)
    assert snap_compare(app, terminal_size=SIZE, run_before=settled_without_secrets)


def test_snapshot_verification_model_cannot_act(snap_compare, verify_app, monkeypatch):
    """A model whose template cannot render a tool call (a problem: ✗) given too high a
    learning rate (a warning: !)."""
    result = ModelVerifyResult.from_body({"ok": False, "model": "Qwen/Qwen3-4B", "trains": "lm",
                                          "problems": [template_problem("Qwen/Qwen3-4B")],
                                          "warnings": [RATE_WARNING]})
    app = snapshot_app(verify_app, monkeypatch, model_result=result)
    assert snap_compare(app, terminal_size=SIZE, run_before=settled_without_secrets)


def test_snapshot_verification_ready_with_a_warning_below_the_fold(snap_compare, verify_app, monkeypatch):
    """80x24, a passing check with a warning out of view: the ready line counts it and says to scroll."""
    result = ModelVerifyResult.from_body({"ok": True, "model": "Qwen/Qwen3-4B", "trains": "lm",
                                          "parameters": 4_022_468_096, "problems": [], "warnings": [RATE_WARNING]})
    app = snapshot_app(verify_app, monkeypatch, model_result=result)
    assert snap_compare(app, terminal_size=(80, 24), run_before=settled_without_secrets)


def test_snapshot_verification_wrong_environment_key(snap_compare, verify_app, monkeypatch):
    app = snapshot_app(verify_app, monkeypatch, env_key=WRONG_ENV_KEY)
    assert snap_compare(app, terminal_size=SIZE, run_before=settled_without_secrets)


def test_snapshot_diagnostics_modal(snap_compare, verify_app, monkeypatch):
    app = snapshot_app(verify_app, monkeypatch, env_key=WRONG_ENV_KEY)

    async def run_before(pilot) -> None:
        await settle(pilot)
        await pilot.press("d")
        await wait_for_screen(pilot, JsonReportDialog, "the diagnostics")
        await pilot.pause()
        assert_snapshot_has_no_secrets(pilot.app)

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


@pytest.mark.parametrize("size", [(80, 24), (160, 45)])
async def test_layout_fits_small_and_large_terminals(verify_app, monkeypatch, size):
    app = snapshot_app(verify_app, monkeypatch, env_key=WRONG_ENV_KEY)
    async with app.run_test(size=size) as pilot:
        screen = await checks_done(pilot)
        verdict = screen.query_one("#verify-verdict")
        table = screen.query_one(DiagnosticsTable)
        assert verdict.region.bottom <= size[1] - 1  # above the footer
        assert table.region.width <= size[0] and table.size.height >= 6
        assert "rejected ENVIRONMENT_API_KEY" in verdict_text(screen)


@pytest.mark.parametrize("width", [60, 80, 120])
async def test_footer_keys_are_never_cut_mid_word(verify_app, monkeypatch, width):
    """Below 80 columns the palette key is left out (no stray `^` before it) and a key
    that does not fit whole is hidden, not cut (`d Diagnosti` at 60). `? Help` comes first at
    every width (at 80x24 this was test_the_help_key_is_in_the_footer_at_80x24, the same walk)."""
    whole = {"? Help", "⏎ Preview payload", "r Retry", "d Diagnostics", "b Back to env", "^q Quit", "^p Commands"}
    app = snapshot_app(verify_app, monkeypatch)
    async with app.run_test(size=(width, 24)) as pilot:
        await checks_done(pilot)
        # The footer draws its keys once it knows which fit (never a frame with a cut one).
        await wait_for(pilot, lambda: "? Help" in footer_text(app), what="the footer's keys")
        parts = re.split(r" {2,}|\n", footer_text(app))  # a footer of two rows: one line each
        shown = [part.strip(" ▏") for part in parts if part.strip(" ▏")]
        assert set(shown) <= whole, shown
        assert shown[:2] == ["? Help", "⏎ Preview payload"]
        assert ("^p Commands" in shown) == (width >= 80)  # the walk: missing at 80x24, shown on other screens


async def test_a_toast_made_from_a_message_keeps_its_brackets(verify_app, monkeypatch):
    """Issue 37 (walk 5): Enter on the Hugging Face id's ✗ showed `…or point  base at a folder`:
    the toast read the message as markup and swallowed `[model]`. Every toast is plain text."""
    problem = {"message": "HuggingFaceTB/SmolLM2-135M-Instruct is not in the backend's Hugging Face cache: "
                          "point [model] base at a folder in Hugging Face format",
               "fix": "fetch it with `hf download HuggingFaceTB/SmolLM2-135M-Instruct`"}
    result = ModelVerifyResult.from_body({"ok": False, "model": SMOL, "trains": "lm",
                                          "problems": [problem], "warnings": []})
    app = snapshot_app(verify_app, monkeypatch, model_result=result)
    async with app.run_test(size=(160, 45)) as pilot:
        await checks_done(pilot)
        await pilot.press("enter")
        await wait_for(pilot, lambda: any("Cannot continue" in n.message for n in notifications(app)),
                       what="the toast saying why")
        toasts = [toast_text(n) for n in notifications(app)]
        assert any("point [model] base at a folder" in text for text in toasts), toasts
