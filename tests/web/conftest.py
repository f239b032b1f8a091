"""`synth-tui serve` as a user runs it: the server as a process on a free loopback port, and
Debian's Chromium driven by Playwright (docs/browser.md#tests). No browser is downloaded: a
missing /usr/bin/chromium fails these tests with what to install, it never skips them."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading

import pytest

from support.serve_harness import CHROMIUM_ARGS, Served, Tab, find_or_install_chromium
from support.tiers import slow_fixture


@slow_fixture("runs `synth-tui serve` as a process, and a process per tab")
def serve(tmp_path):
    """Start `synth-tui serve --port 0 COMMAND...` in tmp_path; stopped (SIGTERM) after the test,
    which also checks that every tab's process and its process group are gone."""
    started: list[Served] = []

    def start(*command: str, host: str = "127.0.0.1") -> Served:
        stderr_path = tmp_path / f"serve-{len(started)}.stderr"
        stderr = stderr_path.open("w")
        process = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--host", host, "--port", "0",
                                    *command], cwd=tmp_path, stdout=subprocess.PIPE, stderr=stderr, text=True)
        lines: list[str] = []
        first: queue.Queue[str] = queue.Queue()

        def drain() -> None:  # the server must never block on a full pipe
            assert process.stdout is not None
            for line in process.stdout:
                lines.append(line)
                first.put(line)
            first.put("")

        threading.Thread(target=drain, daemon=True).start()
        line = first.get(timeout=60)
        assert line.startswith("Open http://"), f"{line!r}; stderr: {(tmp_path / 'serve-0.stderr').read_text()}"
        served = Served(process, line.split()[1], stderr_path, lines)
        started.append(served)
        return served

    yield start
    for served in started:
        tabs = served.children()
        served.process.send_signal(signal.SIGTERM)
        try:
            served.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            served.process.kill()
            pytest.fail("synth-tui serve did not stop within 30 s of SIGTERM")
        for pid in tabs:
            served.wait_gone(pid)
        assert "Traceback" not in served.output() + served.stderr.read_text()


@slow_fixture("drives Chromium", scope="session")
def chromium_path():
    """Debian's Chromium, or one found or installed now (serve_harness.find_or_install_chromium):
    none is a failure that says what to install, never a skip."""
    found, tried = find_or_install_chromium()
    if found is None:
        pytest.fail(f"No Chromium for the browser tests ({tried}). Install Debian's: apt-get install -y chromium "
                    "(.ci/run does), or Playwright's: python -m playwright install chromium. They are never skipped.")
    return found


@pytest.fixture
def chromium(tmp_path, chromium_path):
    """A fresh Chromium profile (its own user-data-dir) for one test."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=str(chromium_path), headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 860})
        try:
            yield context
        finally:
            context.close()


@pytest.fixture
def tab(chromium):
    return Tab(chromium.new_page())
