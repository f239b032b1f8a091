"""Modal (docs/modal.md): app/core/modal.py against the stand-in `modal` CLI
(tests/modal_standin/modal), the session's use of it, and --modal-secret / --modal-app end to end."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from app.core import modal, modal_errors, modal_process
from app.core.errors import ExitCode
from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession
from app.core.modal import ModalCli
from app.core.modal_errors import (
    ModalCancelled,
    ModalCommandFailed,
    ModalKeyNotInSecret,
    ModalNotInstalled,
    ModalNotLoggedIn,
    ModalSecretNotFound,
    ModalTimeout,
    ModalUsageError,
)
from support.pilot_waits import poll_until

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "configs" / "rl" / "demo.toml"
# Distinctive, and holding what a shell or a .env parser would mangle.
VALUE = "sk_env_DISTINCTIVE_7f3a9c'q\"$HOME ${USER} `id` x"
APP_ID = "ap-" + "a" * 22


def full_text(exc: BaseException) -> str:
    return " ".join([str(exc), repr(exc), getattr(exc, "render", lambda: "")(), repr(exc.args)])


@pytest.fixture
def standin(modal_standin):
    modal_standin.state["secrets"] = {
        "other": {"UNRELATED": "x"},
        "task-app-env": {"ENVIRONMENT_API_KEY": VALUE, "OPENAI_API_KEY": "sk-openai-DISTINCT-000111"},
        "empty-env": {"ENVIRONMENT_API_KEY": ""},
    }
    modal_standin.state["apps"] = [
        {"app_id": "ap-" + "b" * 22, "name": "old-app", "state": "stopped", "tasks": 0,
         "functions": {"fastapi_app": "https://old--fastapi-app.modal.run"}},
        {"app_id": APP_ID, "name": "task-app", "state": "deployed", "tasks": 1,
         "functions": {"fastapi_app": "https://ws--task-app-fastapi-app.modal.run", "worker": None}},
        {"app_id": "ap-" + "c" * 22, "name": "two-webs", "state": "deployed", "tasks": 0,
         "functions": {"api": "https://ws--two-webs-api.modal.run", "ui": "https://ws--two-webs-ui.modal.run"}},
    ]
    modal_standin.save()
    return modal_standin


def argv_text(standin) -> str:
    return "\n".join(" ".join(call["argv"]) for call in standin.calls())


# --------------------------------------------------------------------------- secrets


def test_secrets_are_listed_with_the_env_ones_first(standin):
    names = [s.name for s in ModalCli().list_secrets()]
    assert names == ["empty-env", "task-app-env", "other"]  # env first, each group newest first (Modal's order)
    assert all(s.created_at for s in ModalCli().list_secrets())


def test_a_value_is_read_through_a_container_and_never_put_on_a_command_line(standin):
    assert ModalCli().read_secret_value("task-app-env") == VALUE
    shells = [c["argv"] for c in standin.calls() if c["argv"][1] == "shell"]
    assert len(shells) == 1 and shells[0][2:4] == ["--secret", "task-app-env"] and "--cmd" in shells[0]
    assert "DISTINCTIVE" not in argv_text(standin)
    # the existence check ran first, without a container
    assert [c["argv"][1:3] for c in standin.calls()][:2] == [["secret", "list"], ["shell", "--secret"]]


def test_only_the_asked_variable_is_printed_between_markers_despite_the_banner(standin):
    standin.state["banner"] = True
    standin.save()
    assert ModalCli().read_secret_value("task-app-env", "OPENAI_API_KEY") == "sk-openai-DISTINCT-000111"


def test_a_missing_secret_starts_no_container(standin):
    with pytest.raises(ModalSecretNotFound) as caught:
        ModalCli().read_secret_value("nope-env")
    assert "nope-env" in caught.value.message and "modal secret list" in caught.value.hint
    assert "task-app-env" in caught.value.message  # what there is, to pick from
    assert caught.value.exit_code == ExitCode.CHECKS_FAILED
    assert not [c for c in standin.calls() if c["argv"][1] == "shell"]


def test_a_missing_secret_reported_by_the_container_start_is_named_too(standin):
    with pytest.raises(ModalSecretNotFound) as caught:
        ModalCli().read_secret_value("nope-env", check_exists=False)
    assert "nope-env" in caught.value.message


def test_a_secret_without_the_key_names_the_secret_and_the_key(standin):
    with pytest.raises(ModalKeyNotInSecret) as caught:
        ModalCli().read_secret_value("other")
    assert "other" in caught.value.message and "ENVIRONMENT_API_KEY" in caught.value.message
    assert "x" != caught.value.message and "UNRELATED" not in full_text(caught.value)


def test_an_empty_value_is_as_good_as_missing(standin):
    with pytest.raises(ModalKeyNotInSecret, match="empty"):
        ModalCli().read_secret_value("empty-env")


def test_names_modal_would_refuse_are_usage_errors_and_not_echoed(standin):
    for bad in ("--force", "has space", "x" * 65, APP_ID, ""):
        with pytest.raises(ModalUsageError) as caught:
            ModalCli().read_secret_value(bad)
        assert caught.value.exit_code == ExitCode.USAGE and (not bad or bad not in caught.value.message)
    assert not standin.calls()


def test_writing_a_secret_goes_through_a_private_file_that_is_removed(standin):
    assert ModalCli().write_secret("task-app-env", {"ENVIRONMENT_API_KEY": VALUE}) == ["ENVIRONMENT_API_KEY"]
    (create,) = [c for c in standin.calls() if c["argv"][1:3] == ["secret", "create"]]
    assert create["argv"][3:4] == ["task-app-env"] and "--force" in create["argv"]
    assert "DISTINCTIVE" not in argv_text(standin)
    (path, facts), = create["files"].items()
    assert facts["mode"] == "0o600"  # while it existed
    assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))
    # --force replaces the whole secret: the key it held besides is gone (docs/modal.md#writing-a-secret)
    assert standin.reload()["secrets"]["task-app-env"] == {"ENVIRONMENT_API_KEY": VALUE}
    assert ModalCli().read_secret_value("task-app-env") == VALUE  # no quoting or ${} expansion on the way


def test_a_failed_write_removes_the_file_too(standin):
    standin.state["logged_in"] = False
    standin.save()
    with pytest.raises(ModalNotLoggedIn):
        ModalCli().write_secret("new-env", {"ENVIRONMENT_API_KEY": VALUE})
    (create,) = [c for c in standin.calls() if c["argv"][1:3] == ["secret", "create"]]
    (path,) = create["files"]
    assert not os.path.exists(path)


def test_a_send_is_confirmed_by_the_secret_list_without_a_container(standin):
    cli = ModalCli()
    created = cli.send_secret("fresh-env", {"ENVIRONMENT_API_KEY": VALUE})
    assert created.confirmed and "fresh-env created" in created.detail and "ENVIRONMENT_API_KEY" in created.detail
    replaced = cli.send_secret("task-app-env", {"ENVIRONMENT_API_KEY": VALUE})  # existed, with a 2025 time
    assert replaced.confirmed and "task-app-env replaced" in replaced.detail
    assert standin.reload()["secrets"]["task-app-env"] == {"ENVIRONMENT_API_KEY": VALUE}
    assert not standin.containers()
    assert [c["argv"][1:3] for c in standin.calls()][:3] == [["secret", "list"], ["secret", "create"],
                                                              ["secret", "list"]]
    assert "DISTINCTIVE" not in argv_text(standin) + created.detail + replaced.detail


def test_a_send_that_did_not_land_is_said_to_be_unconfirmed(standin):
    standin.state["create_lands"] = False  # the CLI says it worked; nothing is stored
    standin.save()
    fresh = ModalCli().send_secret("fresh-env", {"ENVIRONMENT_API_KEY": VALUE})
    assert not fresh.confirmed and "does not list fresh-env" in fresh.detail
    same = ModalCli().send_secret("task-app-env", {"ENVIRONMENT_API_KEY": VALUE})
    assert not same.confirmed and "creation time it had before" in same.detail


def test_a_send_whose_cli_reports_other_keys_is_unconfirmed(standin, tmp_path):
    odd = tmp_path / "modal"  # the stand-in, whose create line names no key
    real = standin.bin_dir / "modal"
    odd.write_text("#!/bin/sh\nif [ \"$1 $2\" = 'secret create' ]; then\n"
                   f"  {real} \"$@\" >/dev/null && echo \"Created a new secret '$3' with the key\"\n"
                   "  exit $?\nfi\n"
                   f"exec {real} \"$@\"\n")
    odd.chmod(0o755)
    sent = ModalCli(str(odd)).send_secret("fresh-env", {"ENVIRONMENT_API_KEY": VALUE})
    assert not sent.confirmed and "not ENVIRONMENT_API_KEY" in sent.detail


# --------------------------------------------------------------------------- apps


def test_apps_are_listed_deployed_first(standin):
    apps = ModalCli().list_apps()
    assert [a.deployed for a in apps] == [True, True, False]
    assert {a.name for a in apps} == {"task-app", "two-webs", "old-app"}


def test_an_apps_only_web_function_is_its_task_app_url(standin):
    cli = ModalCli()
    assert cli.web_urls("task-app") == [("fastapi_app", "https://ws--task-app-fastapi-app.modal.run")]
    assert cli.task_app_endpoint("task-app").url == "https://ws--task-app-fastapi-app.modal.run"
    assert cli.task_app_endpoint(APP_ID).function == "fastapi_app"  # an app id works too


def test_several_web_functions_are_listed_for_the_user_to_choose(standin):
    cli = ModalCli()
    with pytest.raises(ModalUsageError) as caught:
        cli.task_app_endpoint("two-webs")
    assert "two-webs/api" in caught.value.message and "two-webs/ui" in caught.value.message
    assert "--modal-app two-webs/FUNCTION" in caught.value.hint
    assert cli.task_app_endpoint("two-webs/ui").url == "https://ws--two-webs-ui.modal.run"
    with pytest.raises(modal_errors.ModalNoWebEndpoint):
        cli.task_app_endpoint("two-webs/nope")


def test_a_stopped_or_missing_app_is_said_plainly(standin):
    with pytest.raises(modal_errors.ModalNoWebEndpoint, match="stopped"):
        ModalCli().task_app_endpoint("old-app")
    with pytest.raises(modal_errors.ModalAppNotFound) as caught:
        ModalCli().task_app_endpoint("no-such-app")
    assert "modal app list" in caught.value.hint


def test_every_deployed_endpoint_for_a_picker(standin):
    found = modal.deployed_endpoints(ModalCli())
    assert [(e.app, e.function) for e in found] == [("task-app", "fastapi_app"), ("two-webs", "api"),
                                                     ("two-webs", "ui")]


# --------------------------------------------------------------------------- failures


def test_without_modal_every_call_says_how_to_install_it(tmp_path):
    cli = ModalCli(env={"PATH": str(tmp_path)}, use_module=False)
    assert not cli.available()
    for call in (cli.list_secrets, lambda: cli.read_secret_value("x-env"), cli.list_apps,
                 lambda: cli.write_secret("x-env", {"ENVIRONMENT_API_KEY": VALUE}), lambda: cli.web_urls("app")):
        with pytest.raises(ModalNotInstalled) as caught:
            call()
        assert "pip install 'synth-tui[modal]'" in caught.value.hint
        assert caught.value.exit_code == ExitCode.CHECKS_FAILED


def test_not_logged_in_says_modal_token_new(standin):
    standin.state["logged_in"] = False
    standin.save()
    cli = ModalCli()
    for call in (cli.list_secrets, lambda: cli.read_secret_value("task-app-env", check_exists=False),
                 cli.list_apps, lambda: cli.web_urls("task-app")):
        with pytest.raises(ModalNotLoggedIn) as caught:
            call()
        assert "modal token new" in caught.value.hint


def test_a_slow_container_times_out_and_is_stopped(standin):
    standin.state["delay"] = 60
    standin.save()
    started = time.monotonic()
    with pytest.raises(ModalTimeout) as caught:
        # check_exists=False: the 1 s is the container's (listing alone can take longer on a loaded machine)
        ModalCli().read_secret_value("task-app-env", timeout=1.0, check_exists=False)
    assert time.monotonic() - started < 1.0 + modal_process.STOP_GRACE_S + 5
    assert "within 1 s" in caught.value.message and "stopped" in caught.value.message
    assert "DISTINCTIVE" not in full_text(caught.value)


def test_a_call_can_be_cancelled_from_another_thread(standin):
    standin.state["delay"] = 60
    standin.save()
    cancel = threading.Event()
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            ModalCli().read_secret_value("task-app-env", cancel=cancel)
        except BaseException as exc:  # handed to the test thread
            outcome.append(exc)

    worker = threading.Thread(target=read)
    worker.start()
    poll_until(lambda: any(c["argv"][1] == "shell" for c in standin.calls()), what="the container to start")
    cancel.set()
    worker.join(timeout=modal_process.STOP_GRACE_S + 5)
    assert not worker.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], ModalCancelled)
    assert outcome[0].exit_code == ExitCode.INTERRUPTED


def test_an_older_cli_without_a_command_is_told_to_upgrade(standin, tmp_path):
    old = tmp_path / "modal"  # the stand-in, minus `app info` (before modal 1.6)
    old.write_text("#!/bin/sh\nif [ \"$1 $2\" = 'app info' ]; then\n"
                   "  echo 'Usage: modal app [OPTIONS] COMMAND' >&2\n"
                   "  echo \"Error: No such command 'info'.\" >&2; exit 2\n"
                   f"fi\nexec {standin.bin_dir / 'modal'} \"$@\"\n")
    old.chmod(0o755)
    with pytest.raises(ModalCommandFailed) as caught:
        ModalCli(str(old)).web_urls("task-app")
    assert "No such command" in caught.value.message and "pip install -U" in caught.value.hint


@pytest.mark.parametrize("scenario", ["missing key", "empty", "timeout", "not found", "logged out", "ok"])
def test_the_value_is_in_no_message_whatever_happens(standin, scenario):
    """Property: a distinctive value never reaches an exception (message, hint, repr)."""
    secrets = standin.state["secrets"]
    name = "task-app-env"
    if scenario == "missing key":
        secrets[name] = {"OTHER": VALUE}
    elif scenario == "empty":
        secrets[name] = {"ENVIRONMENT_API_KEY": "", "X": VALUE}
    elif scenario == "timeout":
        standin.state["delay"] = 60
    elif scenario == "not found":
        name = "missing-env"
    elif scenario == "logged out":
        standin.state["logged_in"] = False
    standin.save()
    try:
        value = ModalCli().read_secret_value(name, timeout=1.0)
    except modal_errors.ModalError as exc:
        assert "DISTINCTIVE" not in full_text(exc)
    else:
        assert scenario == "ok" and value == VALUE
    assert "DISTINCTIVE" not in argv_text(standin)


# --------------------------------------------------------------------------- session


def test_the_session_uses_a_modal_key_over_the_shell_and_file_and_never_writes_it(standin, tmp_path):
    env = tmp_path / ".env"
    env.write_text("ENVIRONMENT_API_KEY=from_the_file_000\nTASK_APP_URL=http://127.0.0.1:9\n")
    before = env.read_bytes()
    session = LaunchSession(LaunchOptions(env_files=[str(env)], modal_secret="task-app-env", cwd=tmp_path),
                            shell={**os.environ, "ENVIRONMENT_API_KEY": "from_the_shell_000"})
    session.open_unattended_env()
    notices: list[str] = []
    session.fetch_modal_values(announce=notices.append)
    key = next(k for k in session.resolved if k.name == "ENVIRONMENT_API_KEY")
    assert key.value == VALUE and key.source == "modal" and key.where == "Modal secret task-app-env"
    assert VALUE not in repr(key) and VALUE in session.secret_values()
    assert notices == [modal.container_notice("task-app-env")]
    session.replace_env(session.env)  # a reload keeps it
    assert resolved_value(session, "ENVIRONMENT_API_KEY") == VALUE
    assert env.read_bytes() == before
    session.forget_modal_value("ENVIRONMENT_API_KEY")
    assert resolved_value(session, "ENVIRONMENT_API_KEY") == "from_the_shell_000"


def resolved_value(session: LaunchSession, name: str) -> str | None:
    return next(k for k in session.resolved if k.name == name).value


def test_the_task_url_flag_wins_over_a_modal_app_url(standin):
    session = LaunchSession(LaunchOptions(), shell={})
    session.use_modal_value("TASK_APP_URL", "https://x.modal.run", "Modal app a/f")
    assert next(k for k in session.resolved if k.name == "TASK_APP_URL").value == "https://x.modal.run"
    session.override(task_url="http://127.0.0.1:1")
    assert next(k for k in session.resolved if k.name == "TASK_APP_URL").source == "preview"  # still over Modal


def test_modal_flags_are_checked_when_given():
    with pytest.raises(ModalUsageError):
        LaunchOptions(modal_secret="-e")
    with pytest.raises(ModalUsageError):
        LaunchOptions(modal_app="app/has space")
    with pytest.raises(Exception, match="--task-url and --modal-app"):
        LaunchOptions(modal_app="task-app", task_url="http://127.0.0.1:1")


# --------------------------------------------------------------------------- headless end to end


@pytest.fixture
def headless_world(standin, tmp_path):
    from app.local.servers import start_taskapp

    key = "sk_env_DISTINCTIVE_9d2f4b6a8c0e1f3a5b7c9d1e"
    handle = start_taskapp(env_api_keys=[key])
    standin.state["secrets"]["task-app-env"] = {"ENVIRONMENT_API_KEY": key}
    standin.state["apps"][1]["functions"] = {"fastapi_app": handle.url}
    standin.save()
    env = tmp_path / "project" / ".env"
    env.parent.mkdir()
    env.write_text(f"# no ENVIRONMENT_API_KEY here\nTASK_APP_URL={handle.url}\n")
    yield {"key": key, "env": env, "task_app": handle, "cwd": env.parent}
    handle.stop()


def train_argv(world, *flags: str) -> list[str]:
    return ["train", "--type", "rl", "--no-tui", "--config", str(DEMO), "--env-file", str(world["env"]),
            "--backend", "local", *flags, "--dry-run"]


def test_done_when_the_key_comes_from_a_modal_secret(headless_world):
    """The whole path: the installed command, a stand-in `modal` on PATH whose secret
    holds the task app's key, the embedded backend: verification and health pass, exit 0, and
    the key appears nowhere in the output."""
    exe = Path(sys.executable).with_name("synth-tui")
    before = headless_world["env"].read_bytes()
    result = subprocess.run([str(exe), *train_argv(headless_world, "--modal-secret", "task-app-env")],
                            capture_output=True, text=True, cwd=headless_world["cwd"], env=dict(os.environ),
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert ("Starting a Modal container to read ENVIRONMENT_API_KEY from secret task-app-env (takes a few seconds, "
            "costs a little compute)…") in result.stderr
    assert "(Modal secret task-app-env)" in result.stdout
    assert "Backend verify: OK" in result.stdout and "Task app health: OK" in result.stdout
    assert "Dry run: no job was created." in result.stdout
    assert headless_world["key"] not in result.stdout + result.stderr
    assert "DISTINCTIVE" not in result.stdout + result.stderr
    assert headless_world["env"].read_bytes() == before  # the key is not written to the .env


def test_the_task_app_url_from_a_modal_app(headless_world, capsys):
    from app.cli.dispatch import main

    headless_world["env"].write_text("# nothing here\n")
    code = main(train_argv(headless_world, "--modal-secret", "task-app-env", "--modal-app", "task-app"))
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Looking up the web endpoint of Modal app task-app" in err
    assert f"TASK_APP_URL in current sources: {headless_world['task_app'].url} (Modal app task-app/fastapi_app)" in out
    assert headless_world["key"] not in out + err


def test_without_modal_the_run_says_how_to_install_it(headless_world, monkeypatch, tmp_path, capsys):
    from app.cli.dispatch import main

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(modal_process, "module_installed", lambda: False)
    code = main(train_argv(headless_world, "--modal-secret", "task-app-env"))
    out, err = capsys.readouterr()
    assert code == ExitCode.CHECKS_FAILED
    assert "Modal's command-line tool is not installed" in err and "pip install 'synth-tui[modal]'" in err
    assert "Traceback" not in err


def test_not_logged_in_ends_the_run_with_the_fix(headless_world, standin, capsys):
    from app.cli.dispatch import main

    standin.state["logged_in"] = False
    standin.save()
    code = main(train_argv(headless_world, "--modal-secret", "task-app-env"))
    _, err = capsys.readouterr()
    assert code == ExitCode.CHECKS_FAILED and "modal token new" in err and "Traceback" not in err


def test_a_typo_in_the_secret_name_costs_no_container_and_names_the_close_ones(headless_world, standin, capsys):
    from app.cli.dispatch import main

    code = main(train_argv(headless_world, "--modal-secret", "task-app-evn"))
    _, err = capsys.readouterr()
    assert code == ExitCode.CHECKS_FAILED and "Traceback" not in err
    assert "There is no Modal secret named task-app-evn. Did you mean task-app-env?" in err
    assert "Starting a Modal container" not in err  # none started, so none is announced
    assert standin.containers() == []


def test_a_typo_in_the_app_name_costs_no_container(headless_world, standin, capsys):
    """The app lookup is free and comes before the secret's container: a wrong --modal-app
    ends the run before anything is paid for."""
    from app.cli.dispatch import main

    code = main(train_argv(headless_world, "--modal-secret", "task-app-env", "--modal-app", "task-ap"))
    _, err = capsys.readouterr()
    assert code == ExitCode.CHECKS_FAILED and "Modal app task-ap was not found" in err
    assert "Starting a Modal container" not in err
    assert standin.containers() == []


def test_the_container_is_announced_right_before_it_starts_and_only_then(standin):
    session = LaunchSession(LaunchOptions(modal_secret="task-app-env", modal_app="task-app"), shell=dict(os.environ))
    notices: list[str] = []

    def announce(text: str) -> None:
        notices.append(text)
        if "container" in text:  # nothing paid for yet when it is said
            assert standin.containers() == []

    session.fetch_modal_values(announce=announce)
    assert [n.split(" ")[0] for n in notices] == ["Looking", "Starting"]
    assert standin.containers() == [{"secrets": ["task-app-env"]}]


def test_the_printer_never_sees_the_value(headless_world):
    from app.cli.parser import build_parser, normalise_argv
    from app.commands.embedded_backend import run_with_embedded_backend
    from app.headless.printer import Printer
    from app.headless.train import run_train

    out, err = io.StringIO(), io.StringIO()
    args = build_parser().parse_args(normalise_argv(train_argv(headless_world, "--modal-secret", "task-app-env")))
    code = run_with_embedded_backend(args, lambda flags: run_train(flags, printer=Printer(out=out, err=err),
                                                                 cwd=headless_world["cwd"]))
    assert code == 0, err.getvalue()
    assert headless_world["key"] not in out.getvalue() + err.getvalue()
