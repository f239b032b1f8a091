"""Hostile and careless clients of the embedded backend and the task app: oversized configs,
huge and deeply nested bodies, malformed URLs and chat requests. Each gets a JSON 4xx that
says what is wrong, and the server keeps answering everyone else."""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest

from app.local.server.guard import MAX_BODY_BYTES, MAX_JSON_DEPTH, json_depth
from support import loopback_http

from ..conftest import API_KEY, ENV_KEY, payload, small_config

OVERSIZED = [
    ("training", "batch_size", 1_000_000_000),
    ("training", "max_turns", 10_000_000),
    ("training", "iterations_per_epoch", 1_000_000_000),
    ("training", "num_epochs", 10_000_000),
    ("evaluation", "instances", 1_000_000_000),
    ("training", "learning_rate", float("inf")),
    ("training", "learning_rate", float("nan")),
    ("training", "group_size", 0),
    ("rollout", "max_concurrent_rollouts", -3),
]


def _detail(resp: httpx.Response) -> str:
    assert resp.headers["content-type"].startswith("application/json"), resp.text
    detail = resp.json()["detail"]
    return detail if isinstance(detail, str) else str(detail)


def _health_latency(url: str) -> float:
    started = time.perf_counter()
    assert loopback_http.get(url + "/api/health", timeout=5).status_code == 200
    return time.perf_counter() - started


@pytest.mark.parametrize("section,key,value", OVERSIZED, ids=[f"{s}.{k}={v}" for s, k, v in OVERSIZED])
def test_an_oversized_config_is_refused_and_the_backend_keeps_answering(api, backend, taskapp, section, key, value):
    config = small_config()
    config[section][key] = value
    body = payload(taskapp.url, small_config())
    body["data"]["config"] = config  # sent as written: the client-side check is bypassed
    resp = api.post("/rl/jobs", content=_json_with_nonfinite(body), headers={"content-type": "application/json"})
    assert resp.status_code == 422, resp.text
    assert f"data.config.{section}.{key}" in _detail(resp)
    assert _health_latency(backend.url) < 2.0


def _json_with_nonfinite(body: dict) -> bytes:
    return json.dumps(body, allow_nan=True).encode()  # NaN and Infinity, as a careless client sends


def test_a_valid_config_at_the_bounds_is_accepted(api, taskapp):
    config = small_config(group_size=2, learning_rate=1.0)
    resp = api.post("/rl/jobs", json=payload(taskapp.url, config))
    assert resp.status_code == 201, resp.text
    api.post(f"/rl/jobs/{resp.json()['job_id']}/cancel")


def test_a_body_over_the_limit_is_413_without_being_read(api):
    resp = api.post("/rl/jobs", content=b"{" + b" " * (10 * MAX_BODY_BYTES) + b"}",
                    headers={"content-type": "application/json"})
    assert resp.status_code == 413 and "at most 1,048,576 bytes" in _detail(resp)


def test_a_streamed_body_over_the_limit_is_413(api):
    def chunks():
        for _ in range(40):
            yield b" " * 65_536

    resp = api.post("/rl/jobs", content=chunks(), headers={"content-type": "application/json"})
    assert resp.status_code == 413


@pytest.mark.parametrize("auth", [True, False], ids=["with-key", "without-key"])
@pytest.mark.parametrize("path", ["/api/rl/jobs", "/api/rl/verify_task_app", "/api/v1/chat/completions"])
def test_deeply_nested_json_is_422_not_500(backend, path, auth):
    headers = {"Authorization": f"Bearer {API_KEY}"} if auth else {}
    body = b"[" * 100_000 + b"]" * 100_000
    resp = loopback_http.post(backend.url + path, content=body, headers={**headers, "content-type": "application/json"})
    assert resp.status_code == 422 and "nests deeper" in _detail(resp)


def test_the_task_app_refuses_deep_and_huge_bodies_too(taskapp):
    headers = {"X-API-Key": ENV_KEY, "content-type": "application/json"}
    deep = loopback_http.post(taskapp.url + "/rollout", content=b'{"a":' * 5000 + b"1" + b"}" * 5000, headers=headers)
    assert deep.status_code == 422 and "nests deeper" in _detail(deep)
    huge = loopback_http.post(taskapp.url + "/rollout", content=b" " * (MAX_BODY_BYTES + 1), headers=headers)
    assert huge.status_code == 413


@pytest.mark.parametrize("body,words", [
    (json.dumps(["\u2253", "[" * 5000]).encode("utf-16-le"), "UTF-8"),  # 0x5B 0x22 would read as ["
    (b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "lone surrogate"),
    (b'{"a": "\\udc00 tail"}', "lone surrogate"),
    (b'{"messages": "\xff\xfe not UTF-8"}', "UTF-8"),  # FastAPI alone answers a bare 400
])
def test_bodies_that_fool_a_byte_scanner_are_422(backend, body, words):
    for path in ("/api/rl/jobs", "/api/v1/chat/completions", "/api/rl/verify_task_app"):
        resp = loopback_http.post(backend.url + path, content=body, params={"cid": "job_x:r"},
                                  headers={"Authorization": f"Bearer {API_KEY}", "content-type": "application/json"})
        assert resp.status_code == 422 and words in _detail(resp), resp.text


def test_a_surrogate_pair_is_text_and_passes(api, taskapp):
    body = payload(taskapp.url)
    body["data"]["config"]["tags"] = {"note": "\ud83d\ude00"}
    resp = api.post("/rl/jobs", content=json.dumps(body).encode(), headers={"content-type": "application/json"})
    assert resp.status_code == 201, resp.text
    api.post(f"/rl/jobs/{resp.json()['job_id']}/cancel")
    assert api.get("/rl/jobs", params={"limit": 5}).status_code == 200


def test_json_depth_ignores_brackets_inside_strings():
    assert json_depth(b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}') == 1
    assert json_depth(b'"\\"[[["') == 0
    assert json_depth(b"[" * (MAX_JSON_DEPTH + 1)) == MAX_JSON_DEPTH + 1
    assert json_depth(b"") == 0


@pytest.mark.parametrize("url,words", [
    ("http://127.0.0.1:99999", "not a valid URL"),
    ("http://[::1", "not a valid URL"),
    ("ftp://example", "http:// or https://"),
    ("http://", "no host"),
    ("http://exa mple", "spaces"),
    (12, "empty"),
])
def test_verify_refuses_malformed_urls_with_422(api, url, words):
    resp = api.post("/rl/verify_task_app", json={"endpoint_base_url": url})
    assert resp.status_code == 422 and words in _detail(resp)


@pytest.mark.parametrize("body,words", [
    ({"messages": "hello"}, "messages must be a non-empty list"),
    ({"messages": []}, "messages must be a non-empty list"),
    ({"messages": [1, 2]}, "messages[0] must be an object"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": {"a": 1}}, "tools must be a list"),
    ({"messages": [{"role": "user", "content": "x"}], "tools": [{"function": "move"}]}, "tools[0]"),
    ({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "m", "parameters": []}}]}, "parameters"),
    ([1, 2, 3], "JSON object"),
])
def test_chat_requests_of_the_wrong_shape_are_422(api, backend, body, words):
    resp = loopback_http.post(backend.url + "/api/v1/chat/completions", params={"cid": "job_x:r"}, json=body,
                              headers={"Authorization": f"Bearer {API_KEY}"})
    assert resp.status_code == 422 and words in _detail(resp)


@pytest.mark.parametrize("params", [{"since_seq": 2**70}, {"since_seq": -5}, {"limit": 10**9}])
def test_absurd_cursors_are_422(api, params):
    job_id = api.get("/rl/jobs").json()["jobs"][0]["job_id"] if api.get("/rl/jobs").json()["jobs"] else "job_x"
    resp = api.get(f"/rl/jobs/{job_id}/events", params=params)
    assert resp.status_code in (404, 422) and resp.status_code != 500


def test_a_huge_last_event_id_is_ignored_not_a_crash(api, taskapp):
    job_id = api.post("/rl/jobs", json=payload(taskapp.url)).json()["job_id"]
    resp = api.get(f"/rl/jobs/{job_id}/events", headers={"Last-Event-ID": "9" * 40},
                   params={"limit": 5})
    assert resp.status_code == 200


def test_a_slow_body_does_not_block_other_clients(backend):
    """A client trickling a body holds only its own request."""
    sock = socket.create_connection((backend.host, backend.port))
    sock.sendall(b"POST /api/rl/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 1000\r\nAuthorization: Bearer " + API_KEY.encode() + b"\r\n\r\n{")
    try:
        assert _health_latency(backend.url) < 2.0
    finally:
        sock.close()


def test_concurrent_hostile_requests_leave_the_backend_answering(backend):
    errors: list[str] = []

    def flood() -> None:
        with loopback_http.client(timeout=10) as client:
            for _ in range(15):
                resp = client.post(backend.url + "/api/rl/jobs", content=b"[" * 50_000,
                                   headers={"Authorization": f"Bearer {API_KEY}", "content-type": "application/json"})
                if resp.status_code >= 500:
                    errors.append(resp.text)

    threads = [threading.Thread(target=flood) for _ in range(4)]
    for thread in threads:
        thread.start()
    assert _health_latency(backend.url) < 2.0
    for thread in threads:
        thread.join()
    assert not errors


def test_an_error_from_a_bug_is_json_and_names_no_secret():
    """The catch-all answer names the kind of error only: its text could quote a key."""
    from fastapi import FastAPI

    from app.local.server.errors import install_json_errors
    from app.local.servers import ServerHandle, _bind

    app = FastAPI()
    install_json_errors(app)

    @app.get("/boom")
    async def boom() -> None:
        raise ValueError(f"bad header Authorization: Bearer {API_KEY}")

    with ServerHandle("buggy", app, _bind("127.0.0.1", 0)).start("/docs") as server:
        resp = loopback_http.get(server.url + "/boom")
    assert resp.status_code == 500 and "ValueError" in _detail(resp)
    assert API_KEY[:5] not in resp.text


def test_the_server_commands_refuse_bad_ports_in_words():
    from app.core.errors import UsageError
    from app.local.servers import _bind_for_serving

    with pytest.raises(UsageError, match="is not a TCP port"):
        _bind_for_serving("127.0.0.1", 99999, "backend")
    with _bind_for_serving("127.0.0.1", 0, "backend") as taken:
        taken.listen()
        with pytest.raises(UsageError, match="already in use"):
            _bind_for_serving("127.0.0.1", taken.getsockname()[1], "backend")
    # A documentation-only address (TEST-NET-1): binding fails locally, nothing is sent.
    with pytest.raises(UsageError, match="cannot listen on 192.0.2.1"):
        _bind_for_serving("192.0.2.1", 0, "task app")


@pytest.mark.parametrize("where,value", [
    ("env", 10**20), ("env", "x"), ("env", [1]), ("env", -5), ("policy", "ten"), ("policy", 1e300),
])
def test_a_rollout_with_a_bad_max_turns_is_422(taskapp, closed_url, where, value):
    body = {"run_id": f"bad-{where}-{value!r}", "env": {"seed": 1, "config": {}}, "mode": "rl",
            "policy": {"config": {"inference_url": closed_url}}}
    body[where]["config"]["max_turns"] = value
    resp = loopback_http.post(taskapp.url + "/rollout", json=body, headers={"X-API-Key": ENV_KEY})
    assert resp.status_code == 422 and "max_turns" in _detail(resp)


@pytest.mark.parametrize("policy_config,words", [
    ({}, "inference_url"),
    ({"inference_url": "http://[::1"}, "inference_url must be an http(s) URL"),
    ({"inference_url": "http://127.0.0.1:9", "temperature": -1}, "temperature"),
])
def test_a_rollout_with_a_bad_policy_config_is_422(taskapp, policy_config, words):
    body = {"run_id": "bad-policy", "env": {"seed": 1}, "mode": "rl", "policy": {"config": policy_config}}
    resp = loopback_http.post(taskapp.url + "/rollout", json=body, headers={"X-API-Key": ENV_KEY})
    assert resp.status_code == 422 and words in _detail(resp)


# Bounds on numbers, labels, keys, URLs and content types.

def _job_count(api) -> int:
    return len(api.get("/rl/jobs", params={"limit": 500}).json()["jobs"])


@pytest.mark.parametrize("where,path", [
    (("tags", "note"), "tags.note"),
    (("compute", "gpu_count"), "compute.gpu_count"),
    (("data", "config", "tags", "x"), "data.config.tags.x"),
])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_number_anywhere_in_a_job_is_422_naming_its_path(api, taskapp, where, path, value):
    body = payload(taskapp.url)
    table = body
    for key in where[:-1]:
        table = table.setdefault(key, {})
    table[where[-1]] = value
    before = _job_count(api)
    resp = api.post("/rl/jobs", content=_json_with_nonfinite(body), headers={"content-type": "application/json"})
    assert resp.status_code == 422 and path in _detail(resp) and "not finite" in _detail(resp)
    assert _job_count(api) == before


def test_a_number_too_large_for_a_float_is_422_too(api, taskapp):
    text = json.dumps(payload(taskapp.url)).replace('"source": "train-cli"', '"source": 1e999')
    resp = api.post("/rl/jobs", content=text.encode(), headers={"content-type": "application/json"})
    assert resp.status_code == 422 and "tags.source" in _detail(resp)


def test_the_task_app_refuses_nan_too(taskapp, closed_url):
    body = {"run_id": "nan", "env": {"seed": 1}, "mode": "rl", "policy": {"config": {"inference_url": closed_url}},
            "extra": float("nan")}
    resp = loopback_http.post(taskapp.url + "/rollout", content=json.dumps(body).encode(),
                              headers={"X-API-Key": ENV_KEY, "content-type": "application/json"})
    assert resp.status_code == 422 and "extra" in _detail(resp)


def test_a_huge_label_is_refused_naming_it(api, taskapp):
    body = payload(taskapp.url)
    body["data"]["config"].setdefault("model", {})["label"] = "x" * 900_000
    resp = api.post("/rl/jobs", json=body)
    assert resp.status_code == 422 and "data.config.model.label" in _detail(resp) and "at most 256" in _detail(resp)
    body = payload(taskapp.url)
    body["data"]["config"]["judge"] = {"rubric": "y" * 20_000}
    resp = api.post("/rl/jobs", json=body)
    assert resp.status_code == 422 and "data.config.judge.rubric" in _detail(resp)


@pytest.mark.parametrize("key,words", [
    # Longer: uvicorn with h11 refuses a header block over 16 kB before the app sees it (httptools does not).
    (b"k" * 8_000, "1 to 255 characters"),
    (b"k" * 256, "1 to 255 characters"),
    ("café-key".encode(), "printable ASCII"),
], ids=["8000-chars", "256-chars", "not-ascii"])
def test_a_bad_idempotency_key_is_400_naming_it(api, taskapp, key, words):
    before = _job_count(api)
    resp = api.post("/rl/jobs", json=payload(taskapp.url), headers={"Idempotency-Key": key})
    assert resp.status_code == 400 and "Idempotency-Key" in _detail(resp) and words in _detail(resp)
    assert "kkkkkkkkkk" not in resp.text and "caf" not in resp.text
    assert _job_count(api) == before


def test_a_255_character_idempotency_key_is_taken(api, taskapp):
    resp = api.post("/rl/jobs", json=payload(taskapp.url), headers={"Idempotency-Key": "k" * 255})
    assert resp.status_code == 201, resp.text
    api.post(f"/rl/jobs/{resp.json()['job_id']}/cancel")


@pytest.mark.parametrize("route", ["/rl/jobs", "/rl/verify_task_app"])
def test_a_task_url_with_credentials_is_refused_without_echoing_them(api, taskapp, route):
    url = taskapp.url.replace("http://", "http://alice:s3cr3t-pw@")
    body = payload(url) if route == "/rl/jobs" else {"endpoint_base_url": url}
    resp = api.post(route, json=body)
    assert resp.status_code == 422 and "credentials" in _detail(resp) and "remove them" in _detail(resp)
    assert "s3cr3t" not in resp.text and "alice" not in resp.text
    assert all("s3cr3t" not in (job["metadata"].get("task_app_url") or "")
               for job in api.get("/rl/jobs", params={"limit": 500}).json()["jobs"])


@pytest.mark.parametrize("headers,content", [
    ({"content-type": "text/plain"}, None),
    ({"content-type": "application/x-www-form-urlencoded"}, None),
    ({}, None),  # no Content-Type at all
    ({"content-type": "application/json; charset=latin-1"}, None),
])
def test_a_job_body_not_sent_as_json_is_415(api, taskapp, headers, content):
    before = _job_count(api)
    resp = api.post("/rl/jobs", content=json.dumps(payload(taskapp.url)).encode(), headers=headers)
    assert resp.status_code == 415 and "application/json" in _detail(resp)
    assert _job_count(api) == before


def test_a_multipart_job_body_is_415(api, taskapp):
    before = _job_count(api)
    resp = api.post("/rl/jobs", files={"body": ("job.json", json.dumps(payload(taskapp.url)), "application/json")})
    assert resp.status_code == 415 and "multipart/form-data" in _detail(resp)
    assert _job_count(api) == before


def test_json_with_a_utf8_charset_is_taken(api, taskapp):
    resp = api.post("/rl/jobs", content=json.dumps(payload(taskapp.url)).encode(),
                    headers={"content-type": "application/json; charset=utf-8"})
    assert resp.status_code == 201, resp.text
    api.post(f"/rl/jobs/{resp.json()['job_id']}/cancel")


def test_the_task_app_refuses_a_rollout_not_sent_as_json(taskapp, closed_url):
    body = {"run_id": "plain", "env": {"seed": 1}, "mode": "rl", "policy": {"config": {"inference_url": closed_url}}}
    resp = loopback_http.post(taskapp.url + "/rollout", content=json.dumps(body).encode(),
                              headers={"X-API-Key": ENV_KEY, "content-type": "text/plain"})
    assert resp.status_code == 415 and "application/json" in _detail(resp)


def test_a_post_without_a_body_needs_no_content_type(api, taskapp):
    job_id = api.post("/rl/jobs", json=payload(taskapp.url)).json()["job_id"]
    assert api.post(f"/rl/jobs/{job_id}/cancel").status_code in (200, 409)


def test_task_info_answers_at_most_1000_seeds(taskapp):
    def get(**params):
        return loopback_http.get(taskapp.url + "/task_info", params=params, headers={"X-API-Key": ENV_KEY}, timeout=30)

    many = get(seeds=",".join(str(i) for i in range(5_000)))  # 24 kB of URL
    assert many.status_code == 422 and "at most 1,000 seeds" in _detail(many) and len(many.content) < 1_000
    assert len(get(seeds=",".join(str(i) for i in range(1_000))).json()) == 1_000
    assert get(seed=[str(i) for i in range(1_001)]).status_code == 422
    assert get(seeds="1,x").status_code == 422


def test_a_wrong_method_names_every_allowed_one(backend):
    resp = loopback_http.request("OPTIONS", backend.url + "/api/rl/jobs",
                                 headers={"Authorization": f"Bearer {API_KEY}"})
    assert resp.status_code == 405 and resp.headers["allow"] == "GET, POST"
