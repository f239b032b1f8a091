"""The env review's Modal actions against the stand-in `modal` CLI (tests/modal_standin): the
key from a secret as an unsaved masked edit, a deployed app's URL, the key sent to a secret,
cancel, and no modal installed. No secret value is ever on screen."""

from __future__ import annotations

import html
import json
import os
import shutil
from pathlib import Path

import pytest
from test_env_review import SYNTH_KEY, env_screen, row, select_row

from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession
from app.screens.dialogs.common import ErrorDialog
from app.screens.dialogs.modal_service import ModalEndpointPicker, ModalSecretPicker, ModalWait, SendToModalDialog
from app.screens.env_review import EnvReviewScreen
from app.tui import SynthTuiApp, guided_app
from support.pilot_waits import wait_for_process, wait_for_screen
from support.screen_text import notifications

MODAL_KEY = "envk_MODAL_FAKE_5f4e3d2c1b0a99887766554433"
TASK_URL = "https://ws--task-app-fastapi-app.modal.run"
EXAMPLES = Path(__file__).resolve().parents[2] / "configs" / "rl"

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
        # the picker's first frame comes after it is pushed: wait for it rather than race it
        await wait_for_process(pilot, lambda: "a little compute" in screen_text(app), "the picker to be drawn")
        await pilot.press("enter")
        await wait_for_screen(pilot, EnvReviewScreen, "the value", where=lambda shown: "ENVIRONMENT_API_KEY" in
                              shown.edited)
        assert screen.session.env.get("ENVIRONMENT_API_KEY") == MODAL_KEY
        assert "ENVIRONMENT_API_KEY" not in env_path.read_text(), "nothing saved before ctrl+s"
        assert MODAL_KEY not in screen_text(app)
        assert MODAL_KEY[:4] in " ".join(row(screen, "ENVIRONMENT_API_KEY"))
        assert all(MODAL_KEY not in str(n.message) for n in notifications(app))
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
        await wait_for_screen(pilot, SendToModalDialog, "the secret name")
        assert "REPLACED" in screen_text(app)
        app.screen.query_one("#modal-send-name").value = "fresh-secret"
        await pilot.press("enter")
        await wait_for_process(pilot, lambda: any("sent to Modal secret fresh-secret" in str(n.message)
                                            for n in notifications(app)), "the send")
        (note,) = [n for n in notifications(app) if "Send to Modal" in str(n.title)]
        assert "sent to Modal secret fresh-secret and confirmed" in str(note.message)
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
        await wait_for_process(pilot, lambda: any("Cancelled" in str(n.message) for n in notifications(app)),
                         "the cancel")
        assert screen.session.env.get("ENVIRONMENT_API_KEY") is None


async def test_without_modal_the_error_says_how_to_install_it(make_app, project, monkeypatch):
    monkeypatch.setenv("PATH", str(project))  # no modal anywhere
    monkeypatch.setattr("app.core.modal_process.module_installed", lambda: False)
    (project / ".env").write_text(f"SYNTH_API_KEY={SYNTH_KEY}\n")
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await select_row(pilot, screen, "ENVIRONMENT_API_KEY")
        await pilot.press("m")
        await wait_for_screen(pilot, ErrorDialog, "the error")
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


async def test_a_modal_app_typo_opens_the_env_review_with_the_problem_shown(project, standin, capsys):
    """A failing --modal-app no longer ends the TUI before any screen: the env review opens
    (even though the .env is complete and would skip it), says what failed and how to fix it,
    and m there takes the endpoint, which clears the notice. Nothing started a container."""
    config = project / "configs" / "crafter_qwen4b.toml"
    shutil.copy(EXAMPLES / "crafter_qwen4b.toml", config)
    env_path = project / ".env"
    env_path.write_text(f"SYNTH_API_KEY={SYNTH_KEY}\nENVIRONMENT_API_KEY={MODAL_KEY}\nTASK_APP_URL=http://127.0.0.1:9\n")
    session = LaunchSession(LaunchOptions(cwd=project, config_paths=[str(config)], env_files=[str(env_path)],
                                          modal_secret="task-app-env", modal_app="task-ap"),
                            shell=dict(os.environ))
    app = guided_app(session)
    assert app.start == "env"
    assert "Modal container" not in capsys.readouterr().err
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await wait_for_process(pilot, lambda: bool(screen.query("#env-modal-problem")), "the notice")
        text = screen_text(app)
        assert "Modal app task-ap was not found" in text and "modal app list" in text
        await select_row(pilot, screen, "TASK_APP_URL")
        await pilot.press("m")
        await wait_for_screen(pilot, ModalEndpointPicker, "the endpoints")
        await pilot.press("enter")
        await wait_for_process(pilot, lambda: not screen.query("#env-modal-problem"), "the notice to go")
        assert session.modal_failure is None
    assert standin.containers() == []


async def test_a_secret_typo_opens_the_env_review_naming_the_close_secret(project, standin, capsys):
    (project / ".env").write_text(f"SYNTH_API_KEY={SYNTH_KEY}\n")
    session = LaunchSession(LaunchOptions(cwd=project, env_files=[str(project / ".env")],
                                          modal_secret="task-app-evn"), shell=dict(os.environ))
    app = guided_app(session)  # no --config: the picker first, the notice waits for the env review
    assert "Modal container" not in capsys.readouterr().err
    app.start = "env"
    async with app.run_test(size=(120, 36)) as pilot:
        screen = await env_screen(pilot)
        await wait_for_process(pilot, lambda: bool(screen.query("#env-modal-problem")), "the notice")
        assert "Did you mean task-app-env?" in screen_text(app)
    assert standin.containers() == []


async def test_a_send_that_did_not_land_is_said_so(make_app, project, standin):
    standin.state["create_lands"] = False  # the CLI says it worked; nothing is stored
    standin.save()
    (project / ".env").write_text(f"SYNTH_API_KEY={SYNTH_KEY}\nENVIRONMENT_API_KEY={MODAL_KEY}\n")
    app = make_app(start="env")
    async with app.run_test(size=(120, 36)) as pilot:
        await env_screen(pilot)
        await pilot.press("u")
        await wait_for_screen(pilot, SendToModalDialog, "the secret name")
        app.screen.query_one("#modal-send-name").value = "fresh-secret"
        await pilot.press("enter")
        await wait_for_process(pilot, lambda: any("could not be confirmed" in str(n.message)
                                                  for n in notifications(app)), "the check")
        (note,) = [n for n in notifications(app) if "Send to Modal" in str(n.title)]
        assert note.severity == "warning" and "does not list fresh-secret" in str(note.message)
        assert "and confirmed" not in str(note.message) and MODAL_KEY not in str(note.message)
