"""``synth-tui train --type rl --no-tui`` end to end against real loopback servers."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from app.cli.dispatch import main
from app.cli.parser import build_parser, normalise_argv
from app.core.api.wire import MetricPoint
from app.core.errors import ExitCode
from app.core.runs.events import metric_line
from app.headless.printer import Printer
from app.headless.train import run_train
from app.headless.watch import run_attach
from support.fakes import ScriptedJob, event, training_timeline

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "configs" / "rl" / "crafter_qwen4b.toml"
ENV_KEY = "env_key_0123456789abcdef0123456789abcdef"


@pytest.fixture
def world(tmp_path, faulty_backend, tiny_task_app):
    """A backend, a task app, a .env pointing at them, and a working directory."""
    env_path = tmp_path / "project" / ".env"
    env_path.parent.mkdir()
    env_path.write_text(
        "# credentials\n"
        f"export SYNTH_API_KEY=\"{faulty_backend.api_key}\"\n"
        f"ENVIRONMENT_API_KEY='{ENV_KEY}'\n"
        f"TASK_APP_URL={tiny_task_app.url}\n"
    )
    faulty_backend.create_job_template = training_timeline(steps=3)
    return {"backend": faulty_backend, "task_app": tiny_task_app, "env": env_path, "cwd": env_path.parent}


def run(world, *flags: str, config: Path | None = EXAMPLE) -> tuple[int, str, str]:
    argv = ["train", "--type", "rl", "--no-tui", "--poll-interval", "0.02",
            "--env-file", str(world["env"]), "--backend", world["backend"].url, *flags]
    if config is not None:
        argv += ["--config", str(config)]
    args = build_parser().parse_args(normalise_argv(argv))
    out, err = io.StringIO(), io.StringIO()
    code = run_train(args, printer=Printer(out=out, err=err), cwd=world["cwd"])
    return code, out.getvalue(), err.getvalue()


def assert_no_secrets(world, *texts: str) -> None:
    for text in texts:
        assert world["backend"].api_key not in text
        assert ENV_KEY not in text
        assert "Traceback" not in text


def test_happy_path_prints_the_sdk_lines_and_exits_0(world):
    code, out, err = run(world)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"Using config: {EXAMPLE} (rl)"
    assert "Found SYNTH_API_KEY in current sources: sk_t…89 (.env file)" in out
    assert f"Using env file: {world['env']}" in out
    assert f"Backend base: {world['backend'].url}/api (key sk_t…89)" in out
    assert ("Backend verify: OK (the backend reached the task app with a key it holds; candidates=['env_…'], "
            "statuses=[200, 200])") in out
    assert (f"Task app health: checking /health and /task_info at {world['task_app'].url} from this machine with "
            "ENVIRONMENT_API_KEY env_…ef\nTask app health: OK (this machine reached the task app and it accepted "
            "ENVIRONMENT_API_KEY)") in out
    assert "Payload preview:\n{" in out
    assert "Response 201: {" in out
    assert "\n=== Streaming Job Progress ===\n" in out
    assert "status=running" in out and "status=succeeded" in out
    assert "rl.job.completed (info): done" in out
    assert "[metric] train.mean_score=0.2000 (step=0) n=4" in out
    assert "hatchet" not in out and "(1 hatchet/modal infrastructure events hidden)" in err
    assert "Final status: succeeded" in out
    assert "Idempotency-Key: " in err
    assert_no_secrets(world, out, err)


def test_the_model_path_is_the_last_line_with_the_python_that_loads_it(world, tmp_path):
    # The SDK's cut of the final JSON (600 characters) ends before artifacts.model_path.
    folder = tmp_path / "checkpoints" / "job_0001" / "step-000003"
    folder.mkdir(parents=True)
    (folder / "policy.json").write_text(json.dumps({"kind": "lm", "trainer_mode": "full"}))
    world["backend"].create_job_artifacts = {"model_path": str(folder), "padding": "x" * 700}
    code, out, _ = run(world)
    assert code == 0
    assert out.splitlines()[-4:] == [f"Model: {folder}", "  Load it in Python:",
                                     "    from transformers import AutoModelForCausalLM",
                                     f'    model = AutoModelForCausalLM.from_pretrained("{folder}")']


def test_a_job_without_a_model_ends_with_its_json(world):
    code, out, _ = run(world)
    assert code == 0 and "Model:" not in out


def test_env_file_is_never_rewritten(world):
    before = world["env"].read_bytes()
    run(world)
    assert world["env"].read_bytes() == before


def test_payload_sent_is_the_contract_shape(world):
    run(world, "--no-poll", "--idempotency", "my-key-1")
    method, path, headers, body = [r for r in world["backend"].requests if r[:2] == ("POST", "/api/rl/jobs")][0]
    assert headers["Idempotency-Key"] == "my-key-1"
    assert body["job_type"] == "rl"
    assert body["data"]["endpoint_base_url"] == world["task_app"].url
    assert body["data"]["config"]["services"]["task_url"] == world["task_app"].url
    assert body["metadata"] == {"backend_base_url": world["backend"].url + "/api"}


@pytest.mark.parametrize("final,code", [("failed", 1), ("cancelled", 1), ("error", 1)])
def test_a_job_that_does_not_succeed_exits_1(world, final, code):
    world["backend"].create_job_template = [("running", [event(1)], []), (final, [], [])]
    got, out, _ = run(world)
    assert got == code
    assert f"Final status: {final}" in out


def test_no_poll_creates_and_exits(world):
    code, out, _ = run(world, "--no-poll")
    assert code == 0
    assert out.rstrip().endswith("Created job job_0001 (polling disabled)")


def test_poll_timeout_is_enforced_with_exit_4(world):
    world["backend"].create_job_template = [("running", [event(1)], [])] * 10_000
    code, out, err = run(world, "--poll-timeout", "0.4")
    assert code == 4
    assert "Stopped watching after --poll-timeout 0.4s" in err
    assert "synth-tui attach job_0001" in err


def test_dry_run_creates_nothing(world):
    code, out, _ = run(world, "--dry-run")
    assert code == 0 and "Dry run: no job was created." in out
    assert world["backend"].count("/api/rl/jobs", "POST") == 0


def test_missing_secrets_exit_3(world, tmp_path):
    world["env"].write_text(f"SYNTH_API_KEY={world['backend'].api_key}\n")
    no_task_url = tmp_path / "no_task_url.toml"
    no_task_url.write_text("\n".join(line for line in EXAMPLE.read_text().splitlines()
                                     if not line.startswith("task_url")))
    code, out, err = run(world, config=no_task_url)
    assert code == 3
    assert "Missing required keys: ENVIRONMENT_API_KEY, TASK_APP_URL." in err
    # A config that names its task app needs no TASK_APP_URL.
    code, out, err = run(world)
    assert code == 3 and "Missing required keys: ENVIRONMENT_API_KEY." in err
    assert_no_secrets(world, out, err)


def test_invalid_config_lists_every_problem_and_exits_2(world, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[algorithm]\ntype = "online"\nmethod = "policy_gradient"\nvariety = "gspo"\n\n'
                   '[model]\nbase = "Qwen/Qwen3-4B"\n\n[rollout]\nenv_name = "x"\n')
    code, out, err = run(world, config=bad)
    assert code == 2
    assert "is invalid (" in err
    assert "compute" in err and "policy_name" in err
    assert_no_secrets(world, out, err)


def test_malformed_toml_exit_2_with_line(world, tmp_path):
    bad = tmp_path / "broken.toml"
    bad.write_text('[algorithm]\ntype = "online\n')
    code, _, err = run(world, "--type", "rl", config=bad)
    assert code == 2
    assert "line 2" in err


def test_missing_config_and_wrong_type(world, tmp_path):
    code, _, err = run(world, config=tmp_path / "nope.toml")
    assert code == 2 and "Config not found" in err
    args = ["--type", "sft"]
    code, _, err = run(world, *args)
    assert code == 2 and "RL jobs only" in err


def test_a_missing_config_ends_the_tui_path_as_it_ends_headless(tmp_path, capsys, monkeypatch):
    """The walk: `train --config nope.toml` on a terminal opened the picker saying "fix the file"
    and exited 0; headless said the file does not exist and exited 2. Both now say the latter."""
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "nope.toml"
    assert main(["train", "--config", str(missing), "--no-tui"]) == ExitCode.USAGE
    headless = capsys.readouterr().err
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("app.cli.dispatch.has_terminal", lambda: True)
        patch.setattr("app.tui.run_app", lambda app: pytest.fail("the picker opened"))
        assert main(["train", "--config", str(missing)]) == ExitCode.USAGE
    tui = capsys.readouterr().err
    assert tui == headless and f"Config not found: {missing}" in tui and "fix" not in tui.lower()


def test_verification_failure_exits_3_with_the_report(world):
    world["backend"].verify_answer = (200, {"any_ok": False, "candidates_first15": [], "attempts": [{"status": 400}]})
    code, out, err = run(world)
    assert code == 3
    assert ("Backend verify: FAILED (no call the backend made to the task app succeeded, with any key it holds). "
            "Full report:") in out
    # The verdict the TUI's verification screen shows (app/core/launch/diagnosis.py), with its fix.
    assert "Error: The backend holds no key this task app accepts" in err
    assert "Upload this task app's ENVIRONMENT_API_KEY" in err


def test_the_model_check_is_a_flow_line_and_its_problem_exits_3(world):
    """Issue 37: the backend's model check (POST /rl/verify_model) is printed after the health
    check; a problem stops the launch with its fix, a warning is printed and does not."""
    problem = {"message": "the chat template of Qwen/Qwen3-4B cannot render a tool-calling conversation",
               "fix": 'set [model] chat_template = "qwen2_5"'}
    world["backend"].model_answer = (200, {"ok": False, "trains": "lm", "problems": [problem], "warnings": []})
    code, out, err = run(world)
    assert code == 3, err
    assert ("Model check: FAILED (POST /rl/verify_model · Qwen/Qwen3-4B: a job of this backend cannot train it "
            "as configured)") in out
    assert 'Error: Model Qwen/Qwen3-4B: the chat template of Qwen/Qwen3-4B cannot render' in err
    # Each fact once (issue 37: the problem and its fix came after the FAILED line and again
    # after Error:): the verdict's Error and Hint say it.
    assert (out + err).count("cannot render a tool-calling conversation") == 1
    assert (out + err).count('chat_template = "qwen2_5"') == 1
    assert world["backend"].count("/rl/jobs", "POST") == 0

    warning = {"message": "learning_rate 0.01 is far too high for a pretrained model of 4,022M parameters",
               "fix": "e.g. learning_rate = 5e-5 in [training]"}
    world["backend"].model_answer = (200, {"ok": True, "trains": "lm", "parameters": 4_022_468_096,
                                           "problems": [], "warnings": [warning]})
    code, out, err = run(world)
    assert code == 0, err
    assert "Model check: OK (POST /rl/verify_model · Qwen/Qwen3-4B: the lm policy trains it: 4.0B parameters)" in out
    assert "Model check: learning_rate 0.01 is far too high" in err and "Fix: e.g. learning_rate = 5e-5" in err


def test_every_model_problem_is_said_once_with_its_fix(world):
    """Two problems: the first is the Error (with its Hint), the second an Also line; neither
    is repeated after the FAILED line."""
    problems = [{"message": "the model 'x/y' is not in the local Hugging Face cache", "fix": "`hf download x/y`"},
                {"message": "chat_template 'nope' is not a template", "fix": "one of: chatml, qwen2_5, llama3"}]
    world["backend"].model_answer = (200, {"ok": False, "trains": "lm", "problems": problems, "warnings": []})
    code, out, err = run(world)
    assert code == 3, err
    both = out + err
    assert both.count("hf download x/y") == 1 and both.count("chatml, qwen2_5, llama3") == 1, both
    assert both.count("not in the local Hugging Face cache") == 1 and both.count("'nope' is not") == 1
    assert "Also: Model Qwen/Qwen3-4B: chat_template 'nope' is not a template Fix: one of:" in err


def test_a_task_app_of_another_environment_is_warned_and_the_job_goes_on(world):
    """Issue 37: a config for another game than the task app's is said before the job (a
    warning: the job still runs, as a task app may name its environment differently)."""
    world["task_app"].taskset = {"name": "tiny", "environment": "gridworld"}
    code, out, err = run(world)
    assert code == 0, err
    assert (f"Task app: The task app at {world['task_app'].url} serves 'gridworld'; the config's [rollout] "
            "env_name is 'crafter': the job would play 'gridworld'. Fix: Point TASK_APP_URL") in out + err
    world["task_app"].taskset = {"name": "tiny", "environment": "crafter"}
    code, out, err = run(world)
    assert code == 0 and "serves 'crafter'" not in out + err


def test_without_a_model_check_the_hosted_list_judges_the_model(world):
    code, out, _ = run(world)
    assert code == 0
    assert "Model check: OK (the hosted service's list · Qwen/Qwen3-4B: supported)" in out


def test_verification_http_error_exits_3(world):
    world["backend"].verify_answer = (500, {"detail": "boom"})
    code, out, err = run(world)
    assert code == 3
    assert "Backend verify: ERROR (HTTP 500: the backend could not check the task app). Report:" in out
    assert "Error: Backend verification failed: the backend could not run the verification (HTTP 500): boom" in err


def test_health_check_with_a_wrong_environment_key_exits_3(world):
    world["env"].write_text(world["env"].read_text().replace(ENV_KEY, "wrong_env_key_zzzzzzzzzzzzzzzz"))
    code, out, err = run(world)
    assert code == 3
    assert "Task app health: FAILED (/health=400, /task_info=400)" in out
    assert "rejected ENVIRONMENT_API_KEY" in err
    assert "wrong_env_key_zzzzzzzzzzzzzzzz" not in out + err


def test_task_app_down_exits_3(world):
    world["task_app"].__exit__()
    code, out, err = run(world)
    assert code == 3
    assert "/health_error=connection refused" in out and "offline" in err


def test_backend_down_exits_5(world):
    world["backend"].stop()
    code, _, err = run(world)
    assert code == 5
    assert "Cannot reach the backend" in err and "connection refused" in err
    assert "Traceback" not in err


def test_a_401_to_the_verification_itself_exits_3(world):
    world["backend"].inject("verify", "401")  # the probe passes, the verification is refused
    code, _, err = run(world)
    assert code == ExitCode.CHECKS_FAILED and "on POST /rl/verify_task_app" in err


def test_backend_answering_html_exits_5(world):
    world["backend"].inject("verify", "html", "html", "html")
    code, _, err = run(world)
    assert code == 5 and "HTML instead of JSON" in err


def test_wrong_synth_key_exits_3(world):
    """The walk: a rejected key exited 5, where the README's table (and the design's) says 3 for
    a failed verification: what the files say is not enough (docs/product.md#exit-codes)."""
    world["env"].write_text(world["env"].read_text().replace(world["backend"].api_key, "sk_wrong_0000000000"))
    code, _, err = run(world)
    assert code == ExitCode.CHECKS_FAILED == 3
    assert "rejected the SYNTH_API_KEY" in err and "sk_wrong_0000000000" not in err
    # which backend answered, and that it may not be the one started (issue 37: a busy port)
    assert f"The backend at {world['backend'].url}/api rejected" in err
    assert "may not be the backend you started" in err


def test_response_without_job_id_exits_5(world):
    world["backend"].create_answer = (201, {"status": "queued"})
    code, out, err = run(world)
    assert code == 5 and "Response missing job id" in err


def test_shell_value_wins_over_the_file(world, monkeypatch):
    monkeypatch.setenv("TASK_APP_URL", world["task_app"].url + "/")
    code, out, err = run(world, "--no-poll")
    assert code == 0
    assert "TASK_APP_URL from the shell overrides the value in the .env file" in err


def test_console_script_end_to_end(world, cli_process):
    """The installed command, as a user runs it: real process, real exit code."""
    result = cli_process("train", "--type", "rl", "--no-tui", "--config", str(EXAMPLE), "--env-file", str(world["env"]),
                         "--backend", world["backend"].url, "--poll-interval", "0.05", cwd=world["cwd"])
    assert result.returncode == 0, result.stderr
    assert "Final status: succeeded" in result.stdout
    assert_no_secrets(world, result.stdout, result.stderr)


def test_runs_are_recorded_in_the_history(world):
    from app.core.runs.history import RunHistory

    code, _, _ = run(world, "--idempotency", "hist-key")
    assert code == 0
    record = RunHistory().get("job_0001")
    assert record is not None and record.idempotency_key == "hist-key"
    assert record.final_status == "succeeded"
    assert record.last_metrics["train.mean_score"] == 0.9
    assert record.payload["job_type"] == "rl"


def test_chart_format_plots_the_mean_score(world):
    code, out, err = run(world, "--stream-format", "chart")
    assert code == 0, err
    assert "Using live chart (metric=the job mean score)" in out
    assert "train.mean_score | status=succeeded" in out
    assert "latest: 0.9000 (step 2)" in out
    assert "[metric]" not in out, "the chart replaces the metric lines"
    assert "\x1b" not in out, "output that is not a terminal gets no escape codes"
    assert "Final status: succeeded" in out


def test_attach_headless_streams_an_existing_job(world, monkeypatch, capsys):
    from app.cli.dispatch import main

    world["backend"].add_job(ScriptedJob("job_x", training_timeline(steps=2)))
    monkeypatch.chdir(world["cwd"])
    code = main(["attach", "job_x", "--no-tui", "--backend", world["backend"].url, "--env-file", str(world["env"]),
                 "--poll-interval", "0.02"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "Attaching to job job_x" in out.out and "Final status: succeeded" in out.out
    code = main(["history", "--no-tui"])
    # attaching watches a job; only jobs launched from this machine enter the history
    assert "job_x" not in capsys.readouterr().out


def test_the_last_lines_say_the_eval_change_from_step_0_with_its_interval(world, monkeypatch, capsys):
    from app.cli.dispatch import main

    timeline = training_timeline(steps=2)
    timeline[2][2].append({"name": "eval.mean_score", "step": 0, "value": 0.31, "phase": "eval",
                           "data": {"ci95": [0.25, 0.37], "ci_method": "bootstrap"}})
    timeline[-2][2].append({"name": "eval.mean_score", "step": 1, "value": 0.92, "phase": "eval",
                            "data": {"ci95": [0.86, 0.98], "ci_method": "bootstrap"}})
    world["backend"].add_job(ScriptedJob("job_x", timeline))
    monkeypatch.chdir(world["cwd"])
    code = main(["attach", "job_x", "--no-tui", "--backend", world["backend"].url, "--env-file", str(world["env"]),
                 "--poll-interval", "0.02"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0
    at = lines.index("Final status: succeeded")
    assert lines[at + 1] == "eval 0.31 -> 0.92, +0.61 +/- 0.08"


def test_attach_to_nothing_listening_gives_up_with_exit_5(world, monkeypatch, capsys):
    from app.cli.dispatch import main

    port = world["backend"].port
    world["backend"].stop()
    monkeypatch.chdir(world["cwd"])
    code = main(["attach", "job_x", "--no-tui", "--backend", f"http://127.0.0.1:{port}", "--env-file",
                 str(world["env"]), "--poll-interval", "0.01"])
    err = capsys.readouterr().err
    assert code == 5 and "Cannot reach the backend" in err and "Traceback" not in err


def test_attach_gives_up_on_a_backend_killed_mid_watch_with_exit_5(world):
    """The backend dies after the first event: attach ends within --give-up-after, exit 5,
    with the command to attach again (not after --poll-timeout)."""
    backend = world["backend"]
    backend.add_job(ScriptedJob("job_x", training_timeline(steps=200)))

    class KillingPrinter(Printer):
        def line(self, text: str = "") -> None:
            super().line(text)
            if text.startswith("[") or "rl." in text:  # the first event line: the backend dies
                backend.stop()

    out, err = io.StringIO(), io.StringIO()
    args = build_parser().parse_args(normalise_argv(
        ["attach", "job_x", "--no-tui", "--backend", backend.url, "--env-file", str(world["env"]),
         "--poll-interval", "0.02", "--give-up-after", "0.5"]))
    code = run_attach(args, printer=KillingPrinter(out=out, err=err))
    assert code == ExitCode.BACKEND, err.getvalue()
    assert "has not answered for" in err.getvalue()
    assert f"synth-tui attach job_x --backend {backend.url}/api" in err.getvalue()
    assert "Traceback" not in err.getvalue()


def test_backend_that_is_a_web_page_exits_5_with_the_api_hint(world):
    world["backend"].verify_answer = (501, "<html><body>Unsupported method ('POST')</body></html>")
    code, _, err = run(world)
    assert code == 5
    assert "HTML page instead of JSON" in err and "pointing at the API" in err


def test_task_app_unreachable_from_the_backend_is_not_called_auth(world):
    world["backend"].verify_answer = (200, {"any_ok": False, "candidates_first15": ["abcd"], "attempts": [
        {"endpoint": "/health", "status": None, "error": "ConnectError: connection refused"}]})
    code, _, err = run(world)
    assert code == 3
    assert "could not reach the task app" in err and "though it answers from this machine" in err
    assert "holds no key" not in err


def test_backend_base_url_in_the_env_file_is_used(world):
    world["env"].write_text(world["env"].read_text() + f"BACKEND_BASE_URL={world['backend'].url}\n")
    argv = ["train", "--type", "rl", "--no-tui", "--no-poll", "--env-file", str(world["env"]), "--config", str(EXAMPLE)]
    args = build_parser().parse_args(normalise_argv(argv))
    out, err = io.StringIO(), io.StringIO()
    code = run_train(args, printer=Printer(out=out, err=err), cwd=world["cwd"])
    assert code == 0, err.getvalue()
    assert f"Backend base: {world['backend'].url}/api" in out.getvalue()


# -- the contract as it evolved (docs/compatibility.md) ------------------------------------


def test_a_backend_without_rl_jobs_is_named_and_the_embedded_backend_offered(world):
    world["backend"].rl_offered = False
    code, out, err = run(world)
    assert code == 5
    assert f"The backend at {world['backend'].url}/api answers, but offers no RL jobs" in err
    assert "--backend local" in err and "Error: Not found" not in err
    assert world["backend"].count("/api/rl/jobs", "POST") == 0
    assert_no_secrets(world, out, err)


def test_attach_to_a_backend_without_rl_jobs_says_so(world, capsys):
    world["backend"].rl_offered = False
    args = build_parser().parse_args(normalise_argv(
        ["attach", "job_0001", "--no-tui", "--env-file", str(world["env"]), "--backend", world["backend"].url]))
    code = run_attach(args)
    err = capsys.readouterr().err
    assert code == 5 and "offers no RL jobs" in err
    # attach refuses --backend local, so it is not offered here; the backend that ran the job is.
    assert "--backend local" not in err and "Attach with --backend URL of the backend that ran the job" in err


def test_the_tui_attach_checks_the_backend_before_the_dashboard_opens(world):
    """The TUI's attach probes as headless does: a backend without RL jobs ends with exit 5."""
    world["backend"].rl_offered = False
    argv = ["attach", "job_0001", "--env-file", str(world["env"]), "--backend", world["backend"].url]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("app.cli.dispatch.has_terminal", lambda: True)
        patch.setattr("app.tui.run_app", lambda app: pytest.fail("the dashboard opened"))
        code = main(argv)
    assert code == ExitCode.BACKEND


def test_dry_run_prints_the_whole_payload(world, tmp_path):
    code, out, _ = run(world, "--dry-run")
    assert code == 0
    payload = out.split("Payload preview:\n", 1)[1].split("\nDry run: no job was created.", 1)[0]
    assert json.loads(payload)["data"]["endpoint_base_url"] == world["task_app"].url  # whole, so it parses


CUT_MARKER = re.compile(r"^… \(([\d,]+) more characters: (.+)\)$")


def printed_json(block: str, whole: str) -> str:
    """A printed JSON that was cut: its lines are the whole one's first lines, then the marker;
    returns what the marker says about where the whole is."""
    *lines, marker = block.split("\n")
    found = CUT_MARKER.match(marker)
    assert found, f"no marker after the cut: {marker!r}"
    assert lines == whole.split("\n")[:len(lines)], "cut inside a line"
    assert int(found.group(1).replace(",", "")) == len(whole) - len("\n".join(lines))
    return found.group(2)


def test_a_cut_payload_preview_and_final_json_end_between_values_and_say_where_the_whole_is(world):
    """Walk 37 item 6: the preview was cut mid-string (`"model_name": "/tmp/wa`) and the final
    JSON mid-key (`"chat_comp`) with no marker; each now ends on a line of its own saying how
    much is left and where the whole is."""
    world["backend"].create_job_artifacts = {"model_path": "/models/run", "files": [f"file-{i}" for i in range(60)]}
    _, dry, _ = run(world, "--dry-run")
    whole_payload = dry.split("Payload preview:\n", 1)[1].split("\nDry run: no job was created.", 1)[0]
    assert len(whole_payload) > 800  # the example's payload is longer than the preview
    code, out, _ = run(world)
    assert code == 0
    preview = out.split("Payload preview:\n", 1)[1].split("\nResponse 201: ", 1)[0]
    assert printed_json(preview, whole_payload) == "--dry-run prints the whole payload"

    final = out.split("Final status: succeeded\n", 1)[1].split("\nModel: /models/run\n", 1)[0]
    marker = CUT_MARKER.match(final.split("\n")[-1])
    assert marker, final
    saved = Path(marker.group(2).removeprefix("the whole is in "))
    assert saved.name == "final-status.json" and oct(saved.stat().st_mode & 0o777) == "0o600"
    whole_final = saved.read_text().rstrip("\n")
    assert json.loads(whole_final)["artifacts"]["files"][-1] == "file-59"
    assert printed_json(final, whole_final).startswith("the whole is in ")


def test_the_metric_line_writes_a_tiny_loss_as_the_event_does():
    """Walk 37 item 6: `train.loss=0.0000` beside the event's `loss 1.49e-08`."""
    point = MetricPoint(name="train.loss", step=3, value=1.49e-08)
    assert "[metric] train.loss=1.49e-08 (step=3)" in metric_line(point)
    assert "train.loss=0.5000 (step=3)" in metric_line(MetricPoint(name="train.loss", step=3, value=0.5))


def test_the_config_task_url_is_used_without_task_app_url(world, tmp_path):
    """--task-url > TASK_APP_URL > [services].task_url: a config naming its task app needs no
    TASK_APP_URL (docs/wire-contract.md#task-url)."""
    world["env"].write_text(world["env"].read_text().replace(f"TASK_APP_URL={world['task_app'].url}\n", ""))
    config = tmp_path / "with_task_url.toml"
    example_url = "https://your-org--grpo-crafter-task-app-fastapi-app.modal.run"
    assert example_url in EXAMPLE.read_text()
    config.write_text(EXAMPLE.read_text().replace(example_url, world["task_app"].url))
    code, out, err = run(world, "--dry-run", config=config)
    assert code == 0, err
    assert f'"endpoint_base_url": "{world["task_app"].url}"' in out


VERIFIER_CONFIG = """
[verifier]
enabled = true
[verifier.options]
provider = "synth"
model = "judge-model"
"""


@pytest.mark.parametrize("said, sent", [("0.2", "judge"), ("0.5", "verifier"), ("0.2, 0.5", "verifier"),
                                        (None, "verifier")])
def test_the_verifier_section_is_sent_under_the_name_the_backend_reads(world, tmp_path, said, sent):
    config = tmp_path / "verifier.toml"
    config.write_text(EXAMPLE.read_text() + VERIFIER_CONFIG)
    world["backend"].contract_header = said
    code, _, err = run(world, "--no-poll", config=config)
    assert code == 0, err
    body = [r for r in world["backend"].requests if r[:2] == ("POST", "/api/rl/jobs")][0][3]
    config_sent = body["data"]["config"]
    assert sent in config_sent and ({"judge", "verifier"} - {sent}).isdisjoint(config_sent)
    assert config_sent[sent]["options"]["model"] == "judge-model"


def test_a_paused_job_ends_the_watch_with_exit_6_and_says_how_to_attach_again(world, monkeypatch):
    timeline = training_timeline(steps=2)
    paused = ("paused", [event(90, "rl.job.paused", message="paused")], [])
    world["backend"].create_job_template = [*timeline[:3], paused]
    code, out, err = run(world)
    assert code == 6, err
    assert "Final status: paused (the job is paused on the backend; watch ended)" in out
    assert "is paused on the backend: it keeps its state there" in err
    assert "synth-tui attach job_0001 --backend" in err
    assert world["backend"].count("/cancel") == 0


def test_the_event_stream_is_read_at_events_stream_where_offered(world):
    world["backend"].sse_enabled = True
    world["backend"].events_stream = True
    code, out, err = run(world)
    assert code == 0, err
    streamed = [p for m, p, h, _ in world["backend"].requests if h.get("Accept") == "text/event-stream"]
    assert streamed and all(p.endswith("/events/stream") for p in streamed)
    assert "rl.job.completed (info): done" in out


def test_an_older_backend_streams_at_events(world):
    world["backend"].sse_enabled = True  # /events/stream answers 404 here
    code, out, err = run(world)
    assert code == 0, err
    streamed = [p for m, p, h, _ in world["backend"].requests if h.get("Accept") == "text/event-stream"]
    assert any(p.endswith("/events/stream") for p in streamed) and any(p.endswith("/events") for p in streamed)
    assert sum(p.endswith("/events/stream") for p in streamed) == 1  # tried once, then remembered


def test_each_check_says_what_it_covered_before_a_wrong_key_fails_the_health_check(tmp_path):
    """The real embedded backend holds the task app's key, so its verify passes; this machine's
    ENVIRONMENT_API_KEY is wrong, so the direct health check fails. No line may say a bare
    "Verification OK" first: each says what its check covered."""
    from app.local.servers import start_backend, start_taskapp

    synth_key = "sk_test_checks_0123456789abcdef"
    wrong_key = "env_wrong_key_zzzzzzzzzzzzzzzzzzzz"
    with start_taskapp(env_api_keys=[ENV_KEY]) as task_app, \
            start_backend(api_key=synth_key, db_path=tmp_path / "db.sqlite3", env_api_keys=[ENV_KEY]) as backend:
        env_path = tmp_path / ".env"
        env_path.write_text(f"SYNTH_API_KEY={synth_key}\nENVIRONMENT_API_KEY={wrong_key}\nTASK_APP_URL={task_app.url}\n")
        args = build_parser().parse_args(["train", "--no-tui", "--config", str(EXAMPLE), "--env-file", str(env_path),
                                          "--backend", backend.url])
        out, err = io.StringIO(), io.StringIO()
        code = run_train(args, printer=Printer(out=out, err=err), cwd=tmp_path)
    out_text, err_text = out.getvalue(), err.getvalue()
    assert code == ExitCode.CHECKS_FAILED, err_text
    assert "Verification OK" not in out_text
    lines = out_text.splitlines()
    verify = next(i for i, line in enumerate(lines) if line.startswith("Backend verify: OK"))
    health = next(i for i, line in enumerate(lines) if line.startswith("Task app health: FAILED"))
    assert verify < health
    assert "(the backend reached the task app with a key it holds;" in lines[verify]
    assert any(line.startswith("Task app health: checking /health and /task_info at") and "from this machine" in line
               for line in lines[verify + 1:health])
    assert "rejected ENVIRONMENT_API_KEY" in err_text
    for text in (out_text, err_text):
        assert wrong_key not in text and ENV_KEY not in text and synth_key not in text
