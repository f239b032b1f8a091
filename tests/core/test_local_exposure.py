"""Secrets stay secret on a shared machine: a curious neighbour (another local user) can run
ps and read any file or folder whose mode lets them.

Keys never reach a command line we start; state folders are 0700 and state files 0600, whatever
the umask; the demo reuses one private folder and never shares its database with a second demo.
Real subprocesses and real files throughout; waits are bounded polls.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from app.core.api.streaming import WatchOptions
from app.core.paths import open_private, private_dir, private_file, run_dir, state_dir
from app.core.runs.feed import JobFeed
from app.core.runs.history import RunHistory
from app.local.state.store import Store
from support import loopback_http
from support.pilot_waits import poll_until, wait_for, wait_for_screen

EXE = Path(sys.executable).with_name("synth-tui")
WIDE_UMASK = 0o022  # the common default: without care, files would be 0644 and folders 0755
SYNTH_KEY = "sk_file_only_5d1c0f9a3b7e42d1"
ENV_KEY = "envkey_file_only_8e2b47c1d9a0"
ALIAS_KEY = "envkey_alias_only_3f6a91d2c4b8"

# ps and umask are what is tested: real processes throughout (the slow tier).
pytestmark = pytest.mark.usefixtures("cli_process")


# --------------------------------------------------------------------------- helpers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def assert_all_private(root: Path) -> list[str]:
    """Every folder under root (root included) is 0700 and every file 0600; returns their names."""
    wrong, seen = [], []
    for folder, _dirs, files in os.walk(root):
        for path in [Path(folder)] + [Path(folder) / f for f in files]:
            expected = 0o700 if path.is_dir() else 0o600
            seen.append(str(path.relative_to(root)))
            if mode(path) != expected:
                wrong.append(f"{path}: {oct(mode(path))}, expected {oct(expected)}")
    assert not wrong, "\n".join(wrong)
    return seen


def synth_tui(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, timeout=120, umask=WIDE_UMASK,
                          **kwargs)


def start(*args: str, stdout, stderr) -> subprocess.Popen:
    return subprocess.Popen([str(EXE), *args], stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL,
                            umask=WIDE_UMASK)


def stop(proc: subprocess.Popen) -> int:
    """Ctrl-C, as a user would; killed if it does not end in time."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGINT)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(timeout=10)


def answers(url: str, **kwargs) -> httpx.Response | None:
    try:
        return loopback_http.get(url, timeout=2.0, **kwargs)
    except httpx.TransportError:
        return None


def wait_answering(proc: subprocess.Popen, url: str, err_path: Path) -> httpx.Response:
    def ready():
        assert proc.poll() is None, f"the server exited early:\n{err_path.read_text()}"
        return answers(url)

    return poll_until(ready, timeout=30, what=f"{url} to answer")


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def write_env_file(path: Path, text: str) -> Path:
    with open_private(path, "w") as handle:
        handle.write(text)
    return path


# --------------------------------------------------------------------------- the helpers themselves


@pytest.fixture
def wide_umask():
    previous = os.umask(WIDE_UMASK)
    yield
    os.umask(previous)


def test_private_folders_and_files_are_created_private_and_tightened(tmp_path, wide_umask):
    state = state_dir()
    deep = private_dir(state / "runs" / "job_1")
    with open_private(deep / "events.jsonl", "w") as handle:
        handle.write("{}\n")
    assert_all_private(state)

    # Left wider by an earlier version: tightened when opened, content kept.
    os.chmod(state, 0o755)
    os.chmod(state / "runs", 0o755)
    os.chmod(deep / "events.jsonl", 0o644)
    with open_private(deep / "events.jsonl", "a") as handle:
        handle.write("{}\n")
    assert (deep / "events.jsonl").read_text() == "{}\n{}\n"
    assert_all_private(state)

    # A folder the user chose outside the state folder is theirs: created 0700, never changed.
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o755)
    private_file(mine / "backend.sqlite3")
    assert mode(mine) == 0o755 and mode(mine / "backend.sqlite3") == 0o600
    assert mode(private_dir(tmp_path / "new" / "deeper")) == 0o700 and mode(tmp_path / "new") == 0o700


def test_sqlite_side_files_take_the_private_mode_of_the_database(wide_umask):
    db = state_dir() / "backend.sqlite3"
    private_dir(db.parent)
    sqlite3.connect(db).close()  # as an earlier version left it: 0644
    assert mode(db) == 0o644
    store = Store(db)  # WAL mode: SQLite makes -wal and -shm with the database file's mode
    try:
        store.create_job("job_1", {"x": 1}, "hash", None)
        side = [db.with_name(db.name + suffix) for suffix in ("-wal", "-shm")]
        assert all(p.exists() for p in side)
        assert [mode(p) for p in [db, *side]] == [0o600, 0o600, 0o600]
    finally:
        store.close()
    history = RunHistory()
    history.record_submission(job_id="job_1", backend="http://127.0.0.1:1", config_path=None, payload={},
                              idempotency_key="k")
    assert history.get("job_1") is not None
    assert_all_private(state_dir())


def test_the_feed_stream_file_is_private(wide_umask):
    stream = run_dir("job/with:odd chars") / "events.jsonl"
    for since_seq in (0, 5):  # a watch from the start writes the file, a resumed one appends to it
        sink = JobFeed(lambda: None, "job_1", WatchOptions(since_seq=since_seq), stream_path=stream).files
        assert sink is not None
        sink.start()
        sink.finish()
        if since_seq == 0:
            os.chmod(stream, 0o644)  # made readable by others: the resumed watch makes it private again
    assert_all_private(state_dir())


async def test_the_dashboard_export_is_private(faulty_backend, wide_umask):
    from app.core.launch.options import LaunchOptions
    from app.core.launch.session import LaunchSession
    from app.screens.dashboard import DashboardScreen, JobContext
    from app.tui import SynthTuiApp
    from support.fakes import ScriptedJob, training_timeline

    faulty_backend.add_job(ScriptedJob("job_a", training_timeline(steps=2)))
    session = LaunchSession(LaunchOptions(backend=faulty_backend.url, poll_interval=0.02),
                            shell={"SYNTH_API_KEY": faulty_backend.api_key})
    session.resolve()
    app = SynthTuiApp(session, attach=JobContext("job_a"))
    def exported() -> bool:
        done = not any(w.is_running for w in app.workers if w.group == "export")
        return done and any(run_dir("job_a").glob("export-*/metrics.csv"))

    async with app.run_test(size=(160, 45)) as pilot:
        await wait_for_screen(pilot, DashboardScreen, "the job's end", where=lambda screen: screen.ended)
        await pilot.press("e")
        await wait_for(pilot, exported, limit=500, what="the export")
    names = assert_all_private(state_dir())
    assert any(n.endswith("metrics.csv") for n in names) and "runs/job_a/events.jsonl" in names


# --------------------------------------------------------------------------- backend and taskapp keys


def test_backend_takes_its_keys_from_an_env_file_never_from_argv(tmp_path):
    env_file = write_env_file(tmp_path / "keys.env", f"SYNTH_API_KEY={SYNTH_KEY}\nENVIRONMENT_API_KEY={ENV_KEY}\n")
    port = free_port()
    err = tmp_path / "backend.err"
    with err.open("w") as err_handle:
        proc = start("backend", "--env-file", str(env_file), "--port", str(port), stdout=err_handle, stderr=err_handle)
        try:
            base = f"http://127.0.0.1:{port}/api"
            assert wait_answering(proc, f"{base}/health", err).status_code == 200
            visible = cmdline(proc.pid)
            assert "--env-file" in visible and SYNTH_KEY not in visible and ENV_KEY not in visible
            assert answers(f"{base}/rl/jobs", headers={"Authorization": f"Bearer {SYNTH_KEY}"}).status_code == 200
            assert answers(f"{base}/rl/jobs", headers={"Authorization": "Bearer sk_wrong"}).status_code == 401
        finally:
            code = stop(proc)
    assert code in (0, 130, -signal.SIGINT), err.read_text()
    output = err.read_text()
    assert SYNTH_KEY not in output and ENV_KEY not in output and "Traceback" not in output
    assert "backend.sqlite3" in assert_all_private(state_dir())


def test_taskapp_reads_the_key_and_its_aliases_from_the_env_file(tmp_path):
    env_file = write_env_file(tmp_path / "keys.env",
                              f"ENVIRONMENT_API_KEY={ENV_KEY}\nENVIRONMENT_API_KEY_ALIASES= {ALIAS_KEY} ,\n")
    port = free_port()
    err = tmp_path / "taskapp.err"
    with err.open("w") as err_handle:
        proc = start("taskapp", "--env-file", str(env_file), "--port", str(port), stdout=err_handle, stderr=err_handle)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_answering(proc, base + "/", err)
            assert ENV_KEY not in cmdline(proc.pid) and ALIAS_KEY not in cmdline(proc.pid)
            for key in (ENV_KEY, ALIAS_KEY):
                assert answers(base + "/task_info", headers={"X-API-Key": key}).status_code == 200
            assert answers(base + "/task_info", headers={"X-API-Key": "not_a_key"}).status_code == 400
        finally:
            stop(proc)
    assert "Warning" not in err.read_text()


def test_key_flags_still_work_but_warn_without_echoing_the_key(tmp_path):
    port = free_port()
    err = tmp_path / "backend.err"
    with err.open("w") as err_handle:
        proc = start("backend", "--api-key", SYNTH_KEY, "--env-key", ENV_KEY, "--port", str(port),
                     stdout=err_handle, stderr=err_handle)
        try:
            base = f"http://127.0.0.1:{port}/api"
            wait_answering(proc, f"{base}/health", err)
            assert answers(f"{base}/rl/jobs", headers={"Authorization": f"Bearer {SYNTH_KEY}"}).status_code == 200
        finally:
            stop(proc)
    output = err.read_text()
    warnings = [line for line in output.splitlines() if line.startswith("Warning:")]
    assert len(warnings) == 2, output
    assert warnings[0].startswith("Warning: --api-key puts the key in the command line")
    assert warnings[1].startswith("Warning: --env-key puts the key in the command line")
    assert all("ps" in w and "--env-file" in w for w in warnings)
    assert "SYNTH_API_KEY" in warnings[0] and "ENVIRONMENT_API_KEY" in warnings[1]
    assert SYNTH_KEY not in output and ENV_KEY not in output


def test_shell_variables_win_over_the_env_file(tmp_path, monkeypatch):
    from app.cli.parser import build_parser
    from app.commands.foreground import _env_keys, _key_sources

    env_file = write_env_file(tmp_path / "keys.env", "SYNTH_API_KEY=from_file\nENVIRONMENT_API_KEY=file_env\n"
                                                     "ENVIRONMENT_API_KEY_ALIASES=file_alias\n")
    monkeypatch.setenv("SYNTH_API_KEY", "from_shell")
    monkeypatch.setenv("ENVIRONMENT_API_KEY_ALIASES", "shell_a,shell_b")
    monkeypatch.setenv("ENVIRONMENT_API_KEY", "")  # empty counts as unset: the file's value is used
    args = build_parser().parse_args(["backend", "--env-file", str(env_file)])
    sources = _key_sources(args.env_file)
    assert sources["SYNTH_API_KEY"] == "from_shell"
    assert _env_keys(args, sources) == ["file_env", "shell_a", "shell_b"]
    flagged = build_parser().parse_args(["backend", "--env-file", str(env_file), "--env-key", "flag_key"])
    assert _env_keys(flagged, sources) == ["flag_key"]


def test_an_env_file_others_can_open_is_warned_about(tmp_path, capsys):
    from app.commands.foreground import _key_sources

    env_file = write_env_file(tmp_path / "keys.env", f"SYNTH_API_KEY={SYNTH_KEY}\n")
    _key_sources(str(env_file))
    assert capsys.readouterr().err == ""
    os.chmod(env_file, 0o644)
    assert _key_sources(str(env_file))["SYNTH_API_KEY"] == SYNTH_KEY
    err = capsys.readouterr().err
    assert err == (f"Warning: {env_file} holds keys but other users of this machine can open it (mode 0644); "
                   f"run: chmod 600 {env_file}\n")


def test_a_missing_key_is_exit_3_with_the_fix(tmp_path):
    env_file = write_env_file(tmp_path / "keys.env", f"ENVIRONMENT_API_KEY={ENV_KEY}\n")
    result = synth_tui("backend", "--env-file", str(env_file), "--port", str(free_port()))
    assert result.returncode == 3, result.stderr
    assert result.stderr.startswith("Error: The backend needs SYNTH_API_KEY")
    assert str(env_file) in result.stderr and "export SYNTH_API_KEY=<key>" in result.stderr
    assert ENV_KEY not in result.stderr and "Traceback" not in result.stderr


def unusable_env_file(path: Path, problem: str) -> Path:
    if problem == "unparsable":
        path.write_text(f"SYNTH_API_KEY={SYNTH_KEY}\nENVIRONMENT_API_KEY=\"{ENV_KEY}\n")
    elif problem == "directory":
        path.mkdir()
    elif problem == "not utf-8":
        path.write_bytes(b"SYNTH_API_KEY=\xff\xfe\n")
    return path


@pytest.mark.parametrize("command", ["backend", "taskapp"])
def test_a_missing_env_file_is_exit_2(tmp_path, command):
    path = tmp_path / "keys.env"
    result = synth_tui(command, "--env-file", str(path), "--port", str(free_port()))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"Error: --env-file {path} does not exist.") and "Hint: " in result.stderr


@pytest.mark.parametrize("problem", ["unparsable", "directory", "not utf-8"])
def test_an_unreadable_env_file_is_exit_2(tmp_path, capsys, problem):
    from app.cli.dispatch import main

    path = unusable_env_file(tmp_path / "keys.env", problem)
    for command in ("backend", "taskapp"):
        assert main([command, "--env-file", str(path), "--port", str(free_port())]) == 2, (problem, command)
        err = capsys.readouterr().err
        assert err.startswith("Error: ") and str(path) in err and "Hint: " in err
        assert SYNTH_KEY not in err and ENV_KEY not in err and "Traceback" not in err


# --------------------------------------------------------------------------- the demo


def demo_folder_in(stderr: str) -> Path:
    match = re.search(r"^Demo folder: (.+?) \(", stderr, re.MULTILINE)
    assert match, stderr
    return Path(match.group(1))


def env_keys_of(env_path: Path) -> dict[str, str]:
    lines = [line.split("=", 1) for line in env_path.read_text().splitlines() if "=" in line]
    return {k: v for k, v in lines if k in ("SYNTH_API_KEY", "ENVIRONMENT_API_KEY")}


def test_the_demo_reuses_one_private_folder_with_the_same_keys(tmp_path):
    runs = []
    for number in range(2):
        result = synth_tui("demo", "--no-tui", "--poll-timeout", "0.5", cwd=tmp_path)
        assert result.returncode in (0, 4), result.stderr[-2000:]
        folder = demo_folder_in(result.stderr)
        assert folder == state_dir().absolute() / "demo"
        keys = env_keys_of(folder / ".env")
        assert len(keys) == 2
        for key in keys.values():
            assert key not in result.stdout and key not in result.stderr
        names = assert_all_private(state_dir())
        assert {"demo", "demo/.env", "demo/backend.sqlite3", "history.sqlite"} <= set(names)
        runs.append((result.stderr, keys))
        if number == 0:  # as an earlier version would have left them: all wider
            for path in (state_dir(), folder, folder / ".env", folder / "backend.sqlite3"):
                os.chmod(path, 0o755 if path.is_dir() else 0o644)
    assert "(keys made now;" in runs[0][0] and "(the keys of the last demo here;" in runs[1][0]
    assert runs[0][1] == runs[1][1]
    assert not list(state_dir().glob("demo-*"))


def test_a_second_demo_at_the_same_time_gets_its_own_folder_removed_at_exit(tmp_path):
    first_err = tmp_path / "first.err"
    with (tmp_path / "first.out").open("w") as out, first_err.open("w") as err:
        first = start("demo", "--no-tui", "--poll-timeout", "600", stdout=out, stderr=err)
    try:
        poll_until(lambda: "Demo folder:" in first_err.read_text() or first.poll() is not None, timeout=30,
                   what="the first demo's banner")
        shared = demo_folder_in(first_err.read_text())
        first_keys = env_keys_of(shared / ".env")
        first.send_signal(signal.SIGSTOP)  # frozen mid-run: it holds the folder's lock throughout

        second_err = tmp_path / "second.err"
        with (tmp_path / "second.out").open("w") as out, second_err.open("w") as err:
            second = start("demo", "--no-tui", "--poll-timeout", "0.5", stdout=out, stderr=err)
        try:
            poll_until(lambda: "Demo folder:" in second_err.read_text() or second.poll() is not None,
                       timeout=30, what="the second demo's banner")
            own = demo_folder_in(second_err.read_text())
            assert own != shared and own.parent == state_dir().absolute()
            assert f"another demo is using {shared}" in second_err.read_text()
            assert "removed when this demo exits" in second_err.read_text()
            assert mode(own) == 0o700 and mode(own / ".env") == 0o600
            second_keys = env_keys_of(own / ".env")
            assert second_keys.values() and set(second_keys.values()).isdisjoint(first_keys.values())
            assert second.wait(timeout=120) in (0, 4), second_err.read_text()[-2000:]
        finally:
            stop(second)
        assert not own.exists()
        assert "Traceback" not in second_err.read_text()
        assert env_keys_of(shared / ".env") == first_keys
    finally:
        stop(first)
    assert shared.exists() and not list(state_dir().glob("demo-*"))
    assert_all_private(state_dir())


def test_the_demo_never_writes_through_a_link_in_its_folder(tmp_path):
    from app.commands.demo_setup import demo_keys
    from app.core.errors import UsageError

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    victim.chmod(0o644)
    folder = tmp_path / "demo"
    folder.mkdir()
    (folder / ".env").symlink_to(victim)
    with pytest.raises(UsageError, match="link or not a plain file"):
        demo_keys(folder / ".env")
    assert victim.read_text() == "precious\n" and mode(victim) == 0o644


def test_a_demo_env_whose_keys_were_removed_gets_fresh_ones(tmp_path):
    from app.commands.demo_setup import demo_keys, write_env
    from app.core.env import envfile

    env_path = tmp_path / ".env"
    env_path.write_text("# my notes\nTASK_APP_URL=http://127.0.0.1:1\n")
    synth, env_key = demo_keys(env_path)
    write_env(env_path, synth, env_key, "http://127.0.0.1:2")
    saved = envfile.EnvFile.load(env_path)
    assert (saved.get("SYNTH_API_KEY"), saved.get("ENVIRONMENT_API_KEY")) == (synth, env_key)
    assert saved.get("TASK_APP_URL") == "http://127.0.0.1:2" and "# my notes" in env_path.read_text()


def test_abandoned_temporary_demo_folders_are_removed(tmp_path):
    from app.commands.demo_setup import _remove_abandoned_temporary_folders

    old = private_dir(state_dir() / "demo-abandoned")
    (old / ".env").write_text("SYNTH_API_KEY=sk_left_behind_by_a_killed_demo\n")
    fresh = private_dir(state_dir() / "demo-just-made")
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    _remove_abandoned_temporary_folders("demo-")
    assert not old.exists() and fresh.exists()
