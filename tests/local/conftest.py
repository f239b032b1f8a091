"""Fixtures for the embedded backend and task app tests: real servers on free loopback ports."""

from __future__ import annotations

import copy
import gc
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.commands.demo import demo_payload as job_payload
from app.commands.demo import load_demo_config
from app.core.api.retry import Backoff
from app.local.servers import ServerHandle, _bind, start_backend, start_taskapp
from app.local.training import rollouts
from app.local.training.retry import DEFAULT_BACKOFF
from support import loopback_http
from support.pilot_waits import poll_until
from support.secrets_for_tests import random_key
from support.tiers import slow_fixture

from .sdk_taskapps.harness import SdkTaskApp, ensure_sdk_python

API_KEY = random_key("sk_test_", 24)
ENV_KEY = random_key(length=64)
TERMINAL = {"succeeded", "failed", "cancelled"}


def small_config(**training: Any) -> dict[str, Any]:
    """The demo config shrunk to a job of a fraction of a second."""
    config = copy.deepcopy(load_demo_config())
    config["training"].update(num_epochs=1, iterations_per_epoch=2, batch_size=2, group_size=2, max_turns=4)
    config["training"].update(training)
    config["evaluation"].update(instances=2, every_n_iters=1, seeds=[0, 1])
    return config


def long_config() -> dict[str, Any]:
    """A job that runs until it is cancelled or interrupted (no eval)."""
    config = small_config(iterations_per_epoch=5000)
    del config["evaluation"]
    return config


def payload(task_url: str, config: dict[str, Any] | None = None) -> dict[str, Any]:
    return job_payload(config or small_config(), task_url)


def api_client(server: ServerHandle, key: str = API_KEY) -> httpx.Client:
    return loopback_http.client(base_url=server.url + "/api", headers={"Authorization": f"Bearer {key}"}, timeout=15.0)


def create_job(api: httpx.Client, body: dict[str, Any], **kwargs: Any) -> str:
    resp = api.post("/rl/jobs", json=body, **kwargs)
    assert resp.status_code == 201, resp.text
    return resp.json()["job_id"]


def wait_terminal(api: httpx.Client, job_id: str, timeout: float = 30.0) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        job = api.get(f"/rl/jobs/{job_id}").json()
        return job if job["status"] in TERMINAL else None

    return poll_until(done, timeout=timeout, what=f"job {job_id} to finish")


def events_of(api: httpx.Client, job_id: str, prefix: str = "/rl/jobs") -> list[dict[str, Any]]:
    return api.get(f"{prefix}/{job_id}/events", params={"limit": 1000}).json()["events"]


def wait_event(api: httpx.Client, job_id: str, event_type: str, timeout: float = 15.0) -> dict[str, Any]:
    return poll_until(lambda: next((e for e in events_of(api, job_id) if e["type"] == event_type), None),
                    timeout=timeout, what=f"a {event_type} event of {job_id}")


def read_sse(client: httpx.Client, url: str, headers: dict[str, str] | None = None,
             params: dict[str, Any] | None = None) -> list[dict[str, str]]:
    """Every frame of a server-sent-event stream, until the server closes it."""
    frames, frame = [], {}
    with client.stream("GET", url, headers={"Accept": "text/event-stream", **(headers or {})},
                       params=params, timeout=20.0) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if line == "":
                if frame:
                    frames.append(frame)
                frame = {}
            elif line.startswith(":"):
                frame["comment"] = line
            else:
                name, _, value = line.partition(":")
                frame[name] = value.removeprefix(" ")
    return frames


@pytest.fixture(scope="session")
def taskapp() -> Iterator[ServerHandle]:
    with start_taskapp(env_api_keys=[ENV_KEY]) as server:
        yield server


@pytest.fixture(scope="session")
def taskapp_05() -> Iterator[ServerHandle]:
    """The gridworld speaking rollout contract 0.5 (trace_correlation_id in, reward_info out)."""
    with start_taskapp(env_api_keys=[ENV_KEY], contract="0.5") as server:
        yield server


@pytest.fixture(scope="session")
def backend(tmp_path_factory: pytest.TempPathFactory, taskapp: ServerHandle) -> Iterator[ServerHandle]:
    db = tmp_path_factory.mktemp("backend") / "state.sqlite3"
    with start_backend(api_key=API_KEY, db_path=db, env_api_keys=[ENV_KEY]) as server:
        yield server


@pytest.fixture
def api(backend: ServerHandle) -> Iterator[httpx.Client]:
    with api_client(backend) as client:
        yield client


WholeJob = Callable[[httpx.Client, dict[str, Any], float], tuple[str, dict[str, Any]]]


@slow_fixture("runs whole training jobs to their end: seconds to a minute of real RL each", scope="session")
def whole_job() -> WholeJob:
    """``whole_job(api, body, timeout)``: create the job, wait for its end; (job id, final job).
    Tests of what a job learns, or of a job through faults, run many steps; a test of one
    behaviour runs a job of a fraction of a second (small_config) and stays quick."""

    def run(api: httpx.Client, body: dict[str, Any], timeout: float = 120.0) -> tuple[str, dict[str, Any]]:
        job_id = create_job(api, body)
        return job_id, wait_terminal(api, job_id, timeout=timeout)

    return run


def seeded_demo_config() -> dict[str, Any]:
    """The demo config's first 8 steps with seed 1: chance at step 1, eval 0.93 after step 8."""
    config = copy.deepcopy(load_demo_config())
    config["training"].update(seed=1, num_epochs=1, iterations_per_epoch=8)
    return config


@slow_fixture("a whole seeded demo job (8 steps)", group="seeded-demo", scope="session")
def seeded_demo_job(backend: ServerHandle, taskapp: ServerHandle, whole_job: WholeJob) -> tuple[str, dict[str, Any]]:
    """seeded_demo_config() trained to its end once a run, on the session's backend: for the
    tests that read a real job's rollouts, and for the resume test's run without a kill (its
    tests run on one worker: --dist loadgroup). (job id, final job)."""
    with api_client(backend) as api:
        job_id, job = whole_job(api, payload(taskapp.url, seeded_demo_config()), 120)
    assert job["status"] == "succeeded", job
    return job_id, job


# The task app's retries of the chat endpoint as they are, with waits of milliseconds (about
# 1.4 s in all otherwise): for tests that send many failing or faulty turns.
QUICK_CHAT_RETRIES = replace(DEFAULT_BACKOFF, first_delay_s=0.001, max_delay_s=0.005)


@pytest.fixture
def quick_rollout_retries(monkeypatch: pytest.MonkeyPatch) -> Backoff:
    """The trainer's rollout retries as they are (the same attempts, the same messages), with
    waits of 10-50 ms instead of about 8 s in all: for tests of what a failed job says, not of
    how long it waited (test_local_chaos keeps the real waits: a restart must fit in them)."""
    quick = replace(rollouts.ROLLOUT_BACKOFF, first_delay_s=0.01, max_delay_s=0.05)
    monkeypatch.setattr(rollouts, "ROLLOUT_BACKOFF", quick)
    return quick


@slow_fixture("imports torch and the trainer extra (transformers, TRL, peft, accelerate)", scope="session")
def trainer_extra() -> None:
    """For a test that imports the trainer extra: torch takes seconds to import in each worker.
    Without the extra installed the test fails saying what to install; it is never skipped."""
    from app.local.policies import trainer_extra_missing

    if (missing := trainer_extra_missing()) is not None:
        pytest.fail(f"{missing} The lm policy's tests need it: pip install -e '.[test,trainer]'", pytrace=False)


@slow_fixture("loads torch and a model", scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory, trainer_extra: None) -> Path:
    """The tiny Qwen3-architecture model, built offline once a worker (app/local/policies/lm/tiny_model.py)."""
    from app.local.policies.lm.tiny_model import build_tiny_qwen3

    model = build_tiny_qwen3(tmp_path_factory.mktemp("tiny-qwen3") / "model")
    # torch, transformers and TRL, imported for good: frozen, as the worker's start is (conftest.py's
    # pytest_collection_finish), so the lm policy's collection after each load and update skips them.
    gc.collect()
    gc.freeze()
    return model


@pytest.fixture(scope="module")
def press_app() -> Iterator[ServerHandle]:
    """Asks for A only (the button the untrained fixture model presses least, about 1 in 16):
    the model must learn which of the four buttons the app wants."""
    from app.local.taskapps.press import create_press_taskapp

    app = create_press_taskapp(env_api_keys=[ENV_KEY], asks=("A",))
    with ServerHandle("task app", app, _bind("127.0.0.1", 0)).start("/") as server:
        yield server


@pytest.fixture(scope="module")
def closed_url() -> Iterator[str]:
    """A loopback port that refuses connections: bound, never listened on."""
    with _bind("127.0.0.1", 0) as sock:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@slow_fixture("a Python with synth-ai 0.5.0 (the SDK's venv), made when missing", group="sdk", scope="session")
def sdk_python() -> str:
    """The Python of the SDK's venv (support/provision.py makes it once per machine); fails,
    never skips, when it cannot be made."""
    try:
        return ensure_sdk_python()
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)


@slow_fixture("runs task apps in the SDK's venv: a process each that imports synth-ai", group="sdk",
              scope="session")
def sdk_taskapps(tmp_path_factory: pytest.TempPathFactory, sdk_python: str) -> Iterator[Callable[[str], SdkTaskApp]]:
    """The task apps written on synth-ai 0.5.0's framework (tests/local/sdk_taskapps): `sdk_taskapps(name)`
    starts one ("context_free" or "guess_number") as a uvicorn server in a child process on a
    free loopback port, with ENVIRONMENT_API_KEY=ENV_KEY in its environment, once per session;
    all are stopped at the end."""
    python = sdk_python
    running: dict[str, SdkTaskApp] = {}

    def start(name: str) -> SdkTaskApp:
        if name not in running:
            workdir = tmp_path_factory.mktemp(f"sdk-{name}")
            running[name] = SdkTaskApp(name, python=python, env_api_key=ENV_KEY, workdir=workdir).start()
        return running[name]

    yield start
    for app in running.values():
        app.stop()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state.sqlite3"
