"""The env review's Modal actions against the stand-in `modal` CLI (tests/modal_standin): the
key from a secret as an unsaved masked edit, a deployed app's URL, the key sent to a secret,
cancel, and no modal installed. No secret value is ever on screen."""

from __future__ import annotations

import html
import json
import os

import pytest
from test_env_review import SYNTH_KEY, env_screen, row, select_row

from app.core.session import LaunchOptions, LaunchSession
from app.screens.env_review import EnvReviewScreen
from app.screens.modals import ErrorModal
from app.tui import SynthTuiApp, guided_app
from pilot_waits import wait_for_process, wait_for_screen
from widgets.modal_dialogs import ModalEndpointPicker, ModalSecretPicker, ModalWait, SendToModalModal

MODAL_KEY = "envk_MODAL_FAKE_5f4e3d2c1b0a99887766554433"
TASK_URL = "https://ws--task-app-fastapi-app.modal.run"

pytestmark = pytest.mark.usefixtures("project_configs_only")


@pytest.fixture
def standin(modal_standin):
    modal_standin.state["secrets"] = {"unrelated": {"X": "1"}, "task-app-env": {"ENVIRONMENT_API_KEY": MODAL_KEY}}
    modal_standin.state["apps"] = [
        {"app_id": "ap-" + "a" * 22, "name": "task-app", "state": "deployed", "tasks": 1,
         "functions": {"fastapi_app": TASK_URL, "worker": None}},
        {"app_id": "ap-" + "b" * 22, "name": "old-app", "state": "stopped", "tasks": 0,
         "functions": {"fastapi_app": "https://old--fastapi-app.modal.run"}},
    ]
    modal_standin.save()
    return modal_standin


def screen_text(app) -> str:
    """The screen's text (a screenshot's, spaces as spaces)."""
    return html.unescape(app.export_screenshot()).replace("\xa0", " ")


async def test_the_key_from_a_modal_secret_arrives_masked_and_unsaved(make_app, project, standin):
    env_path = project / ".env"
    env_path.write_text(f"SYNTH_API_KEY={SYNTH_KEY}\n")
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await select_row(pilot, screen, "ENVIRONMENT_API_KEY")
        await pilot.press("m")
        await wait_for_screen(pilot, ModalSecretPicker, "the secret list")
        picker = app.screen
        assert picker.names[0] == "task-app-env", "names holding env first"
        assert "a little compute" in screen_text(app)
        await pilot.press("enter")
        await wait_for_screen(pilot, EnvReviewScreen, "the value", where=lambda shown: "ENVIRONMENT_API_KEY" in
                              shown.edited)
        assert screen.session.env.get("ENVIRONMENT_API_KEY") == MODAL_KEY
        assert "ENVIRONMENT_API_KEY" not in env_path.read_text(), "nothing saved before ctrl+s"
        assert MODAL_KEY not in screen_text(app)
        assert MODAL_KEY[:4] in " ".join(row(screen, "ENVIRONMENT_API_KEY"))
        assert all(MODAL_KEY not in str(n.message) for n in app._notifications)
    argv = "\n".join(" ".join(call["argv"]) for call in standin.calls())
    assert "shell" in argv and MODAL_KEY not in argv


async def test_task_app_url_from_a_deployed_modal_app(make_app, project, standin):
    (project / ".env").write_text(f"SYNTH_API_KEY={SYNTH_KEY}\n")
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await select_row(pilot, screen, "TASK_APP_URL")
        await pilot.press("m")
        await wait_for_screen(pilot, ModalEndpointPicker, "the endpoints")
        assert [url for *_, url in app.screen.endpoints] == [TASK_URL], "deployed apps' web functions only"
        await pilot.press("enter")
        await wait_for_process(pilot, lambda: screen.session.env.get("TASK_APP_URL") == TASK_URL, "the URL")
        assert TASK_URL in " ".join(row(screen, "TASK_APP_URL")), "a URL is shown in full"


async def test_send_to_modal_writes_the_key_into_the_named_secret(make_app, project, standin):
    (project / ".env").write_text(f"SYNTH_API_KEY={SYNTH_KEY}\nENVIRONMENT_API_KEY={MODAL_KEY}\n")
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        await env_screen(pilot)
        await pilot.press("u")
        await wait_for_screen(pilot, SendToModalModal, "the secret name")
        assert "REPLACED" in screen_text(app)
        app.screen.query_one("#modal-send-name").value = "fresh-secret"
        await pilot.press("enter")
        await wait_for_process(pilot, lambda: any("sent to Modal secret fresh-secret" in str(n.message)
                                            for n in app._notifications), "the send")
    state = json.loads(standin.path.read_text())
    assert state["secrets"]["fresh-secret"] == {"ENVIRONMENT_API_KEY": MODAL_KEY}
    assert all(MODAL_KEY not in " ".join(call["argv"]) for call in standin.calls())


async def test_esc_while_the_container_starts_reads_nothing(make_app, project, standin):
    standin.state["delay"] = 30  # the container never starts within the test
    standin.save()
    (project / ".env").write_text(f"SYNTH_API_KEY={SYNTH_KEY}\n")
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await select_row(pilot, screen, "ENVIRONMENT_API_KEY")
        await pilot.press("m")
        await wait_for_screen(pilot, ModalSecretPicker, "the secret list")
        await pilot.press("enter")
        await wait_for_screen(pilot, ModalWait, "the wait")
        await pilot.press("escape")
        await wait_for_process(pilot, lambda: any("Cancelled" in str(n.message) for n in app._notifications),
                         "the cancel")
        assert screen.session.env.get("ENVIRONMENT_API_KEY") is None


async def test_without_modal_the_error_says_how_to_install_it(make_app, project, monkeypatch):
    monkeypatch.setenv("PATH", str(project))  # no modal anywhere
    monkeypatch.setattr("app.core.modal._module_installed", lambda: False)
    (project / ".env").write_text(f"SYNTH_API_KEY={SYNTH_KEY}\n")
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await select_row(pilot, screen, "ENVIRONMENT_API_KEY")
        await pilot.press("m")
        await wait_for_screen(pilot, ErrorModal, "the error")
        assert "pip install 'synth-tui[modal]'" in (app.screen.hint or "")


async def test_the_modal_secret_flag_fills_the_key_before_the_flow_starts(project, standin, capsys):
    env_path = project / ".env"
    env_path.write_text(f"SYNTH_API_KEY={SYNTH_KEY}\n")
    session = LaunchSession(LaunchOptions(cwd=project, env_files=(str(env_path),), modal_secret="task-app-env"),
                            shell=dict(os.environ))  # the stand-in and its state, as the shell has them
    guided_app(session)
    assert "Modal container" in capsys.readouterr().err
    key = next(k for k in session.resolved if k.name == "ENVIRONMENT_API_KEY")
    assert (key.source, key.origin, key.value) == ("modal", "Modal secret task-app-env", MODAL_KEY)
    app = SynthTuiApp(session, start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        cells = " ".join(row(screen, "ENVIRONMENT_API_KEY"))
        assert "Modal" in cells and MODAL_KEY not in screen_text(app)
    assert "ENVIRONMENT_API_KEY" not in env_path.read_text()
