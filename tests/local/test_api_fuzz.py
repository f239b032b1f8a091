"""Schemathesis against the embedded backend's and the task app's own OpenAPI documents, on
real loopback servers: whatever a client sends, the answer is never a 5xx, always JSON, and
never holds more than 4 characters of a key the server holds.

Bounded: a few dozen examples per operation. Every URL a generated body carries is pointed at
a closed loopback port first, so the servers under test never call out of this machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig

from app.local.servers import ServerHandle

from .conftest import API_KEY, ENV_KEY

pytestmark = pytest.mark.slow

# Valid and invalid requests both ("negative" breaks the schema on purpose).
BOTH_MODES = SchemathesisConfig.from_str('[generation]\nmode = "all"\n')
EXAMPLES = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@pytest.fixture(scope="module")
def http() -> Iterator[requests.Session]:
    """One keep-alive session for every case: no connection set up per request, and no proxy
    settings read from the environment per request (the servers are on loopback)."""
    with requests.Session() as session:
        session.trust_env = False
        yield session


@pytest.fixture
def backend_schema(backend: ServerHandle) -> Any:
    return schemathesis.openapi.from_url(backend.url + "/openapi.json", config=BOTH_MODES)


@pytest.fixture
def taskapp_schema(taskapp: ServerHandle) -> Any:
    return schemathesis.openapi.from_url(taskapp.url + "/openapi.json", config=BOTH_MODES)


@pytest.fixture
def taskapp_05_schema(taskapp_05: ServerHandle) -> Any:
    return schemathesis.openapi.from_url(taskapp_05.url + "/openapi.json", config=BOTH_MODES)


backend_api = schemathesis.pytest.from_fixture("backend_schema")
taskapp_api = schemathesis.pytest.from_fixture("taskapp_schema")
taskapp_05_api = schemathesis.pytest.from_fixture("taskapp_05_schema")


def keep_on_loopback(value: Any, closed: str) -> Any:
    """Every string that could be a URL becomes the closed loopback port."""
    if isinstance(value, str) and value.strip().lower().startswith(("http", "//")):
        return closed
    if isinstance(value, dict):
        return {k: keep_on_loopback(v, closed) for k, v in value.items()}
    if isinstance(value, list):
        return [keep_on_loopback(v, closed) for v in value]
    return value


def key_fragments(text: str, keys: list[str], width: int = 5) -> list[str]:
    """Runs of `width` characters of any key found in text (4 are allowed: the mask)."""
    return sorted({key[i:i + width] for key in keys for i in range(len(key) - width + 1)
                   if key[i:i + width] in text})


def check_answer(response: Any, keys: list[str]) -> None:
    assert response.status_code < 500, f"{response.status_code}: {response.text[:300]}"
    content_type = " ".join(response.headers.get("content-type") or [])
    if content_type.startswith("application/json") and response.request.method != "HEAD":
        response.json()
    assert not key_fragments(response.text, keys), response.text[:300]


@backend_api.parametrize()
@EXAMPLES
def test_the_backend_answers_any_request_without_a_5xx(case, closed_url, http):
    if case.body is not None and not isinstance(case.body, (bytes, str)):
        case.body = keep_on_loopback(case.body, closed_url)
    response = case.call(session=http, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=15)
    check_answer(response, [API_KEY, ENV_KEY])


@backend_api.parametrize()
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_the_backend_answers_strangers_without_a_5xx(case, closed_url, http):
    if case.body is not None and not isinstance(case.body, (bytes, str)):
        case.body = keep_on_loopback(case.body, closed_url)
    check_answer(case.call(session=http, timeout=15), [API_KEY, ENV_KEY])


def check_task_app_answer(case: Any, closed_url: str, http: requests.Session) -> None:
    if case.body is not None and not isinstance(case.body, (bytes, str)):
        case.body = keep_on_loopback(case.body, closed_url)
    response = case.call(session=http, headers={"X-API-Key": ENV_KEY}, timeout=15)
    # A rollout whose inference URL is the closed port is the task app reporting a dead
    # upstream: 502 with the reason, by design, not a crash.
    if response.status_code == 502 and "inference call failed" in response.text:
        return
    check_answer(response, [ENV_KEY])


@taskapp_api.parametrize()
@EXAMPLES
def test_the_task_app_answers_any_request_without_a_5xx(case, closed_url, http):
    check_task_app_answer(case, closed_url, http)


@taskapp_05_api.parametrize()
@EXAMPLES
def test_the_0_5_task_app_answers_any_request_without_a_5xx(case, closed_url, http):
    check_task_app_answer(case, closed_url, http)


@taskapp_api.parametrize()
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
def test_the_task_app_tells_strangers_nothing_of_its_key(case, closed_url, http):
    if case.body is not None and not isinstance(case.body, (bytes, str)):
        case.body = keep_on_loopback(case.body, closed_url)
    check_answer(case.call(session=http, headers={"X-API-Key": ENV_KEY[:15]}, timeout=15), [ENV_KEY])
