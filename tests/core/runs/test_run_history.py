"""The run history: its schema migration, the .env each job was launched with, the status
check with the backends, and `synth-tui history --no-tui`."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from app.cli.dispatch import main
from app.core.errors import EnvFileError, MissingSecretsError
from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession
from app.core.paths import history_db_path
from app.core.runs.history import RunHistory
from app.core.runs.history_refresh import problem_notes, refresh_statuses
from app.core.runs.jobs import JobContext
from support.fakes import ScriptedJob

DEAD_BACKEND = "http://127.0.0.1:1/api"

# The runs table as the first releases wrote it: no env_path.
OLD_SCHEMA = """
CREATE TABLE runs (
    job_id TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    config_path TEXT,
    payload TEXT,
    idempotency_key TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    final_status TEXT,
    last_status TEXT,
    last_metrics TEXT,
    rerun_of TEXT
);
"""


def old_history(path: Path) -> Path:
    db = sqlite3.connect(path)
    db.executescript(OLD_SCHEMA)
    db.execute("INSERT INTO runs VALUES ('job_old', 'http://127.0.0.1:8000/api', '/c.toml', '{\"job_type\": \"rl\"}',"
               " 'key-1', '2026-01-01T00:00:00+00:00', '2026-01-01T00:00:00+00:00', NULL, 'running',"
               " '{\"train.mean_score\": 0.5}', NULL)")
    db.commit()
    db.close()
    os.chmod(path, 0o644)  # as an older version may have left it
    return path


def columns(path: Path) -> list[str]:
    db = sqlite3.connect(path)
    try:
        return [row[1] for row in db.execute("PRAGMA table_info(runs)")]
    finally:
        db.close()


# --------------------------------------------------------------------------- schema


def test_an_old_history_file_gains_env_path_and_keeps_its_rows(tmp_path):
    path = old_history(tmp_path / "history.sqlite")
    history = RunHistory(path)
    old = history.get("job_old")
    assert old is not None and old.env_path is None and old.status == "running"
    assert old.last_metrics == {"train.mean_score": 0.5} and old.payload == {"job_type": "rl"}
    assert "env_path" in columns(path)
    history.record_submission(job_id="job_new", backend="http://b/api", config_path=None, payload=None,
                              idempotency_key="k", env_path="/p/.env")
    history.record_progress("job_old", status="succeeded", final=True)
    assert history.get("job_new").env_path == "/p/.env"
    assert history.get("job_old").final_status == "succeeded"
    assert [r.job_id for r in history.list()] == ["job_new", "job_old"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_opening_a_migrated_file_again_changes_nothing(tmp_path):
    path = old_history(tmp_path / "history.sqlite")
    RunHistory(path).get("job_old")
    RunHistory(path).get("job_old")  # a second process: the column is there, no second ALTER
    assert columns(path).count("env_path") == 1


def test_a_column_added_by_another_process_meanwhile_is_not_an_error(tmp_path):
    from app.core.runs.history import _add_missing_columns

    path = old_history(tmp_path / "history.sqlite")
    RunHistory(path).get("job_old")  # the other process: it added the column

    class SeenBeforeTheOtherProcess:
        """This process read the columns before the other one added env_path."""

        def __init__(self, db: sqlite3.Connection) -> None:
            self.db = db

        def execute(self, sql: str, *args):
            return [(0, "job_id")] if sql.startswith("PRAGMA") else self.db.execute(sql, *args)

    db = sqlite3.connect(path)
    try:
        _add_missing_columns(SeenBeforeTheOtherProcess(db))  # its ALTER meets a duplicate column
    finally:
        db.close()
    assert columns(path).count("env_path") == 1


def test_a_new_file_is_private_and_has_env_path(tmp_path):
    path = tmp_path / "state" / "history.sqlite"
    RunHistory(path).record_submission(job_id="j", backend="http://b/api", config_path=None, payload=None,
                                       idempotency_key=None, env_path="/x/.env")
    assert "env_path" in columns(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


# --------------------------------------------------------------------------- the session


def env_file(folder: Path, key: str = "sk_test_backend_key_0123456789", name: str = ".env") -> Path:
    path = folder / name
    path.write_text(f"SYNTH_API_KEY={key}\nENVIRONMENT_API_KEY=env_key_0123456789\n")
    return path


def test_a_submission_remembers_the_env_path_and_no_key(tmp_path):
    env = env_file(tmp_path)
    session = LaunchSession(LaunchOptions(cwd=tmp_path, env_files=[str(env)], backend="http://127.0.0.1:5/"),
                            shell={})
    session.open_unattended_env()
    assert session.remember_submission(JobContext.of("job_1", {"job_type": "rl"})) is None
    record = RunHistory().get("job_1")
    assert record.env_path == str(env) and record.backend == "http://127.0.0.1:5/api"
    raw = history_db_path().read_bytes()
    assert b"sk_test_backend_key" not in raw and b"env_key_0123456789" not in raw


def test_a_submission_without_a_env_file_remembers_none(tmp_path):
    session = LaunchSession(LaunchOptions(cwd=tmp_path, backend="http://127.0.0.1:5"),
                            shell={"SYNTH_API_KEY": "sk_shell_0123456789"})
    session.open_unattended_env()
    session.remember_submission(JobContext.of("job_1"))
    assert RunHistory().get("job_1").env_path is None


def remember(job_id: str, env_path: Path | str | None, backend: str = "http://127.0.0.1:5/api",
             status: str = "running", final: bool = False) -> None:
    history = RunHistory()
    history.record_submission(job_id=job_id, backend=backend, config_path=None, payload={"job_type": "rl"},
                              idempotency_key=None, env_path=str(env_path) if env_path else None)
    history.record_progress(job_id, status=status, final=final)


def test_attach_without_env_file_uses_the_remembered_env_and_says_so_in_the_hint(tmp_path):
    launched_in = tmp_path / "launched-here"
    launched_in.mkdir()
    env = env_file(launched_in)
    remember("job_1", env)
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    env_file(cwd, key="sk_discovered_0123456789")  # what discovery would propose here
    session = LaunchSession(LaunchOptions(cwd=cwd), shell={})
    job = session.attach("job_1")
    assert job.job_id == "job_1"
    assert session.synth_api_key() == "sk_test_backend_key_0123456789"
    assert session.backend_base == "http://127.0.0.1:5/api"
    assert session.attach_hint("job_1").endswith(
        f"synth-tui attach job_1 --backend http://127.0.0.1:5/api --env-file {env}")


def test_the_env_file_flag_wins_over_the_remembered_env(tmp_path):
    remember("job_1", tmp_path / "gone.env")
    given = env_file(tmp_path, key="sk_given_0123456789", name="given.env")
    session = LaunchSession(LaunchOptions(cwd=tmp_path, env_files=[str(given)]), shell={})
    session.attach("job_1")
    assert session.synth_api_key() == "sk_given_0123456789"
    assert session.history_attach_command(RunHistory().get("job_1")).endswith(f"--env-file {given}")


def test_a_remembered_env_that_is_gone_is_an_error_naming_it_and_the_fix(tmp_path):
    gone = tmp_path / "removed" / ".env"
    remember("job_1", gone)
    session = LaunchSession(LaunchOptions(cwd=tmp_path), shell={})
    with pytest.raises(EnvFileError) as caught:
        session.attach("job_1")
    assert caught.value.message == f"Job job_1 was launched with {gone}, which no longer exists."
    assert caught.value.hint == ("Restore that file, or pass --env-file PATH with its SYNTH_API_KEY: synth-tui "
                                 "history --env-file PATH, or synth-tui attach job_1 --backend "
                                 "http://127.0.0.1:5/api --env-file PATH.")


def test_a_gone_env_is_no_error_when_the_shell_has_the_key(tmp_path):
    remember("job_1", tmp_path / "gone.env")
    session = LaunchSession(LaunchOptions(cwd=tmp_path), shell={"SYNTH_API_KEY": "sk_shell_0123456789"})
    session.attach("job_1")
    assert session.synth_api_key() == "sk_shell_0123456789"


def test_a_remembered_env_without_synth_api_key_names_the_file(tmp_path):
    env = tmp_path / ".env"
    env.write_text("ENVIRONMENT_API_KEY=env_key_0123456789\n")
    remember("job_1", env)
    session = LaunchSession(LaunchOptions(cwd=tmp_path), shell={})
    with pytest.raises(MissingSecretsError, match=f"{env}, the .env job job_1 was launched with, has no SYNTH_API_KEY"):
        session.use_history_record(RunHistory().get("job_1"))


def test_an_older_record_without_env_path_attaches_as_before(tmp_path):
    remember("job_1", None)
    env = env_file(tmp_path)
    session = LaunchSession(LaunchOptions(cwd=tmp_path), shell={})
    session.attach("job_1")
    assert session.env_choice.path == env.resolve()
    assert session.backend_base == "http://127.0.0.1:5/api", "the history's backend, not the default"


# --------------------------------------------------------------------------- the status check


def check(session: LaunchSession, **kwargs):
    async def collect():
        return [a async for a in refresh_statuses(session, RunHistory().list(), **kwargs)]

    return asyncio.run(collect())


def test_the_check_writes_what_the_backends_say(tmp_path, faulty_backend):
    env = env_file(tmp_path, key=faulty_backend.api_key)
    api = faulty_backend.url + "/api"
    faulty_backend.add_job(ScriptedJob("job_done", [("succeeded", [], [])]))
    faulty_backend.add_job(ScriptedJob("job_failed", [("error", [], [])]))
    faulty_backend.add_job(ScriptedJob("job_paused", [("paused", [], [])]))
    faulty_backend.add_job(ScriptedJob("job_final", [("succeeded", [], [])]))
    for job_id in ("job_done", "job_failed", "job_paused", "job_unknown"):
        remember(job_id, env, backend=api)
    remember("job_final", env, backend=api, status="failed", final=True)
    answers = {a.job_id: a for a in check(LaunchSession(LaunchOptions(cwd=tmp_path), shell={}))}
    assert set(answers) == {"job_done", "job_failed", "job_paused", "job_unknown"}, "an ended job is not asked"
    assert answers["job_done"].status == "succeeded" and answers["job_failed"].status == "error"
    assert answers["job_unknown"].status is None and answers["job_unknown"].problem_of == "job"
    history = RunHistory()
    assert history.get("job_done").final_status == "succeeded"
    assert history.get("job_failed").final_status == "error"
    assert history.get("job_paused").last_status == "paused" and history.get("job_paused").final_status is None
    assert history.get("job_unknown").last_status == "running"
    assert history.get("job_final").final_status == "failed"
    assert problem_notes(answers.values()) == [
        f"{api} does not know job job_unknown: it shows the status last seen, marked ?."]


def test_a_dead_backend_is_asked_once_per_slot_and_named_once(tmp_path, faulty_backend):
    env = env_file(tmp_path, key=faulty_backend.api_key)
    faulty_backend.add_job(ScriptedJob("job_live", [("succeeded", [], [])]))
    for i in range(6):
        remember(f"job_dead_{i}", env, backend=DEAD_BACKEND)
    remember("job_live", env, backend=faulty_backend.url + "/api")
    answers = check(LaunchSession(LaunchOptions(cwd=tmp_path), shell={}), per_backend=1)
    by_id = {a.job_id: a for a in answers}
    assert by_id["job_live"].status == "succeeded"
    dead = [a for a in answers if a.job_id.startswith("job_dead")]
    assert len(dead) == 6 and all(a.status is None and a.problem_of == "backend" for a in dead)
    assert problem_notes(answers) == [
        f"{DEAD_BACKEND} did not answer (connection refused): its 6 jobs marked ? show the status last seen."]
    assert RunHistory().get("job_dead_0").last_status == "running"


def test_a_rejected_key_is_named_as_such(tmp_path, faulty_backend):
    env = env_file(tmp_path, key="sk_wrong_key_0123456789")
    remember("job_a", env, backend=faulty_backend.url + "/api")
    answers = check(LaunchSession(LaunchOptions(cwd=tmp_path), shell={}))
    assert problem_notes(answers) == [
        f"{faulty_backend.url}/api refused the key (HTTP 401): its job marked ? shows the status last seen."]


def test_a_silent_backend_costs_one_timeout(tmp_path, faulty_backend):
    env = env_file(tmp_path, key=faulty_backend.api_key)
    faulty_backend.add_job(ScriptedJob("job_a", [("succeeded", [], [])]))
    faulty_backend.inject("status", "slow", "slow")
    remember("job_a", env, backend=faulty_backend.url + "/api")
    answers = check(LaunchSession(LaunchOptions(cwd=tmp_path), shell={}), timeout=0.3)
    assert answers[0].status is None and answers[0].problem == "did not answer within 0.3 s"


def test_each_job_is_asked_with_the_key_of_its_own_env(tmp_path, faulty_backend):
    from support.fakes import FaultyBackend

    with FaultyBackend(api_key="sk_other_backend_key_0123") as other:
        faulty_backend.add_job(ScriptedJob("job_a", [("succeeded", [], [])]))
        other.add_job(ScriptedJob("job_b", [("failed", [], [])]))
        remember("job_a", env_file(tmp_path, key=faulty_backend.api_key, name="a.env"),
                 backend=faulty_backend.url + "/api")
        remember("job_b", env_file(tmp_path, key=other.api_key, name="b.env"), backend=other.url + "/api")
        answers = {a.job_id: a.status for a in check(LaunchSession(LaunchOptions(cwd=tmp_path), shell={}))}
    assert answers == {"job_a": "succeeded", "job_b": "failed"}


# --------------------------------------------------------------------------- history --no-tui


def test_history_no_tui_checks_the_statuses_and_prints_working_attach_commands(tmp_path, faulty_backend,
                                                                                monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    env = env_file(tmp_path, key=faulty_backend.api_key)
    api = faulty_backend.url + "/api"
    faulty_backend.add_job(ScriptedJob("job_done", [("succeeded", [], [])]))
    faulty_backend.add_job(ScriptedJob("job_running", [("running", [], [])]))
    remember("job_dead", env, backend=DEAD_BACKEND)
    remember("job_done", env, backend=api)
    remember("job_running", env, backend=api, status="queued")
    code = main(["history", "--no-tui"])
    out, err = capsys.readouterr()
    assert code == 0, err
    lines = {line.split()[0]: line.split()[1] for line in out.splitlines() if line.startswith("job_")}
    assert lines == {"job_running": "running", "job_done": "succeeded", "job_dead": "running?"}
    assert f"Warning: {DEAD_BACKEND} did not answer (connection refused)" in err
    assert f"  synth-tui attach job_running --backend {api} --env-file {env}" in out
    assert f"  synth-tui attach job_dead --backend {DEAD_BACKEND} --env-file {env}" in out
    assert "attach job_done" not in out
    assert RunHistory().get("job_done").final_status == "succeeded"
    assert "sk_test" not in out + err

    # The printed command works as copied, from another folder.
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    faulty_backend.jobs["job_running"].timeline.append(("succeeded", [], []))
    code = main(["attach", "job_running", "--no-tui", "--backend", api, "--env-file", str(env),
                 "--poll-interval", "0.02"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Final status: succeeded" in out


def test_history_no_tui_with_a_missing_env_file_flag_is_a_usage_error(tmp_path, monkeypatch, capsys):
    remember("job_a", None)
    monkeypatch.chdir(tmp_path)
    code = main(["history", "--no-tui", "--env-file", str(tmp_path / "nope.env")])
    err = capsys.readouterr().err
    assert code == 2 and "Env file not found" in err and "Traceback" not in err


def test_history_no_tui_names_a_gone_env(tmp_path, monkeypatch, capsys):
    gone = tmp_path / "gone.env"
    remember("job_a", gone)
    monkeypatch.chdir(tmp_path)
    assert main(["history", "--no-tui"]) == 0
    out, err = capsys.readouterr()
    assert "job_a" in out and "running?" in out
    assert (f"Warning: No key for http://127.0.0.1:5/api: Job job_a was launched with {gone}, which no longer "
            f"exists; its job marked ? shows the status last seen (--env-file PATH gives one).") in err


def test_history_no_tui_prints_absolute_env_paths_and_skips_jobs_the_backend_does_not_know(
        tmp_path, faulty_backend, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    env_file(tmp_path, key=faulty_backend.api_key)
    api = faulty_backend.url + "/api"
    faulty_backend.add_job(ScriptedJob("job_running", [("running", [], [])]))
    remember("job_running", None, backend=api)
    remember("job_unknown", None, backend=api)
    assert main(["history", "--no-tui", "--env-file", ".env"]) == 0
    out, err = capsys.readouterr()
    assert f"  synth-tui attach job_running --backend {api} --env-file {Path.cwd() / '.env'}" in out
    assert "attach job_unknown" not in out
    assert f"Warning: {api} does not know job job_unknown" in err


def test_a_status_check_never_sends_the_env_file_key_to_another_jobs_backend(tmp_path, faulty_backend):
    """--env-file is for the job attached to; the automatic check asks each job's backend
    with the key of the .env that job was launched with, so a key never reaches a backend
    it was not used with."""
    from support.fakes import FaultyBackend

    with FaultyBackend(api_key="sk_other_backend_key_0123") as other:
        faulty_backend.add_job(ScriptedJob("job_a", [("succeeded", [], [])]))
        other.add_job(ScriptedJob("job_b", [("failed", [], [])]))
        env_a = env_file(tmp_path, key=faulty_backend.api_key, name="a.env")
        remember("job_a", env_a, backend=faulty_backend.url + "/api")
        remember("job_b", env_file(tmp_path, key=other.api_key, name="b.env"), backend=other.url + "/api")
        session = LaunchSession(LaunchOptions(cwd=tmp_path, env_files=(str(env_a),)), shell={})
        answers = {a.job_id: a.status for a in check(session)}
        sent_to_other = {h.get("Authorization") for _, _, h, _ in other.requests}
    assert answers == {"job_a": "succeeded", "job_b": "failed"}
    assert sent_to_other == {f"Bearer {other.api_key}"}


def test_an_embedded_backend_that_stops_cancels_every_unfinished_job_of_it(tmp_path):
    from app.core.runs.jobs import stop_backend_jobs

    history = RunHistory(tmp_path / "h.sqlite")
    for job_id, backend in (("job_a", "http://127.0.0.1:1/api"), ("job_b", "http://127.0.0.1:1/api"),
                            ("job_c", "http://127.0.0.1:2/api"), ("job_d", "http://127.0.0.1:1/api")):
        history.record_submission(job_id=job_id, backend=backend, config_path=None, payload=None,
                                  idempotency_key=None)
    history.record_progress("job_d", status="succeeded", final=True)
    stop_backend_jobs(history, "http://127.0.0.1:1/api", "the demo ended before the job did")
    assert {r.job_id: r.status for r in history.list()} == {
        "job_a": "cancelled", "job_b": "cancelled", "job_c": "queued", "job_d": "succeeded"}
    notes = {r.job_id: r.end_note for r in history.list()}
    assert notes == {"job_a": "the demo ended before the job did", "job_b": "the demo ended before the job did",
                     "job_c": None, "job_d": None}


def test_a_job_knows_the_steps_its_config_plans():
    """The charts' x axis runs to the job's planned steps: num_epochs × iterations_per_epoch."""
    def payload(training: object) -> dict:
        return {"job_type": "rl", "data": {"config": {"training": training}}}

    assert JobContext.of("job_1", payload({"num_epochs": 2, "iterations_per_epoch": 8})).planned_steps == 16
    for training in ({"num_epochs": 2}, {"num_epochs": "2", "iterations_per_epoch": 8},
                     {"num_epochs": True, "iterations_per_epoch": 8}, {"num_epochs": 0, "iterations_per_epoch": 8},
                     None):
        assert JobContext.of("job_1", payload(training)).planned_steps is None
    assert JobContext("job_1").planned_steps is None
    assert JobContext.of("job_1", {"data": "x"}).planned_steps is None


# --------------------------------------------------------------------------- the trained model


def test_the_end_of_a_watch_remembers_the_model_it_names(tmp_path):
    from app.core.api.streaming import WatchEnded
    from app.core.runs.watch import HistoryProgress

    remember("job_m", None)
    remember("job_plain", None)
    HistoryProgress("job_m", RunHistory()).take(
        WatchEnded("succeeded", {"status": "succeeded", "artifacts": {"model_path": "/srv/ck/job_m/step-000003"}},
                   "terminal"))
    HistoryProgress("job_plain", RunHistory()).take(WatchEnded("failed", {"status": "failed"}, "terminal"))
    assert RunHistory().get("job_m").model_path == "/srv/ck/job_m/step-000003"
    assert RunHistory().get("job_m").final_status == "succeeded"
    assert RunHistory().get("job_plain").model_path is None


def test_history_no_tui_lists_the_trained_models(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    remember("job_m", None, status="succeeded", final=True)
    remember("job_plain", None, status="failed", final=True)
    RunHistory().record_progress("job_m", model_path="/srv/ck/job_m/step-000003")
    code = main(["history", "--no-tui"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out.rstrip().splitlines()[-2:] == ["Trained models:", f"  {'job_m':<28} /srv/ck/job_m/step-000003"]


def test_a_job_of_a_backend_this_run_started_is_attached_with_that_backends_key(tmp_path, faulty_backend,
                                                                                 monkeypatch, capsys):
    """Walk 37 item 4: during `train --backend local --env-file lm.env`, `history --no-tui` was
    refused (HTTP 401) and printed an attach command with lm.env, whose key (sk_l…a8) is not the
    one the run's own backend holds (sk_l…1f): that command exited 5. The run writes its
    backend's key to a 0600 file of the run folder and the history names that file."""
    monkeypatch.chdir(tmp_path)
    stale = env_file(tmp_path, key="sk_local_an_earlier_backends_key_0123", name="lm.env")
    api = faulty_backend.url + "/api"
    # The run as --backend local leaves it: its backend's key handed over as a flag.
    session = LaunchSession(LaunchOptions(cwd=tmp_path, env_files=[str(stale)], backend=faulty_backend.url,
                                          embedded_backend=True, backend_key=faulty_backend.api_key), shell={})
    session.open_unattended_env()
    faulty_backend.add_job(ScriptedJob("job_local", [("running", [], [])]))
    assert session.remember_submission(JobContext.of("job_local", {"job_type": "rl"})) is None
    remembered = Path(RunHistory().get("job_local").env_path)
    assert remembered != stale and stat.S_IMODE(remembered.stat().st_mode) == 0o600
    assert b"sk_local_an_earlier" not in history_db_path().read_bytes()
    assert faulty_backend.api_key.encode() not in history_db_path().read_bytes()

    # Another terminal: the history asks that backend with its key, and the command it prints works.
    code = main(["history", "--no-tui"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "refused the key" not in err
    assert f"  synth-tui attach job_local --backend {api} --env-file {remembered}" in out
    assert faulty_backend.api_key not in out + err
    faulty_backend.jobs["job_local"].timeline.append(("succeeded", [], []))
    code = main(["attach", "job_local", "--no-tui", "--backend", api, "--env-file", str(remembered),
                 "--poll-interval", "0.02"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Final status: succeeded" in out


def test_a_lab_run_whose_env_holds_its_backends_key_remembers_that_env(tmp_path):
    """The lab writes its backend's key into its .env: that file is what the history names."""
    env = env_file(tmp_path, key="sk_local_the_labs_own_key_0123456789")
    session = LaunchSession(LaunchOptions(cwd=tmp_path, env_files=[str(env)], backend="http://127.0.0.1:5/",
                                          embedded_backend=True, backend_key="sk_local_the_labs_own_key_0123456789"),
                            shell={})
    session.open_unattended_env()
    session.remember_submission(JobContext.of("job_1"))
    assert RunHistory().get("job_1").env_path == str(env)
