"""Damaged state files (docs/product.md#damaged-state): the run history is moved aside once,
kept byte for byte, and a fresh one used; the backend's database stops the backend from
starting and is never touched; other state read at start never ends in a traceback or a hang.

The commands run as a process would run them (support.cli.run_cli); the one that needs the
kernel's own refusal of a rename runs a real process."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.core.config import discovery
from app.core.runs import saved_run
from app.core.runs.history import RunHistory, take_repair_notes
from app.core.runs.jobs import remember
from app.core.state_files import StateFileError
from app.local.servers import start_backend
from app.local.state.store import SCHEMA_VERSION, Store, UnusableStore, check_store_file
from support import loopback_http
from support.cli import run_cli

REPO = Path(__file__).resolve().parents[2]
run = run_cli


def state() -> Path:
    folder = Path(os.environ["SYNTH_TUI_STATE_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --------------------------------------------------------------------------- history kinds


def _a_real_history(path: Path) -> None:
    history = RunHistory(path)
    for number in range(40):
        history.record_submission(job_id=f"job_{number}", backend="http://127.0.0.1:1/api", config_path=None,
                                  payload={"job_type": "rl", "pad": "x" * 200}, idempotency_key=None)


def truncated(path: Path) -> None:
    _a_real_history(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def random_bytes(path: Path) -> None:
    path.write_bytes(hashlib.sha512(b"seed").digest() * 128)  # 8 kB of fixed noise


def not_utf8(path: Path) -> None:
    path.write_bytes(b"\xff\xfe\x00\x80 not a database, not UTF-8 either \xc3\x28")


def a_folder(path: Path) -> None:
    path.mkdir()
    (path / "inside.txt").write_text("kept\n")


def symlink_loop(path: Path) -> None:
    os.symlink(path.name, path)


def a_fifo(path: Path) -> None:
    os.mkfifo(path)


def wrong_table(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE runs (id INTEGER, note TEXT)")
    db.execute("INSERT INTO runs VALUES (1, 'someone else''s')")
    db.commit()
    db.close()


def runs_is_a_view(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE VIEW runs AS SELECT 1 AS job_id")
    db.commit()
    db.close()


DAMAGED_HISTORIES: dict[str, Callable[[Path], None]] = {
    "truncated": truncated, "random bytes": random_bytes, "not UTF-8": not_utf8, "a folder": a_folder,
    "a symlink loop": symlink_loop, "a FIFO": a_fifo, "a runs table not ours": wrong_table,
    "runs is a view": runs_is_a_view,
}


def snapshot(path: Path) -> object:
    """What the damaged thing is, to compare after it was moved: bytes, a folder's files, a link's target."""
    if path.is_symlink():
        return ("link", os.readlink(path))
    if path.is_dir():
        return ("folder", sorted((p.name, p.read_bytes()) for p in path.iterdir()))
    if path.is_fifo():
        return ("fifo",)
    return ("file", path.read_bytes())


@pytest.mark.parametrize("make", DAMAGED_HISTORIES.values(), ids=DAMAGED_HISTORIES.keys())
def test_history_no_tui_moves_a_damaged_history_aside_once_and_keeps_it(make):
    history = state() / "history.sqlite"
    make(history)
    before = snapshot(history)

    first = run("history", "--no-tui")

    assert first.returncode == 0, first.stderr
    assert "Traceback" not in first.stdout + first.stderr
    notes = [line for line in first.stderr.splitlines() if line.startswith("Note:")]
    assert len(notes) == 1, first.stderr
    kept = [p for p in state().iterdir() if p.name.startswith("history.corrupt-")]
    assert len(kept) == 1, sorted(p.name for p in state().iterdir())
    moved = kept[0]
    assert moved.name.endswith(".sqlite") and str(moved) in notes[0] and str(history) in notes[0]
    assert snapshot(moved) == before, "the damaged file is kept exactly as it was"
    if not moved.is_symlink():
        assert moved.stat().st_mode & 0o777 == (0o700 if moved.is_dir() else 0o600)
    assert "No jobs launched from this machine yet." in first.stdout

    second = run("history", "--no-tui")
    assert second.returncode == 0, second.stderr
    assert "Note:" not in second.stderr and "Warning" not in second.stderr and "Traceback" not in second.stderr
    assert [p.name for p in state().iterdir() if p.name.startswith("history.corrupt-")] == [moved.name]


def test_an_empty_history_file_is_a_new_history_not_damage():
    history = state() / "history.sqlite"
    history.write_bytes(b"")
    result = run("history", "--no-tui")
    assert result.returncode == 0 and "Note:" not in result.stderr, result.stderr
    assert not [p for p in state().iterdir() if "corrupt" in p.name]


def test_odd_values_in_a_row_read_as_missing_and_the_other_rows_stay():
    path = state() / "history.sqlite"
    RunHistory(path).record_submission(job_id="job_good", backend="http://127.0.0.1:1/api", config_path="/c.toml",
                                       payload={"job_type": "rl"}, idempotency_key=None)
    RunHistory(path).record_progress("job_good", status="succeeded", final=True)
    db = sqlite3.connect(path)
    db.execute("INSERT INTO runs (job_id, backend, payload, created_at, updated_at, final_status, last_metrics)"
               " VALUES ('job_odd', 42, '{not json', 20260101, X'00ff', 'failed', '[1, 2]')")
    db.execute("INSERT INTO runs (job_id, backend, payload, created_at, updated_at, final_status, last_metrics)"
               " VALUES ('job_deep', 'b', ?, 'x', 'x', 'failed', '{\"a\": \"NaN\", \"b\": 1.5}')", ("[" * 100_000,))
    db.commit()
    db.close()
    records = {r.job_id: r for r in RunHistory(path).list()}
    assert set(records) == {"job_good", "job_odd", "job_deep"}
    assert records["job_odd"].payload is None and records["job_odd"].last_metrics == {}
    assert records["job_odd"].backend == "42" and records["job_odd"].created_at == "20260101"
    assert records["job_deep"].payload is None and records["job_deep"].last_metrics == {"b": 1.5}
    result = run("history", "--no-tui")
    assert result.returncode == 0, result.stderr
    assert "job_good" in result.stdout and "job_odd" in result.stdout and "Traceback" not in result.stderr


@contextlib.contextmanager
def read_only(folder: Path, tmp_path: Path) -> Iterator[dict[str, str]]:
    """A state folder nobody may rename in, as a read-only mount makes it: the immutable flag
    where root can set it. A user's own folder cannot stand in (synth-tui makes its state
    folder 0700 again: paths.private_dir), so elsewhere the subprocess gets the same refusal
    from the kernel's answer as Python sees it: os.rename raising EROFS, set up by a
    sitecustomize on its path. Yields the environment the subprocess runs with."""
    chattr = shutil.which("chattr")
    folder.chmod(0o700)  # as synth-tui leaves it: nothing to tighten, so only the rename fails
    if os.geteuid() == 0 and chattr is not None and \
            subprocess.run([chattr, "+i", str(folder)], capture_output=True).returncode == 0:
        try:
            yield {}
        finally:
            subprocess.run([chattr, "-i", str(folder)], check=True)
        return
    site = tmp_path / "erofs_site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import errno, os\n"
        f"_FOLDER = {str(folder)!r}\n"
        "_rename = os.rename\n"
        "def _refuse(src, dst, *a, **k):\n"
        "    if str(src).startswith(_FOLDER) or str(dst).startswith(_FOLDER):\n"
        "        raise OSError(errno.EROFS, 'Read-only file system', str(src))\n"
        "    return _rename(src, dst, *a, **k)\n"
        "os.rename = _refuse\n"
        "os.replace = _refuse\n")
    yield {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}


def test_a_damaged_history_that_cannot_be_moved_says_what_to_do_without_a_traceback(tmp_path: Path, cli_process):
    history = state() / "history.sqlite"
    random_bytes(history)
    before = digest(history)
    with read_only(state(), tmp_path) as env:
        results = [cli_process("history", "--no-tui", env=env) for _ in range(2)]
    for result in results:  # the same clear answer every time: no loop, no half-done move
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stdout + result.stderr
        assert f"The run history {history} is damaged" in result.stderr
        assert "could not be moved aside" in result.stderr and "Hint: Move it away yourself (mv " in result.stderr
    assert digest(history) == before
    assert [p.name for p in state().iterdir()] == ["history.sqlite"]


def test_a_move_that_fails_is_one_clear_error_each_time_and_the_file_stays(monkeypatch):
    history = state() / "history.sqlite"
    random_bytes(history)
    before = digest(history)
    tries = []

    def refused(source, target):
        tries.append(source)
        raise OSError(30, "Read-only file system", str(source))

    monkeypatch.setattr("app.core.state_files.os.rename", refused)
    for _ in range(2):
        with pytest.raises(StateFileError) as caught:
            RunHistory().list()
        assert caught.value.message == (f"The run history {history} is damaged (SQLite says: file is not a "
                                         f"database) and could not be moved aside: Read-only file system.")
        assert caught.value.hint.startswith(f"Move it away yourself (mv {history} ")
    assert len(tries) == 2, "one try per use, no loop"
    assert remember(lambda h: h.record_progress("job_1", status="running")).startswith(
        "synth-tui could not update the run history: The run history")
    assert digest(history) == before and take_repair_notes() == []


def test_a_write_through_remember_moves_it_aside_and_tells_once():
    take_repair_notes()
    history = state() / "history.sqlite"
    not_utf8(history)
    first = remember(lambda h: h.record_submission(job_id="job_1", backend="http://b/api", config_path=None,
                                                   payload=None, idempotency_key=None))
    assert first is not None and "was damaged" in first and "history.corrupt-" in first
    second = remember(lambda h: h.record_progress("job_1", status="running"))
    assert second is None
    assert RunHistory().get("job_1").last_status == "running"
    assert take_repair_notes() == []


def test_a_history_that_cannot_be_opened_is_a_state_file_error_naming_it(monkeypatch):
    history = state() / "history.sqlite"
    RunHistory(history).list()

    def locked(*args, **kwargs):
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr("app.core.runs.history.sqlite3.connect", locked)
    with pytest.raises(StateFileError) as caught:
        RunHistory(history).list()
    assert str(history) in caught.value.message and "try again" in (caught.value.hint or "")
    assert history.exists(), "a locked history is not damaged: it stays where it is"


# --------------------------------------------------------------------------- the backend's database


def _a_backend_db(path: Path) -> None:
    store = Store(path)
    for number in range(30):
        store.create_job(f"job_{number}", {"data": {"pad": "x" * 500}}, "hash", None)
    store.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def db_truncated(path: Path) -> None:
    _a_backend_db(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def db_other_program(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (body TEXT)")
    db.execute("INSERT INTO notes VALUES ('mine')")
    db.commit()
    db.close()


def db_future(path: Path) -> None:
    _a_backend_db(path)
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()


def db_missing_table(path: Path) -> None:
    _a_backend_db(path)
    db = sqlite3.connect(path)
    db.execute("DROP TABLE idempotency")
    db.commit()
    db.close()


def db_garbled_pages(path: Path) -> None:
    """Issue 41: the middle third of a backend's pages overwritten with noise, page 1 (the
    header and the schema) intact: SQLite opens it, and only a read of those pages fails."""
    _a_backend_db(path)
    data = bytearray(path.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    pages = len(data) // page_size
    noise = hashlib.sha512(b"garbled").digest() * (page_size // 64)
    for page in range(max(1, pages // 3), 2 * pages // 3):
        data[page * page_size:(page + 1) * page_size] = noise
    path.write_bytes(bytes(data))
    with contextlib.closing(sqlite3.connect(path)) as db:  # page 1 still reads: the damage is deeper
        assert db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0


DAMAGED_DATABASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "random bytes": (random_bytes, "file is not a database"),
    "truncated": (db_truncated, "malformed"),
    "not UTF-8": (not_utf8, "file is not a database"),
    "a folder": (a_folder, "it is a folder"),
    "a symlink loop": (symlink_loop, "symbolic link that loops"),
    "another program's": (db_other_program, "not a synth-tui backend's"),
    "a newer schema": (db_future, "a newer synth-tui wrote it"),
    "a missing table": (db_missing_table, "idempotency"),
    "garbled middle pages": (db_garbled_pages, "malformed (PRAGMA quick_check: "),
}


@pytest.mark.parametrize("make, said", DAMAGED_DATABASES.values(), ids=DAMAGED_DATABASES.keys())
def test_the_backend_refuses_a_damaged_database_and_leaves_it_untouched(tmp_path, make, said):
    db = tmp_path / "state.sqlite3"
    make(db)
    before = snapshot(db)
    listing = sorted(p.name for p in tmp_path.iterdir())

    result = run("backend", "--db", str(db), "--port", "0", env={"SYNTH_API_KEY": "sk_test_damaged"})

    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert f"Error: The backend's database {db} cannot be used: " in result.stderr and said in result.stderr
    assert "It was left as it is." in result.stderr and "Hint: Move it aside to keep it (mv " in result.stderr
    assert "--db PATH" in result.stderr
    assert snapshot(db) == before, "the user's database is never changed"
    assert sorted(p.name for p in tmp_path.iterdir()) == listing, "nothing made beside it (no -wal, no -shm)"


def test_the_demo_refuses_a_damaged_database_in_its_folder(tmp_path):
    workdir = tmp_path / "demo"
    workdir.mkdir(mode=0o700)
    db = workdir / "backend.sqlite3"
    random_bytes(db)
    before = digest(db)
    result = run("demo", "--no-tui", "--workdir", str(workdir))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert f"The backend's database {db} cannot be used" in result.stderr and "--workdir DIR" in result.stderr
    assert digest(db) == before


def test_train_backend_local_refuses_a_damaged_database(tmp_path):
    db = state() / "local" / "backend.sqlite3"
    db.parent.mkdir(mode=0o700)
    db_truncated(db)
    before = digest(db)
    result = run("train", "--backend", "local", "--no-tui", "--config", str(REPO / "configs" / "rl" / "demo.toml"))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert f"The backend's database {db} cannot be used" in result.stderr
    assert digest(db) == before


def test_a_good_database_opens_and_an_empty_file_becomes_one(tmp_path):
    good = tmp_path / "good.sqlite3"
    _a_backend_db(good)
    check_store_file(good)
    store = Store(good)
    assert store.get_job("job_3") is not None
    store.close()
    empty = tmp_path / "empty.sqlite3"
    empty.write_bytes(b"")
    Store(empty).close()
    db = sqlite3.connect(empty)
    assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    db.close()


def test_store_itself_refuses_what_the_start_check_refuses(tmp_path):
    db = tmp_path / "x.sqlite3"
    random_bytes(db)
    with pytest.raises(UnusableStore) as caught:
        Store(db)
    assert str(db) in caught.value.message and caught.value.exit_code == 2


def _raising(exc: Exception) -> Callable[..., object]:
    def query(*args: object, **kwargs: object) -> object:
        raise exc

    return query


def test_a_database_error_after_start_is_a_503_in_words_without_a_traceback(tmp_path, monkeypatch, caplog, capfd):
    """Issue 41: a database that fails under a request (damaged after the start check) answered
    500 with a traceback in the log for each request; now a 503 that says what to do, one log
    line, and nothing of what SQLite quoted from the file in the answer."""
    secret_text = "sk_live_stored_value_0123456789"
    with start_backend(api_key="sk_test_damaged", db_path=tmp_path / "db.sqlite3", env_api_keys=["ek_test"]) as server:
        store = server._app.state.backend.store
        monkeypatch.setattr(store, "list_jobs", _raising(sqlite3.OperationalError(
            f"Could not decode to UTF-8 column 'payload' with text '{secret_text}'")))
        monkeypatch.setattr(store, "get_job", _raising(sqlite3.DatabaseError("database disk image is malformed")))
        with loopback_http.client(base_url=server.url + "/api", headers={"Authorization": "Bearer sk_test_damaged"},
                                  timeout=15) as api:
            listed = api.get("/rl/jobs")
            one = api.get("/rl/jobs/job_0")
    for answer, kind in ((listed, "OperationalError"), (one, "DatabaseError")):
        assert answer.status_code == 503, answer.text
        assert answer.headers["content-type"] == "application/json"
        detail = answer.json()["detail"]
        assert detail.startswith(f"The backend's database could not be read or written ({kind})"), detail
        assert "start it again" in detail and secret_text not in detail
    logged = caplog.text + "".join(capfd.readouterr())
    assert "Traceback" not in logged and not any(record.exc_info for record in caplog.records), logged
    assert "GET /api/rl/jobs: the database failed (OperationalError: Could not decode to UTF-8" in caplog.text


# --------------------------------------------------------------------------- other state read at start


def test_the_sdk_state_file_nested_too_deep_or_a_fifo_is_unreadable_not_a_crash(tmp_path):
    path = tmp_path / "train_cli.json"
    path.write_text("[" * 200_000)
    assert discovery.read_last_config(path) is None
    assert discovery.write_last_config(tmp_path / "a.toml", path) is False
    assert path.read_text() == "[" * 200_000, "a state file it cannot read is left as it is"
    path.unlink()
    os.mkfifo(path)
    assert discovery.read_last_config(path) is None  # returns: the read would block for ever


def test_a_saved_run_with_a_line_nested_too_deep_or_a_fifo_reads_what_it_can():
    events = saved_run.events_path("job_saved")
    events.parent.mkdir(parents=True)
    good = ('{"seq": 1, "type": "rl.job.started", "message": "started", "level": "info", "data": {},'
            ' "created_at": "2026-01-01T00:00:00Z", "job_id": "job_saved"}')
    events.write_text("[" * 100_000 + "\n" + good + "\n")
    saved = saved_run.read_saved_run("job_saved")
    assert saved is not None and [e.type for e in saved.batch.events] == ["rl.job.started"]
    events.unlink()
    os.mkfifo(events)
    assert saved_run.read_saved_run("job_saved") is None


@pytest.mark.parametrize("lock_is", ["a folder", "a symlink loop"])
def test_a_demo_folder_whose_lock_is_not_a_file_is_a_clear_error(tmp_path, lock_is):
    workdir = tmp_path / "demo"
    workdir.mkdir(mode=0o700)
    lock = workdir / ".lock"
    lock.mkdir() if lock_is == "a folder" else os.symlink(".lock", lock)
    result = run("demo", "--no-tui", "--workdir", str(workdir))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and f"Cannot use {workdir} as the run's folder" in result.stderr


def test_a_demo_workdir_that_is_a_file_is_a_clear_error(tmp_path):
    workdir = tmp_path / "demo"
    workdir.write_text("not a folder")
    result = run("demo", "--no-tui", "--workdir", str(workdir))
    assert result.returncode == 2 and "is not a folder" in result.stderr and "Traceback" not in result.stderr
    assert workdir.read_text() == "not a folder"
