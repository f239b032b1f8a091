"""The direct task-app health check (docs/wire-contract.md#health-check), with a plain-language reason per attempt.

Success follows the SDK: ``/health`` answers 200 (or 401/403 carrying an expected key prefix:
"auth-optional"), and ``/task_info`` answers 200. Unlike the SDK, which returns one terse
detail string, every attempt comes back with its status, latency, reason and fix.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from app.core.api.failures import describe_exception, detail_of
from app.core.api.transport import ssl_context
from app.core.redact import key_prefix, mask_prefixes, mask_secret, redact
from app.core.text import counted

HEALTH_TIMEOUT_S = 30.0


@dataclass
class HealthAttempt:
    endpoint: str
    url: str
    key_hint: str
    status: int | None = None
    latency_ms: float | None = None
    ok: bool = False
    reason: str = ""
    fix: str | None = None
    note: str | None = None
    body: Any = None


@dataclass
class HealthReport:
    task_url: str
    attempts: list[HealthAttempt] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        by_endpoint = {a.endpoint: a.ok for a in self.attempts}
        return by_endpoint.get("/health", False) and by_endpoint.get("/task_info", False)

    @property
    def detail(self) -> str:
        """The SDK's one-line summary: ``/health=200, /task_info=200``."""
        parts = []
        for attempt in self.attempts:
            name = attempt.endpoint.lstrip("/")
            if attempt.status is None:
                parts.append(f"/{name}_error={attempt.reason}")
            else:
                note = f" ({attempt.note})" if attempt.note else ""
                parts.append(f"/{name}={attempt.status}{note}")
        return ", ".join(parts)

    @property
    def first_failure(self) -> HealthAttempt | None:
        return next((a for a in self.attempts if not a.ok), None)


def auth_headers(env_api_key: str, aliases: Sequence[str] = ()) -> dict[str, str]:
    """Every header style the SDK sends at once: X-API-Key, X-API-Keys (CSV) and Bearer."""
    return {
        "X-API-Key": env_api_key,
        "X-API-Keys": ",".join([env_api_key, *[a for a in aliases if a]]),
        "Authorization": f"Bearer {env_api_key}",
    }


async def check_task_app(task_url: str, env_api_key: str, *, aliases: Sequence[str] = (),
                         timeout: float = HEALTH_TIMEOUT_S,
                         transport: httpx.AsyncBaseTransport | None = None) -> HealthReport:
    """Call ``/health`` then ``/task_info``; both are always tried so every problem shows."""
    base = task_url.rstrip("/")
    report = HealthReport(task_url=base)
    secrets = [env_api_key, *aliases]
    async with httpx.AsyncClient(timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
                                 headers=auth_headers(env_api_key, aliases), transport=transport,
                                 verify=ssl_context()) as http:
        for endpoint in ("/health", "/task_info"):
            report.attempts.append(await _attempt(http, base, endpoint, env_api_key, secrets, timeout))
    return report


async def _attempt(http: httpx.AsyncClient, base: str, endpoint: str, key: str, secrets: list[str],
                   timeout: float) -> HealthAttempt:
    attempt = HealthAttempt(endpoint=endpoint, url=f"{base}{endpoint}", key_hint=mask_secret(key))
    started = time.perf_counter()
    try:
        response = await http.get(attempt.url)
    except httpx.TimeoutException:
        attempt.latency_ms = (time.perf_counter() - started) * 1000
        attempt.reason = f"no answer within {timeout:g} s"
        attempt.fix = "The task app is slow or hung: check its logs, or that TASK_APP_URL points at it."
        return attempt
    except httpx.InvalidURL as exc:  # not an HTTPError: its own branch, never a traceback
        attempt.reason = f"the URL cannot be built ({' '.join(str(exc).split())[:120]})"
        attempt.fix = "Fix TASK_APP_URL: write it as http://HOST:PORT or https://HOST."
        return attempt
    except httpx.HTTPError as exc:
        attempt.latency_ms = (time.perf_counter() - started) * 1000
        attempt.reason = redact(describe_exception(exc), secrets)
        attempt.fix = ("The task app looks offline: start it, or fix TASK_APP_URL "
                       f"(now {base}).")
        return attempt
    attempt.latency_ms = (time.perf_counter() - started) * 1000
    attempt.status = response.status_code
    try:
        body = json.loads(redact(response.text, secrets)) if response.text.strip() else None
        attempt.body = mask_prefixes(body)
    except ValueError:
        attempt.body = redact(response.text[:400], secrets)
    _judge(attempt)
    return attempt


def _judge(attempt: HealthAttempt) -> None:
    """Set ok, reason and fix from the status and body (the SDK's rules, explained)."""
    status, body = attempt.status, attempt.body
    error = _error_object(body)
    if status == 200:
        attempt.ok = True
        if isinstance(body, dict) and body.get("authorized") is False:
            attempt.note = "auth-optional"
            attempt.reason = "healthy, but the task app says this key is not authorised"
        else:
            attempt.reason = "OK"
        return
    if status in (401, 403) and attempt.endpoint == "/health" and _expects_prefix(body):
        attempt.ok = True
        attempt.note = "auth-optional"
        attempt.reason = "reachable; /health is auth-optional here"
        return
    if status == 400 and error.get("code") == "unauthorised" or status in (401, 403):
        # Our task apps report "allowed_prefixes" (4 characters); the SDK's "allowed_first15".
        reported = error.get("allowed_prefixes") or error.get("allowed_first15") or []
        allowed = [key_prefix(p) for p in reported if p != "****"]
        expected = f" It accepts {counted(len(allowed), 'key')} starting with {', '.join(allowed)}" if allowed else ""
        attempt.reason = f"the task app rejected ENVIRONMENT_API_KEY {attempt.key_hint} (HTTP {status}).{expected}"
        attempt.fix = ("Set ENVIRONMENT_API_KEY to the key the task app was started with; a key made for "
                       "another task app will not work.")
        return
    if status == 503 and error.get("code") == "missing_environment_api_key":
        attempt.reason = "the task app has no ENVIRONMENT_API_KEY of its own (HTTP 503)"
        attempt.fix = "Restart the task app with ENVIRONMENT_API_KEY set in its environment."
        return
    if status == 404:
        attempt.reason = f"{attempt.endpoint} not found (HTTP 404)"
        attempt.fix = "TASK_APP_URL must be the task app's base URL, without a path."
        return
    attempt.reason = f"HTTP {status}: {_summary(body)}"
    attempt.fix = "The task app failed: check its logs." if (status or 0) >= 500 else None


def _error_object(body: Any) -> dict[str, Any]:
    if isinstance(body, dict):
        detail = body.get("detail")
        if isinstance(detail, dict) and isinstance(error := detail.get("error"), dict):
            return error
        if isinstance(error := body.get("error"), dict):
            return error
    return {}


def _expects_prefix(body: Any) -> bool:
    if not isinstance(body, dict):
        return False
    if "expected_api_key_prefix" in body:
        return True
    return "expected prefix" in str(body.get("detail", "")).lower()


def _summary(body: Any) -> str:
    if isinstance(body, dict):
        detail = detail_of(body, ("detail",))
        return (detail if isinstance(detail, str) else json.dumps(detail))[:80]
    return " ".join(str(body or "").split())[:80] or "(empty body)"
