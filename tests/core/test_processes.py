"""Signalling a child's process group, the one way (app/core/processes.py): a served tab's
process and the rank launcher both end their groups through it."""

from __future__ import annotations

import errno
import signal
import subprocess
import sys
import time

import pytest

from app.core import processes
from app.core.processes import signal_group


def test_a_group_gone_or_not_ours_is_no_error(monkeypatch):
    sent: list[tuple[int, int]] = []
    answers = iter([None, ProcessLookupError(errno.ESRCH, "No such process"),
                    PermissionError(errno.EPERM, "Operation not permitted")])

    def killpg(pgid, signum):
        sent.append((pgid, signum))
        answer = next(answers)
        if answer is not None:
            raise answer

    monkeypatch.setattr(processes.os, "killpg", killpg)
    assert [signal_group(4242, signal.SIGTERM) for _ in range(3)] == [True, False, False]
    assert sent == [(4242, signal.SIGTERM)] * 3


@pytest.mark.parametrize("pgid", [0, 1, -5])
def test_our_own_group_or_init_is_refused(pgid, monkeypatch):
    monkeypatch.setattr(processes.os, "killpg", lambda *_: pytest.fail("signalled"))
    with pytest.raises(ValueError):
        signal_group(pgid, signal.SIGTERM)


# A child leading its own group, with a grandchild in it; both sleep until signalled.
FAMILY = ("import subprocess, sys, time\n"
          "grandchild = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
          "print(grandchild.pid, flush=True)\n"
          "time.sleep(60)\n")


@pytest.mark.usefixtures("cli_process")  # starts real processes: the slow tier
def test_the_whole_group_gets_the_signal():
    child = subprocess.Popen([sys.executable, "-c", FAMILY], stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        assert child.stdout is not None
        grandchild = int(child.stdout.readline())
        assert signal_group(child.pid, signal.SIGKILL) is True
        assert child.wait(timeout=10) == -signal.SIGKILL
        assert _ended(grandchild)  # it was in the group too
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()


def _ended(pid: int) -> bool:
    """Gone, or a zombie waiting for init to reap it."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
                if stat.read().rpartition(")")[2].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False
