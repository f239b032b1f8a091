"""The one atomic file replacement (app/core/atomic.py): the old file or the new one, never half
of one, the mode each caller needs, and no temp file left behind whatever fails."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from app.core import atomic
from app.core.atomic import atomic_write_bytes, atomic_write_text, replace_durably


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_new_file_is_0600_whatever_the_umask_and_its_stat_is_the_files(tmp_path):
    path = tmp_path / "state.json"
    old_umask = os.umask(0)
    try:
        written = atomic_write_text(path, "{}\n")
    finally:
        os.umask(old_umask)
    assert path.read_text() == "{}\n"
    assert mode_of(path) == 0o600
    assert (written.st_ino, written.st_size) == (os.stat(path).st_ino, 3)
    assert names(tmp_path) == ["state.json"]


def test_an_existing_file_is_replaced_with_the_mode_asked_unless_kept(tmp_path):
    path = tmp_path / "f"
    path.write_text("old")
    path.chmod(0o644)
    atomic_write_bytes(path, b"kept", keep_existing=True)
    assert (path.read_bytes(), mode_of(path)) == (b"kept", 0o644)
    atomic_write_bytes(path, b"private")
    assert (path.read_bytes(), mode_of(path)) == (b"private", 0o600)
    atomic_write_bytes(path, b"wide", mode=0o640)
    assert mode_of(path) == 0o640
    assert names(tmp_path) == ["f"]


@pytest.mark.parametrize("failing", ["_write_all", "fsync", "replace"])
def test_a_write_that_fails_midway_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch, failing):
    path = tmp_path / "f"
    path.write_text("old")

    def half_then_full_disk(fd, data):  # the first bytes land, then the disk is full
        os.write(fd, data[:4])
        raise OSError(errno.ENOSPC, "No space left on device")

    def refuse(*_args, **_kwargs):
        raise OSError(errno.EIO, "Input/output error")

    if failing == "_write_all":
        monkeypatch.setattr(atomic, "_write_all", half_then_full_disk)
    else:
        monkeypatch.setattr(atomic.os, failing, refuse)
    with pytest.raises(OSError):
        atomic_write_bytes(path, b"new content, longer than four bytes")
    assert path.read_text() == "old"
    assert names(tmp_path) == ["f"]


def test_an_interrupt_midway_removes_the_temp_file_too(tmp_path, monkeypatch):
    path = tmp_path / "f"
    path.write_text("old")

    def interrupted(_fd):
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(path, "new")
    assert path.read_text() == "old"
    assert names(tmp_path) == ["f"]


def test_exclusive_never_replaces_a_file_and_creates_one_that_is_not_there(tmp_path, monkeypatch):
    path = tmp_path / "new.env"
    path.write_text("theirs")
    with pytest.raises(FileExistsError):
        atomic_write_text(path, "ours", exclusive=True)
    assert path.read_text() == "theirs"
    path.unlink()
    atomic_write_text(path, "ours", exclusive=True)
    assert (path.read_text(), mode_of(path)) == ("ours", 0o600)

    def no_hard_links(*_args):  # a filesystem without them: check, then rename
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(atomic.os, "link", no_hard_links)
    with pytest.raises(FileExistsError):
        atomic_write_text(path, "again", exclusive=True)
    other = tmp_path / "other.env"
    atomic_write_text(other, "fallback", exclusive=True)
    assert other.read_text() == "fallback" and path.read_text() == "ours"
    assert names(tmp_path) == ["new.env", "other.env"]


def test_a_missing_folder_is_an_error_with_nothing_written(tmp_path):
    with pytest.raises(FileNotFoundError):
        atomic_write_text(tmp_path / "gone" / "f", "x")
    assert names(tmp_path) == []


def test_a_folder_made_whole_replaces_the_target_durably(tmp_path, monkeypatch):
    synced: list[Path] = []
    monkeypatch.setattr(atomic, "fsync_dir", synced.append)
    staged = tmp_path / ".tmp-000001"
    staged.mkdir()
    (staged / "policy.json").write_text("{}")
    replace_durably(staged, tmp_path / "step-000001")
    assert names(tmp_path) == ["step-000001"]
    assert (tmp_path / "step-000001" / "policy.json").read_text() == "{}"
    assert synced == [tmp_path]


def test_the_folder_is_synced_after_the_rename(tmp_path, monkeypatch):
    path = tmp_path / "f"
    seen: list[tuple[Path, bool]] = []
    monkeypatch.setattr(atomic, "fsync_dir", lambda folder: seen.append((folder, path.exists())))
    atomic_write_text(path, "x")
    assert seen == [(tmp_path, True)]
