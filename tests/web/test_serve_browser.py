"""`synth-tui serve` in Debian's Chromium: the token, the demo walked by keys typed in the page
to a live chart, masked keys, and a closed tab that takes its process with it (docs/browser.md)."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import pytest

from support.fakes import ScriptedJob, event, metric


def test_the_page_needs_the_token(serve, chromium, tab):
    served = serve()
    assert tab.open(f"{served.base}/").status == 403
    assert tab.page.goto(f"{served.base}/?token=not-{served.token}").status == 403
    assert tab.page.goto(f"{served.base}/static/js/textual.js").status == 403
    assert "Open the URL" in tab.page.content()
    assert not served.children()  # nothing was started for a refused page

    response = tab.page.goto(served.url)
    assert response.status == 200
    cookie = next(c for c in chromium.cookies() if c["name"].startswith("synth_tui_token_"))
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    tab.wait_for("Choose an RL config")  # the picker, over the websocket the cookie opened
    assert len(served.children()) == 1


def demo_keys(state: Path) -> dict[str, str]:
    env = (state / "demo" / ".env").read_text()
    return dict(re.findall(r"^(SYNTH_API_KEY|ENVIRONMENT_API_KEY)=(\S+)$", env, re.M))


def test_the_demo_walks_to_a_live_chart_in_the_browser_and_closing_the_tab_stops_it(serve, tab, tmp_path):
    served = serve("demo")
    assert tab.open(served.url).status == 200
    # the first screen's footer has its keys though the page blurred the app before they were
    # known (it stayed empty), and the terminal takes the keys without a click
    tab.wait_for("Demo ready", "demo.toml", "Choose  ? Help  / Filter  o Open path", timeout=90)
    [pid] = served.children()
    command_line = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
    assert served.token not in command_line

    tab.press("Enter")  # choose the config
    keys = demo_keys(Path(os.environ["SYNTH_TUI_STATE_DIR"]))
    assert len(keys) == 2
    tab.wait_for("ENVIRONMENT_API_KEY", "SYNTH_API_KEY", *(f"{value[:4]}…{value[-2:]}" for value in keys.values()))
    assert not any(value in command_line for value in keys.values())
    tab.press("c")  # the keys are all there: continue
    tab.wait_for("Ready: press enter to preview", timeout=60)
    tab.press("Enter")  # preview
    tab.wait_for("Idempotency")
    tab.press("s")  # submit
    # The dashboard of the running job, its mean-score chart drawn (plotext's braille dots).
    live = tab.wait_for("Live dashboard", "mean score", pattern="[\u2800-\u28ff]", timeout=90)
    assert re.search(r"● (running|succeeded)", live), live
    if os.environ.get("SYNTH_TUI_BROWSER_SCREENSHOT"):  # docs/images/serve-dashboard.png, docs/browser.md
        tab.wait_for(pattern=r"Step (9|1[0-6])/16", timeout=120)
        tab.page.screenshot(path=os.environ["SYNTH_TUI_BROWSER_SCREENSHOT"])
    page_html = tab.page.content()
    for value in keys.values():
        assert all(value not in text for text in tab.seen) and value not in page_html

    # The dashboard's header names the demo's backend (its summary at exit no longer does).
    shown = re.search(r"backend http://127\.0\.0\.1:(\d+)", "\n".join(tab.seen))
    assert shown, "the dashboard's header named no backend"
    backend_port = int(shown.group(1))
    tab.page.close()
    served.wait_gone(pid)
    served.wait_printed(f"process {pid} ended \\(quit\\)")  # the app quit by itself, its finally blocks ran
    # The demo's servers went with its tab; its summary says so rather than print dead URLs.
    served.wait_printed(r"backend and task app: stopped with the demo")
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", backend_port), timeout=5):
        pass


def test_serve_attach_opens_the_dashboard_and_says_how_to_serve_the_job_again(serve, tab, faulty_backend, tmp_path):
    steps = [metric("train.mean_score", step, 0.1 * step) for step in range(1, 9)]
    job = faulty_backend.add_job(
        ScriptedJob("job_web", [("running", [event(1, message="Step 8/99: mean score 0.8")], steps)]))
    env_file = tmp_path / "attach.env"
    env_file.write_text(f"SYNTH_API_KEY={faulty_backend.api_key}\n")
    served = serve("attach", "job_web", "--backend", faulty_backend.url, "--env-file", str(env_file),
                   "--poll-interval", "0.2")
    tab.open(served.url)
    tab.wait_for("job_web", "running", "mean score", pattern="[\u2800-\u28ff]")
    [pid] = served.children()

    tab.page.click("#terminal")
    tab.press("q")
    tab.wait_for("The job keeps running on the backend", "synth-tui serve attach job_web")
    tab.press("y")
    tab.page.wait_for_selector("#session-ended", state="visible", timeout=30_000)
    served.wait_gone(pid)
    assert job.status == "running"  # the job is the backend's: leaving the page does not stop it
    page_html = tab.page.content()
    assert "synth-tui serve attach job_web --backend" in page_html and "JOB_ID" not in page_html
    assert all(faulty_backend.api_key not in text for text in tab.seen) and faulty_backend.api_key not in page_html


def test_serve_jobs_lists_the_backends_jobs_and_enter_attaches_to_one(serve, tab, faulty_backend, tmp_path):
    """The jobs view, served: the backend's jobs listed newest first, and enter on the highlighted
    one opens its live dashboard in the same tab."""
    for i, job_id in enumerate(("job_web_new", "job_web_old")):
        faulty_backend.add_job(ScriptedJob(
            job_id, [("running", [event(1, message="Step 3/99: mean score 0.3")],
                      [metric("train.mean_score", step, 0.1 * step) for step in range(1, 4)])],
            created_at=f"2026-01-01T12:{59 - i:02d}:00Z", model="Qwen/Qwen3-0.6B"))
    env_file = tmp_path / "jobs.env"
    env_file.write_text(f"SYNTH_API_KEY={faulty_backend.api_key}\n")
    served = serve("jobs", "--backend", faulty_backend.url, "--env-file", str(env_file))
    tab.open(served.url)
    screen = tab.wait_for("job_web_new", "job_web_old", "Attach")
    assert screen.index("job_web_new") < screen.index("job_web_old")  # newest first

    tab.press("Enter")
    tab.wait_for("job_web_new", "mean score", "Step 3/99", pattern="[\u2800-\u28ff]")
    assert all(faulty_backend.api_key not in text for text in tab.seen)


@pytest.mark.parametrize("command", [(), ("demo",)])
def test_a_tab_closed_as_it_opens_leaves_no_traceback(serve, chromium, command):
    """A page closed as soon as its app starts (a headless screenshot does that): the app quits
    while its first screen is being built, and the server's terminal shows no traceback."""
    served = serve(*command)
    for opened in range(1, 4):
        page = chromium.new_page()
        page.goto(served.url)
        served.wait_printed_times("tab opened", opened)
        page.close()
        served.wait_printed_times("tab closed", opened)
    assert "Traceback" not in served.stderr.read_text()
