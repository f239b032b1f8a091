"""The direct task-app health check: every attempt with a status, a latency and a reason."""

from __future__ import annotations

import socket

import pytest

from app.core.api.health import check_task_app
from support.fakes import TinyTaskApp

GOOD = "env_key_0123456789abcdef0123456789abcdef"


async def test_healthy_task_app_passes_with_every_header_style(tiny_task_app):
    report = await check_task_app(tiny_task_app.url + "/", GOOD, aliases=["alias_key_1"])
    assert report.ok
    assert [a.endpoint for a in report.attempts] == ["/health", "/task_info"]
    assert all(a.status == 200 and a.latency_ms is not None for a in report.attempts)
    assert report.detail == "/health=200, /task_info=200"
    headers = tiny_task_app.seen_headers[0]
    assert headers["X-API-Key"] == GOOD
    assert headers["X-API-Keys"] == f"{GOOD},alias_key_1"
    assert headers["Authorization"] == f"Bearer {GOOD}"


async def test_wrong_key_gets_the_400_and_the_fix(tiny_task_app):
    wrong = "wrong_key_abcdefghijklmnopqrstuvwxyz"
    report = await check_task_app(tiny_task_app.url, wrong)
    assert not report.ok
    health = report.attempts[0]
    assert health.status == 400
    assert "rejected ENVIRONMENT_API_KEY" in health.reason
    assert "env_…" in health.reason  # the key it expects, by the mask's 4 characters only
    assert health.body["detail"]["error"]["allowed_first15"] == ["env_…"]
    assert "key the task app was started with" in health.fix
    text = repr(report)
    assert wrong not in health.reason and GOOD not in health.reason
    assert wrong not in text.replace(repr(report.attempts[0].body), "")


async def test_task_app_without_a_key_is_a_503_with_the_fix():
    with TinyTaskApp(keys=[]) as app:
        report = await check_task_app(app.url, GOOD)
    assert report.attempts[0].status == 503
    assert "no ENVIRONMENT_API_KEY of its own" in report.attempts[0].reason


async def test_task_app_down_says_offline():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    report = await check_task_app(f"http://127.0.0.1:{port}", GOOD, timeout=2)
    assert not report.ok
    assert report.attempts[0].status is None
    assert report.attempts[0].reason == "connection refused"
    assert "offline" in report.attempts[0].fix
    assert report.detail.startswith("/health_error=connection refused")


async def test_auth_optional_health_counts_as_reachable():
    with TinyTaskApp(health_status=None) as app:
        app.keys.append("other")
        report = await check_task_app(app.url, GOOD)
    assert report.ok


@pytest.mark.parametrize(("taskset", "served"), [
    ({"environment": "gridworld"}, ("gridworld",)),
    ({"environments": ["crafter", "crafter-classic"]}, ("crafter", "crafter-classic")),
    ({"environments": ["a", 3, None, "", {"x": 1}]}, ("a",)),  # what is not a name is ignored
    ({"environments": [f"e{i}" for i in range(100)]}, tuple(f"e{i}" for i in range(8))),  # at most 8 said
    ({"environment": {"name": "x"}}, ()),
    ({"name": "tiny"}, ()),
    ("a string", ()),
])
def test_the_environments_a_task_app_names_are_read_tolerantly(taskset, served):
    from app.core.api.health import HealthAttempt, HealthReport
    from app.core.launch.diagnosis import TaskAppCheck, served_environments

    report = HealthReport("http://t", [HealthAttempt("/health", "http://t/health", "k…", 200, ok=True),
                                       HealthAttempt("/task_info", "http://t/task_info", "k…", 200, ok=True,
                                                     body={"taskset": taskset})])
    assert served_environments(report) == served
    check = TaskAppCheck("http://t", "k…", 1.0, report=report, env_name="e9")
    assert (check.other_environment is not None) == bool(served)
