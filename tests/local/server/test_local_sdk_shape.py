"""The calls the synth-ai 0.2.22 `train --type rl` command makes (docs/wire-contract.md#embedded-backend)
replayed against the embedded backend and the task app exactly as that client makes
them, including its JobStreamer's polling of every fallback path."""

from __future__ import annotations

import httpx

from app.commands.demo import demo_payload as job_payload
from support import loopback_http
from support.pilot_waits import poll_until

from ..conftest import API_KEY, ENV_KEY, small_config

TERMINAL_STATUSES = {"succeeded", "failed", "cancelled", "canceled", "completed"}
TERMINAL_EVENTS = {"rl.job.completed", "rl.job.failed", "rl.train.completed", "rl.train.failed"}


class ReplayedStreamer:
    """SDK 0.2.22's JobStreamer (StreamEndpoints.rl, lowercase authorization header): status on
    three paths until one answers, events on all three with a cursor each, metrics on two after
    the largest step seen; what it would print, in order."""

    def __init__(self, http: httpx.Client, job_id: str) -> None:
        self.http = http
        self.status_paths = [f"/rl/jobs/{job_id}", f"/learning/jobs/{job_id}", f"/orchestration/jobs/{job_id}"]
        self.event_paths = [p + "/events" for p in self.status_paths]
        self.metric_paths = [f"/rl/jobs/{job_id}/metrics", f"/learning/jobs/{job_id}/metrics"]
        self.cursors = {p: 0 for p in self.event_paths}
        self.last_step: dict[str, int] = {}
        self.seen: set[str] = set()
        self.printed_status: list[str] = []
        self.printed_events: list[int] = []
        self.printed_metrics: list[tuple[str, int]] = []
        self.terminal = False

    def get_json(self, path: str, **params) -> object:
        r = self.http.get(path, params=params)
        if r.status_code >= 400 or "application/json" not in r.headers.get("content-type", ""):
            return None  # the streamer swallows errors and non-JSON bodies
        return r.json()

    def tick(self) -> bool:
        self._status()
        self._events()
        self._metrics()
        return self.terminal or self.printed_status[-1] in TERMINAL_STATUSES

    def _status(self) -> None:
        status = next((payload for payload in map(self.get_json, self.status_paths) if isinstance(payload, dict)),
                      None)
        assert status is not None
        key = f"status:{status.get('updated_at') or status.get('created_at')}"
        if key not in self.seen:
            self.seen.add(key)
            self.printed_status.append(str(status.get("status") or status.get("state")).lower())

    def _events(self) -> None:
        for path in self.event_paths:
            payload = self.get_json(path, since_seq=self.cursors[path], limit=200)
            for event in (payload or {}).get("events", []):
                seq = int(event.get("seq") or 0)
                if seq <= self.cursors[path]:
                    continue
                self.cursors[path] = seq
                if f"event:{seq}" not in self.seen:
                    self.seen.add(f"event:{seq}")
                    self.printed_events.append(seq)
                self.terminal = self.terminal or event.get("type") in TERMINAL_EVENTS

    def _metrics(self) -> None:
        for path in self.metric_paths:
            after = max(self.last_step.values(), default=-1)
            payload = self.get_json(path, after_step=after, limit=200)
            for point in (payload or {}).get("points", []):
                step = int(point.get("step") or -1)  # the 0.2.22 quirk: step 0 would be dropped
                if step <= self.last_step.get(point["name"], -1):
                    continue
                self.last_step[point["name"]] = step
                if f"metric:{point['name']}:{step}" not in self.seen:
                    self.seen.add(f"metric:{point['name']}:{step}")
                    self.printed_metrics.append((point["name"], step))


def test_the_0_2_22_cli_flow(backend, taskapp):
    base = backend.url + "/api"  # ensure_api_base(--backend)
    post_headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}

    # Step 8: backend-side verification; the CLI prints candidates and attempts[].status.
    resp = loopback_http.post(f"{base}/rl/verify_task_app", headers=post_headers,
                              json={"endpoint_base_url": taskapp.url}, timeout=60)
    assert resp.status_code < 400
    report = resp.json()
    assert report["any_ok"]
    assert isinstance(report["candidates_first15"], list)
    assert [a["status"] for a in report["attempts"]]

    # Step 10: check_task_app_health sends all three header styles at once.
    task_headers = {"X-API-Key": ENV_KEY, "X-API-Keys": ENV_KEY, "Authorization": f"Bearer {ENV_KEY}"}
    assert loopback_http.get(f"{taskapp.url}/health", headers=task_headers).status_code == 200
    assert loopback_http.get(f"{taskapp.url}/task_info", headers=task_headers).status_code == 200

    # Step 11-12: create; 200 or 201 with job_id (or id).
    body = job_payload(small_config(), taskapp.url, base)
    resp = loopback_http.post(f"{base}/rl/jobs", headers={**post_headers, "Idempotency-Key": "sdk-shape-1"}, json=body,
                              timeout=60)
    assert resp.status_code in (200, 201)
    job_id = resp.json().get("job_id") or resp.json().get("id")
    assert job_id

    # Step 13: the JobStreamer.
    with loopback_http.client(base_url=base, headers={"authorization": f"Bearer {API_KEY}"}, timeout=60) as http:
        streamer = ReplayedStreamer(http, job_id)
        poll_until(streamer.tick, timeout=30, what="the streamer to reach a terminal state")
        streamer.tick()  # the job may have ended between the status and the events of the last tick
        final = streamer.get_json(f"/rl/jobs/{job_id}")
        assert final["status"] == "succeeded"
        assert streamer.printed_status[-1] == "succeeded"  # printed because updated_at changed
        all_events = streamer.get_json(f"/rl/jobs/{job_id}/events", since_seq=0, limit=200)["events"]
        assert streamer.printed_events == [e["seq"] for e in all_events]  # nothing lost, nothing twice
        all_points = streamer.get_json(f"/rl/jobs/{job_id}/metrics", after_step=-1, limit=200)["points"]
        # The SDK drops step 0 (`int(step or -1)`): the step-0 evaluation reaches it as its event only.
        assert sorted(streamer.printed_metrics) == sorted((p["name"], p["step"]) for p in all_points if p["step"])
        assert all(step >= 1 for _, step in streamer.printed_metrics)
        assert any(p["step"] == 0 for p in all_points)
    # The replayed create (same Idempotency-Key, same body) is the same job.
    again = loopback_http.post(f"{base}/rl/jobs", headers={**post_headers, "Idempotency-Key": "sdk-shape-1"}, json=body)
    assert again.status_code == 200 and again.json()["job_id"] == job_id
