"""The backend client against a real loopback server that misbehaves on demand."""

from __future__ import annotations

import socket

import httpx
import pytest

from app.core.api.backend_url import backend_from_env, ensure_api_base
from app.core.api.client import SynthClient
from app.core.api.errors import (
    AuthError,
    BackendTimeout,
    BackendUnreachable,
    BadResponseError,
    ConflictError,
    NotFoundError,
    RlNotOffered,
    ServerError,
)
from support.fakes import ScriptedJob, event, training_timeline


def _client(backend, **kwargs) -> SynthClient:
    kwargs.setdefault("backoff", 0.01)
    return SynthClient(backend.url, backend.api_key, **kwargs)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_ensure_api_base_and_env_precedence():
    assert ensure_api_base("http://h:1/") == "http://h:1/api"
    assert ensure_api_base("http://h:1/api") == "http://h:1/api"
    assert backend_from_env({}) == ("https://api.usesynth.ai/api", "default")
    assert backend_from_env({"BACKEND_BASE_URL": "http://a", "BACKEND_OVERRIDE": "http://b"})[0] == "http://a/api"
    assert backend_from_env({"BACKEND_OVERRIDE": "http://b/api"})[0] == "http://b/api"
    assert backend_from_env({"SYNTH_BACKEND_URL_OVERRIDE": "local"})[0] == "http://localhost:8000/api"
    assert backend_from_env({"SYNTH_BACKEND_URL_OVERRIDE": "dev", "DEV_BACKEND_URL": "http://d:9"})[0] == "http://d:9/api"


async def test_bearer_auth_and_status(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline()))
    async with _client(faulty_backend) as client:
        status = await client.get_job("job_a")
    assert status.job_id == "job_a" and status.status == "queued"
    headers = faulty_backend.requests[-1][2]
    assert headers["Authorization"] == f"Bearer {faulty_backend.api_key}"


async def test_wrong_key_is_an_auth_error_without_the_key(faulty_backend):
    async with SynthClient(faulty_backend.url, "sk_wrong_secret_value_1234") as client:
        with pytest.raises(AuthError) as info:
            await client.get_job("job_a")
    assert "SYNTH_API_KEY" in info.value.message and "401" in info.value.message
    assert "sk_wrong_secret_value_1234" not in info.value.render()


@pytest.mark.parametrize(("call", "request_line", "what"), [
    (lambda c: c.probe_rl(), "GET /rl/jobs", "the RL job list"),
    (lambda c: c.verify_task_app("http://127.0.0.1:1"), "POST /rl/verify_task_app", "task app verification"),
    (lambda c: c.verify_model("Qwen/Qwen3-4B"), "POST /rl/verify_model", "the model check"),
    (lambda c: c.create_job({"job_type": "rl"}, idempotency_key="k"), "POST /rl/jobs", "job creation"),
    (lambda c: c.get_job("job_a"), "GET /rl/jobs/job_a", "status of job job_a"),
    (lambda c: c.events("job_a", 0), "GET /rl/jobs/job_a/events", "events of job job_a"),
    (lambda c: c.metrics("job_a", -1), "GET /rl/jobs/job_a/metrics", "metrics of job job_a"),
    (lambda c: c.rollouts_page("job_a"), "GET /rl/jobs/job_a/rollouts", "rollouts of job job_a"),
    (lambda c: c.cancel_job("job_a"), "POST /rl/jobs/job_a/cancel", "cancel of job job_a"),
    (lambda c: c.list_jobs(), "GET /rl/jobs", "job list"),
], ids=lambda value: value if isinstance(value, str) and value.startswith(("GET", "POST")) else None)
async def test_a_401_names_the_request_that_was_refused(faulty_backend, call, request_line, what):
    """The walk: a 401 row for POST /rl/verify_task_app named "the RL job list". Every
    endpoint's refusal names its own request, by method and path under the base URL."""
    async with SynthClient(faulty_backend.url, "sk_wrong_secret_value_1234", retries=0) as client:
        with pytest.raises(AuthError) as info:
            await call(client)
    error = info.value
    assert error.request == request_line and error.status == 401
    assert f"rejected the SYNTH_API_KEY on {request_line} ({what}): HTTP 401" in error.message
    assert "sk_wrong_secret_value_1234" not in error.render()


async def test_connection_refused_is_typed_and_explained():
    async with SynthClient(f"http://127.0.0.1:{_free_port()}", "sk_x_1234567", retries=1, backoff=0.01) as client:
        with pytest.raises(BackendUnreachable) as info:
            await client.get_job("job_a")
    assert "connection refused" in info.value.message
    assert "--backend" in info.value.hint


async def test_html_answer_is_a_bad_response(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline()))
    faulty_backend.inject("status", "html", "html", "html")
    async with _client(faulty_backend, retries=2) as client:
        with pytest.raises(BadResponseError) as info:
            await client.get_job("job_a")
    assert "HTML" in info.value.message and "/api" in info.value.hint


async def test_reads_retry_through_500_drop_and_html(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline()))
    faulty_backend.inject("status", "500", "drop", "html")
    async with _client(faulty_backend, retries=3) as client:
        status = await client.get_job("job_a")
    assert status.status == "queued"
    assert faulty_backend.count("/rl/jobs/job_a") == 4


async def test_persistent_500_surfaces_as_server_error(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline()))
    faulty_backend.inject("status", "503", "503")
    async with _client(faulty_backend, retries=1) as client:
        with pytest.raises(ServerError) as info:
            await client.get_job("job_a")
    assert info.value.status == 503 and "injected 503" in info.value.message


async def test_slow_answer_times_out(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline()))
    faulty_backend.inject("status", "slow")
    async with _client(faulty_backend, retries=0, timeout=httpx.Timeout(0.3)) as client:
        with pytest.raises(BackendTimeout):
            await client.get_job("job_a")


async def test_unknown_job_is_not_found_after_trying_the_fallback(faulty_backend):
    async with _client(faulty_backend) as client:
        with pytest.raises(NotFoundError) as raised:
            await client.get_job("job_missing")
    paths = [p for _, p, _, _ in faulty_backend.requests]
    assert paths == ["/api/rl/jobs/job_missing", "/api/learning/jobs/job_missing"]
    # The error names the path asked first, not the fallback the user never asked for.
    assert "GET /api/rl/jobs/job_missing answered 404" in raised.value.message
    assert "/learning/jobs/job_missing" not in raised.value.message
    assert "has no job job_missing, or no RL jobs at all" in raised.value.message


async def test_fallback_path_only_after_404_and_then_remembered(faulty_backend):
    faulty_backend.rl_paths_missing = True
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline()))
    async with _client(faulty_backend) as client:
        await client.get_job("job_a")
        await client.events("job_a", 0)
        await client.metrics("job_a", -1)
    paths = [p for _, p, _, _ in faulty_backend.requests]
    assert paths == ["/api/rl/jobs/job_a", "/api/learning/jobs/job_a",
                     "/api/learning/jobs/job_a/events", "/api/learning/jobs/job_a/metrics"]


async def test_primary_path_never_touches_fallback(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline()))
    async with _client(faulty_backend) as client:
        for _ in range(3):
            await client.get_job("job_a")
            await client.events("job_a", 0)
    assert faulty_backend.count("/learning/") == 0


async def test_create_sends_idempotency_key_and_replays(faulty_backend):
    payload = {"job_type": "rl", "data": {"x": 1}}
    async with _client(faulty_backend) as client:
        first = await client.create_job(payload, idempotency_key="idem-1")
        again = await client.create_job(payload, idempotency_key="idem-1")
        with pytest.raises(ConflictError):
            await client.create_job({"job_type": "rl", "data": {"x": 2}}, idempotency_key="idem-1")
    assert first.status == 201 and again.status == 200 and first.job_id == again.job_id
    sent = [h for m, p, h, _ in faulty_backend.requests if m == "POST"]
    assert all(h["Idempotency-Key"] == "idem-1" for h in sent)


async def test_create_retries_a_dropped_answer_with_the_same_key(faulty_backend):
    faulty_backend.inject("create", "drop")
    async with _client(faulty_backend) as client:
        result = await client.create_job({"job_type": "rl"}, idempotency_key="idem-2")
    assert result.job_id == "job_0001"
    assert len(faulty_backend.jobs) == 1


async def test_create_without_key_is_never_retried(faulty_backend):
    faulty_backend.inject("create", "502")
    async with _client(faulty_backend) as client:
        with pytest.raises(ServerError):
            await client.create_job({"job_type": "rl"}, idempotency_key=None)
    assert faulty_backend.count("/rl/jobs") == 1


async def test_verify_error_status_is_a_result_not_an_exception(faulty_backend):
    faulty_backend.verify_answer = (500, {"detail": "verifier crashed"})
    async with _client(faulty_backend, retries=0) as client:
        result = await client.verify_task_app("http://task")
    assert result.status == 500 and not result.any_ok
    assert "verifier crashed" in result.preview_source.preview(800)


async def test_verify_model_reads_the_backends_answer_and_none_without_the_route(faulty_backend):
    """docs/wire-contract.md#model-verification: the body names the model, its template and the
    learning rate; a backend without the route (404, as the hosted service) answers None."""
    async with _client(faulty_backend, retries=0) as client:
        assert await client.verify_model("Qwen/Qwen3-4B") is None
        faulty_backend.model_answer = (200, {"ok": False, "trains": "lm", "parameters": 134_515_008, "bytes": True,
                                             "problems": [{"message": "cannot render", "fix": "set qwen2_5"}, "junk"],
                                             "warnings": [{"message": "too high"}]})
        result = await client.verify_model("HuggingFaceTB/SmolLM2-135M-Instruct", chat_template="qwen2_5",
                                           learning_rate=0.01)
        assert result is not None and not result.ok and result.trains == "lm"
        assert [(p.message, p.fix) for p in result.problems] == [("cannot render", "set qwen2_5")]
        assert [(w.message, w.fix) for w in result.warnings] == [("too high", None)]
        assert result.parameters == 134_515_008 and result.bytes is None  # a boolean is not a size
        faulty_backend.model_answer = (200, ["not", "an", "answer"])
        odd = await client.verify_model("x/y")
        assert odd is not None and not odd.ok and "without a verdict" in odd.problems[0].message
    asked = [body for method, path, _, body in faulty_backend.requests if path == "/api/rl/verify_model"]
    assert asked[1] == {"model": "HuggingFaceTB/SmolLM2-135M-Instruct", "chat_template": "qwen2_5",
                        "learning_rate": 0.01}


async def test_events_and_metrics_pages_tolerate_other_spellings(faulty_backend):
    job = faulty_backend.add_job(ScriptedJob("job_a", [("running", [
        {"seq": "3", "event_type": "rl.train.step", "msg": "old reader spelling"},
        event(4, level="WARNING"),
    ], [{"name": "train.mean_score", "step": 0, "value": "0.5"}])]))
    job.tick = 1
    async with _client(faulty_backend) as client:
        events = await client.events("job_a", 0)
        points = await client.metrics("job_a", -1)
    assert [(e.seq, e.type, e.message) for e in events][0] == (3, "rl.train.step", "old reader spelling")
    assert events[1].level == "warning"
    assert points[0].step == 0 and points[0].value == 0.5


async def test_cancel_and_list(faulty_backend):
    faulty_backend.add_job(ScriptedJob("job_a", training_timeline()))
    async with _client(faulty_backend) as client:
        answer = await client.cancel_job("job_a")
        jobs = await client.list_jobs()
    assert answer.status == "cancelled"
    assert [j.job_id for j in jobs] == ["job_a"]


async def test_server_echoing_the_key_is_redacted(faulty_backend):
    faulty_backend.create_answer = (400, {"detail": f"bad key {faulty_backend.api_key}"})
    async with _client(faulty_backend) as client:
        with pytest.raises(Exception) as info:
            await client.create_job({}, idempotency_key="k")
    assert faulty_backend.api_key not in info.value.render()
    assert "sk_t…89" in info.value.render()


def test_every_sdk_generation_s_backend_variable_in_its_documented_order():
    # docs/compatibility.md: the 0.2.x train command's three, then SYNTH_API_URL (today's SDK),
    # then the names it deprecated; the hosted service of SDK 0.3.9 and later by default.
    order = [("BACKEND_BASE_URL", "http://a"), ("BACKEND_OVERRIDE", "http://b"),
             ("SYNTH_BACKEND_URL_OVERRIDE", "dev"), ("SYNTH_API_URL", "http://c"),
             ("SYNTH_BACKEND_URL", "http://d"), ("SYNTH_API_BASE_URL", "http://e")]
    env = dict(order) | {"DEV_BACKEND_URL": "http://dev"}
    expected = ["http://a/api", "http://b/api", "http://dev/api", "http://c/api", "http://d/api", "http://e/api"]
    for (variable, _), base in zip(order, expected, strict=True):
        assert backend_from_env(env)[0] == base, variable
        del env[variable]
    assert backend_from_env(env) == ("https://api.usesynth.ai/api", "default")
    assert backend_from_env({"SYNTH_API_URL": "https://api.usesynth.ai"}) == ("https://api.usesynth.ai/api",
                                                                              "SYNTH_API_URL")
    assert backend_from_env({"SYNTH_BACKEND_URL": "http://x:1/api/"}) == ("http://x:1/api", "SYNTH_BACKEND_URL")


async def test_the_probe_reads_the_generation_the_backend_names(faulty_backend):
    async with _client(faulty_backend) as client:
        assert (await client.probe_rl()).generations == frozenset()
        faulty_backend.contract_header = "0.2, 0.5, 9.9"
        support = await client.probe_rl()
    assert support.generations == {"0.2", "0.5"} and "X-Synth-RL-Contract" in support.how


async def test_the_probe_says_plainly_when_a_backend_has_no_rl_jobs(faulty_backend):
    faulty_backend.rl_offered = False
    async with _client(faulty_backend) as client:
        with pytest.raises(RlNotOffered) as caught:
            await client.probe_rl()
    assert caught.value.exit_code == 5 and "--backend local" in caught.value.hint
    assert "after 0.5.0" in caught.value.message
