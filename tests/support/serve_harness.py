"""What the browser tests share: the served app's process, its tabs' processes, and a page
read through xterm.js's own buffer (docs/browser.md#tests)."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar
from urllib.parse import parse_qs, urlsplit

from support.pilot_waits import poll_until

T = TypeVar("T")

CHROMIUM = Path("/usr/bin/chromium")  # Debian's; .ci/run installs it
INSTALL_LOCK = Path("/tmp/synth-tui-chromium-install.lock")


def find_or_install_chromium() -> tuple[Path | None, str]:
    """A Chromium for the browser tests, and what was tried: Debian's; else one Playwright has
    downloaded; else Debian's, installed now (root with apt-get: what .ci/run does, so the
    README's test command needs nothing more on a fresh Debian or Ubuntu); else Playwright's
    download (a machine with internet). One test worker at a time installs (a file lock); the
    others then find it."""
    import fcntl

    tried: list[str] = []
    with INSTALL_LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = _chromium_on_disk()
        for install in (_apt_get_install, _playwright_install):
            if found is not None:
                break
            tried.append(install())
            found = _chromium_on_disk()
    return found, "; ".join(tried)


def _apt_get_install() -> str:
    import shutil

    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return "apt-get: not root or no apt-get"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "chromium"]
    done = subprocess.run(install, env=env, capture_output=True, timeout=900)
    if done.returncode != 0:  # the package lists may be missing or stale: fetch them, then again
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, timeout=900)
        done = subprocess.run(install, env=env, capture_output=True, timeout=900)
    return f"apt-get install chromium: exit {done.returncode}"


def _playwright_install() -> str:
    import sys

    done = subprocess.run([sys.executable, "-m", "playwright", "install", "chromium"],
                          capture_output=True, timeout=900)
    return f"playwright install chromium: exit {done.returncode}"


def _chromium_on_disk() -> Path | None:
    if CHROMIUM.exists():
        return CHROMIUM
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        downloaded = Path(playwright.chromium.executable_path)
    return downloaded if downloaded.exists() else None


CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# textual-serve's page keeps its xterm.js Terminal to itself. Before the page's scripts run,
# this catches the object assigned to a `terminal` property that looks like one, so the tests
# can read the screen from xterm.js's own buffer (the canvas renderer draws no DOM text).
CATCH_TERMINAL = """
Object.defineProperty(Object.prototype, "terminal", {
  configurable: true,
  get() { return undefined; },
  set(value) {
    Object.defineProperty(this, "terminal", {value, writable: true, configurable: true, enumerable: true});
    if (value && value.buffer && typeof value.write === "function") { window.__xterm = value; }
  },
});
"""
SCREEN_TEXT = """() => {
  const terminal = window.__xterm;
  if (!terminal) return "";
  const buffer = terminal.buffer.active, rows = [];
  for (let y = 0; y < terminal.rows; y++) {
    const line = buffer.getLine(buffer.viewportY + y);
    rows.push(line ? line.translateToString(true) : "");
  }
  return rows.join("\\n");
}"""


@dataclass
class Served:
    """A running `synth-tui serve`: its URL (with the token) and what it printed."""

    process: subprocess.Popen[str]
    url: str
    stderr: Path
    lines: list[str] = field(default_factory=list)

    @property
    def base(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def token(self) -> str:
        return parse_qs(urlsplit(self.url).query)["token"][0]

    def children(self) -> list[int]:
        return child_pids(self.process.pid)

    def output(self) -> str:
        return "".join(self.lines)

    def wait_gone(self, pid: int, timeout: float = 30.0) -> None:
        """Wait until the tab's process group has ended; else fail with what the server said."""
        self._wait(lambda: not group_alive(pid), timeout, f"tab process group {pid} to end")

    def wait_printed(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        """Wait until the server's stderr (its tabs' stderr too) matches the pattern."""
        return self._wait(lambda: re.search(pattern, self.stderr.read_text()), timeout, f"{pattern!r} on stderr")

    def wait_printed_times(self, pattern: str, times: int, timeout: float = 30.0) -> None:
        """Wait until the server's stderr matches the pattern at least `times` times."""
        self._wait(lambda: len(re.findall(pattern, self.stderr.read_text())) >= times, timeout,
                   f"{pattern!r} {times} times on stderr")

    def _wait(self, condition: Callable[[], T | None], timeout: float, what: str) -> T:
        try:
            return poll_until(condition, timeout=timeout, what=what)
        except AssertionError as error:
            raise AssertionError(f"{error}\nserver stderr:\n{self.stderr.read_text()}\n"
                                 f"server stdout:\n{self.output()}") from None


def child_pids(parent: int) -> list[int]:
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == parent and fields[0] != "Z":
            pids.append(int(name))
    return pids


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


class Tab:
    """One page of the served app, read through xterm.js's buffer."""

    def __init__(self, page) -> None:
        self.page = page
        self.seen: list[str] = []

    def open(self, url: str):
        self.page.add_init_script(CATCH_TERMINAL)
        return self.page.goto(url)

    def screen(self) -> str:
        text = self.page.evaluate(SCREEN_TEXT)
        self.seen.append(text)
        return text

    def wait_for(self, *needles: str, pattern: str = "", timeout: float = 60.0) -> str:
        """Wait until the screen shows every needle and matches the pattern (a JavaScript
        regular expression), checked in the browser at each animation frame."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        check = ("({needles, pattern}) => { const text = (" + SCREEN_TEXT + ")(); "
                 "return needles.every((n) => text.includes(n)) && new RegExp(pattern, 'u').test(text); }")
        try:
            self.page.wait_for_function(check, arg={"needles": list(needles), "pattern": pattern},
                                        timeout=timeout * 1000)
        except PlaywrightTimeout:
            raise AssertionError(f"after {timeout:g} s the page does not show {needles} {pattern!r}:\n"
                                 f"{self.screen()}") from None
        return self.screen()

    def press(self, *keys: str) -> None:
        for key in keys:
            self.page.keyboard.press(key)
