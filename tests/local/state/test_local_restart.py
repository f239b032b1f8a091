"""A restart of the backend on the same database loses nothing and resumes what it stopped."""

from __future__ import annotations

import threading
import time

from app.local.servers import start_backend
from app.local.state.store import Store
from support.pilot_waits import poll_until

from ..conftest import (
    API_KEY,
    ENV_KEY,
    api_client,
    create_job,
    events_of,
    long_config,
    payload,
    read_sse,
    wait_event,
    wait_terminal,
)


def test_a_finished_job_survives_a_restart(db_path, taskapp):
    with start_backend(api_key=API_KEY, db_path=db_path, env_api_keys=[ENV_KEY]) as backend, api_client(backend) as api:
        job_id = create_job(api, payload(taskapp.url))
        before = wait_terminal(api, job_id)
        events = events_of(api, job_id)
        metrics = api.get(f"/rl/jobs/{job_id}/metrics").json()
    with start_backend(api_key=API_KEY, db_path=db_path, env_api_keys=[ENV_KEY]) as backend, api_client(backend) as api:
        assert api.get(f"/rl/jobs/{job_id}").json() == before
        assert events_of(api, job_id) == events
        assert api.get(f"/rl/jobs/{job_id}/metrics").json() == metrics
        # A new job after the restart numbers its own events from 1 again.
        other = create_job(api, payload(taskapp.url))
        wait_terminal(api, other)
        assert events_of(api, other)[0]["seq"] == 1


def test_a_job_running_at_shutdown_resumes_on_restart(db_path, taskapp):
    streamed: list = []
    backend = start_backend(api_key=API_KEY, db_path=db_path, env_api_keys=[ENV_KEY])
    with api_client(backend) as api, api_client(backend) as stream_client:
        job_id = create_job(api, payload(taskapp.url, long_config()))
        wait_event(api, job_id, "rl.train.step")
        # A live event stream must not hold the shutdown up: the server ends it.
        reader = threading.Thread(target=lambda: streamed.extend(read_sse(stream_client, f"/rl/jobs/{job_id}/events")))
        reader.start()
        poll_until(lambda: streamed or len(events_of(api, job_id)) > 8, what="more progress")
        stopping = time.monotonic()
        backend.stop()
        assert time.monotonic() - stopping < 3.0
        reader.join(5)
    assert not reader.is_alive()
    assert streamed and streamed[0]["id"] == "1"
    with start_backend(api_key=API_KEY, db_path=db_path, env_api_keys=[ENV_KEY]) as backend, api_client(backend) as api:
        resumed = wait_event(api, job_id, "rl.train.resumed")
        # The steps the first run recorded: those before the resumption (the resumed run may
        # already have recorded more by the time the events are read).
        last = max(e["data"]["step"] for e in events_of(api, job_id)
                   if e["type"] == "rl.train.step" and e["seq"] < resumed["seq"])
        assert resumed["data"]["step"] == last and "resumes after step" in resumed["message"]
        poll_until(lambda: [e for e in events_of(api, job_id) if e["type"] == "rl.train.step"
                            and e["data"]["step"] == last + 2], what="two more steps after the restart")
        events = events_of(api, job_id)
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        steps = [e["data"]["step"] for e in events if e["type"] == "rl.train.step"]
        assert steps == sorted(set(steps)) == list(range(1, len(steps) + 1))  # each step once, none missing
        assert api.get(f"/rl/jobs/{job_id}").json()["status"] == "running"
        assert api.post(f"/rl/jobs/{job_id}/cancel").status_code == 200


def test_a_backend_that_stops_with_its_run_fails_what_it_left_running(db_path, taskapp):
    # The demo's and --backend local's backends (resume=False): their jobs stopped with them.
    store = Store(db_path)
    store.create_job("job_left", payload(taskapp.url), "h", None)
    assert store.set_running("job_left")
    store.close()
    with start_backend(api_key=API_KEY, db_path=db_path, env_api_keys=[ENV_KEY], resume=False) as backend, \
            api_client(backend) as api:
        job = api.get("/rl/jobs/job_left").json()
        assert job["status"] == "failed" and "stops with the run that started it" in job["error"]
        assert events_of(api, "job_left")[-1]["type"] == "rl.job.failed"


def test_infrastructure_look_alike_events_only_when_asked(db_path, taskapp):
    with start_backend(api_key=API_KEY, db_path=db_path, env_api_keys=[ENV_KEY], infra_events=True) as backend, \
            api_client(backend) as api:
        job_id = create_job(api, payload(taskapp.url))
        wait_terminal(api, job_id)
        types = [e["type"] for e in events_of(api, job_id)]
        assert {"hatchet.submission.attempt", "rl.runtime.modal.started", "rl.runtime.modal.stopped"} <= set(types)
