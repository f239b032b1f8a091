"""Small real HTTP servers on loopback for the client, poller and headless tests.

``FaultyBackend`` speaks the backend contract for scripted jobs and can be told to answer the
next requests of a route with a fault: a 500, an HTML page, a dropped connection, a slow
answer, duplicated or shuffled events. ``TinyTaskApp`` answers ``/health`` and ``/task_info``
with the SDK's auth rules. Both are stdlib ``ThreadingHTTPServer``s: real sockets, real HTTP.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class ScriptedJob:
    """A job whose state advances one timeline entry per status request.

    ``timeline`` entries are (status, events, metrics); what is visible is the union of the
    entries up to the current tick, so events appear over time as they would on a real job.
    """

    job_id: str
    timeline: list[tuple[str, list[dict], list[dict]]]
    tick: int = 0
    updated_at: str | None = "2026-01-01T00:00:00Z"
    stamp_updates: bool = True
    # Listed by GET /api/rl/jobs when set (the jobs view's columns).
    created_at: str | None = None
    model: str | None = None
    # The embedded backend's queue_position, one per timeline entry (None: not sent).
    queue_positions: list[int | None] | None = None
    # The job's artifacts ({"model_path": ...}), in its JSON once it has succeeded.
    artifacts: dict[str, Any] | None = None

    def advance(self) -> None:
        self.tick = min(self.tick + 1, len(self.timeline))

    @property
    def status(self) -> str:
        return self.timeline[max(self.tick - 1, 0)][0]

    def with_position(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The job's view as the embedded backend gives it: with queue_position while it has one."""
        position = self.queue_positions[max(self.tick - 1, 0)] if self.queue_positions else None
        return {**payload, "queue_position": position} if position is not None else payload

    def visible_events(self) -> list[dict]:
        return [e for entry in self.timeline[: max(self.tick, 1)] for e in entry[1]]

    def visible_metrics(self) -> list[dict]:
        return [m for entry in self.timeline[: max(self.tick, 1)] for m in entry[2]]


def event(seq: int, type_: str = "rl.train.step", level: str = "info", message: str = "", **data: Any) -> dict:
    return {"seq": seq, "type": type_, "level": level, "message": message or f"event {seq}", "data": data,
            "created_at": "2026-01-01T00:00:00Z"}


def metric(name: str, step: int, value: float) -> dict:
    return {"name": name, "step": step, "value": value, "data": {"n": 4}}


# How often serve_forever looks for a stop: each fixture's teardown waits for its next look (half
# of it on average: at 0.05 s, some 10 test-seconds of the quick loop, docs/testing.md).
POLL_S = 0.005


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients that time out or hang up on purpose are expected here


class FaultyBackend:
    def __init__(self, api_key: str = "sk_test_backend_key_0123456789") -> None:
        self.api_key = api_key
        self.jobs: dict[str, ScriptedJob] = {}
        self.faults: dict[str, list[str]] = defaultdict(list)
        self.release = threading.Event()  # lets a "hold" fault answer
        self.requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.verify_answer: tuple[int, Any] = (200, {"any_ok": True, "candidates_first15": ["env_key_prefix"],
                                                     "attempts": [{"status": 200}, {"status": 200}]})
        self.create_answer: tuple[int, Any] | None = None
        # POST /api/rl/verify_model: None answers 404, as the hosted service (no model check) does.
        self.model_answer: tuple[int, Any] | None = None
        self.create_job_template: list[tuple[str, list[dict], list[dict]]] = [("queued", [], [])]
        self.create_job_artifacts: dict[str, Any] | None = None  # a created job's artifacts once it succeeds
        self.rl_paths_missing = False  # serve jobs only under /learning (the /rl paths answer 404)
        self.sse_enabled = False
        self.rl_offered = True  # False: every /api/rl/... answers 404, as a backend without RL jobs
        self.contract_header: str | None = None  # X-Synth-RL-Contract on GET /api/rl/jobs
        self.events_stream = False  # also serve SSE at /events/stream, as SDK 0.4+ backends do
        # GET /api/rl/jobs pages as docs/wire-contract.md#job-list says (limit, after = the last
        # job id of the page before), in the order the jobs were added; "ignore-after": always the
        # first page; "next-cursor" / "has-more": the page also says whether more follow.
        self.list_paging: str | None = None
        self.cancel_status = "cancelled"  # the status a cancelled job moves to (list_paging)
        self.idempotency: dict[str, tuple[str, str]] = {}
        self.connections: set[socket.socket] = set()
        self.port = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------

    @property
    def url(self) -> str:
        assert self.port, "start the server first"
        return f"http://127.0.0.1:{self.port}"

    def start(self, port: int = 0) -> FaultyBackend:
        backend = self

        class Handler(_Handler):
            owner = backend

        self._server = _QuietServer(("127.0.0.1", port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": POLL_S},
                                        daemon=True)
        self._thread.start()
        return self

    def start_on(self, port: int) -> FaultyBackend:
        """Listen again on a port used before: a backend restart that keeps its state."""
        return self.start(port)

    def stop(self) -> None:
        """Stop listening and cut open keep-alive connections, as a dying process would."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        for connection in list(self.connections):
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> FaultyBackend:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- scripting -------------------------------------------------------------------

    def add_job(self, job: ScriptedJob) -> ScriptedJob:
        self.jobs[job.job_id] = job
        return job

    def inject(self, route: str, *faults: str) -> None:
        """Answer the next requests of ``route`` (status, events, metrics, verify, create,
        cancel, list, stream) with these faults, in order: "500", "502", "html", "empty",
        "drop", "slow", "hold" (until ``release`` is set), "dup", "shuffle", "401", "404"."""
        with self._lock:
            self.faults[route].extend(faults)

    def next_fault(self, route: str) -> str | None:
        with self._lock:
            return self.faults[route].pop(0) if self.faults[route] else None

    def count(self, route_part: str, method: str | None = None) -> int:
        return sum(1 for verb, path, _, _ in self.requests
                   if route_part in path and (method is None or verb == method))


class _Handler(BaseHTTPRequestHandler):
    owner: FaultyBackend
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes

    def setup(self) -> None:
        super().setup()
        self.owner.connections.add(self.connection)

    def finish(self) -> None:
        self.owner.connections.discard(self.connection)
        super().finish()

    def log_message(self, *args: object) -> None:  # keep test output clean
        pass

    # -- plumbing ----------------------------------------------------------------------

    def _send(self, status: int, body: Any, content_type: str = "application/json",
              headers: dict[str, str] | None = None) -> None:
        raw = body if isinstance(body, bytes) else (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw) if raw else None
        except ValueError:
            return raw.decode(errors="replace")

    def _fault(self, route: str) -> str | None:
        """Apply a transport-level fault; return data-level faults (dup/shuffle) to the caller."""
        fault = self.owner.next_fault(route)
        if fault is None:
            return None
        if fault == "drop":
            self.close_connection = True
            self.connection.close()
            return "handled"
        if fault == "slow":
            time.sleep(1.5)
            return None
        if fault == "hold":  # until the test lets it go (FaultyBackend.release)
            self.owner.release.wait(10)
            return None
        if fault == "html":
            self._send(200, "<!doctype html><html><body>Bad gateway page</body></html>", "text/html")
            return "handled"
        if fault == "empty":
            self._send(200, b"", "application/json")
            return "handled"
        if fault.isdigit():
            self._send(int(fault), {"detail": f"injected {fault}"})
            return "handled"
        return fault

    def _authorised(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {self.owner.api_key}":
            return True
        self._send(401, {"detail": "Invalid API key"})
        return False

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    # -- routes ------------------------------------------------------------------------

    def _route(self, method: str) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        body = self._body() if method == "POST" else None
        self.owner.requests.append((method, parts.path, dict(self.headers), body))
        if not self._authorised():
            return
        segments = [s for s in parts.path.split("/") if s]
        if segments[:1] != ["api"] or (segments[1:2] == ["rl"] and not self.owner.rl_offered):
            self._send(404, {"detail": "Not Found"})
            return
        segments = segments[1:]
        if method == "POST" and segments == ["rl", "verify_task_app"]:
            if self._fault("verify") != "handled":
                self._send(*self.owner.verify_answer)
        elif method == "POST" and segments == ["rl", "verify_model"] and self.owner.model_answer is not None:
            if self._fault("verify_model") != "handled":
                self._send(*self.owner.model_answer)
        elif method == "POST" and segments == ["rl", "jobs"]:
            self._create(body)
        elif method == "GET" and segments == ["rl", "jobs"]:
            self._list_jobs(query)
        elif len(segments) >= 3 and segments[1] == "jobs" and segments[0] in ("rl", "learning"):
            self._one_job(method, segments, query)
        else:
            self._send(404, {"detail": "Not Found"})

    def _list_jobs(self, query: dict[str, list[str]]) -> None:
        if self._fault("list") == "handled":
            return
        said = {"X-Synth-RL-Contract": self.owner.contract_header} if self.owner.contract_header else {}
        if self.owner.list_paging:
            self._send(*self._job_page(query), headers=said)
            return
        self._send(200, {"jobs": [{"job_id": j.job_id, "status": j.status} for j in self.owner.jobs.values()]},
                   headers=said)

    def _one_job(self, method: str, segments: list[str], query: dict[str, list[str]]) -> None:
        if segments[0] == "rl" and self.owner.rl_paths_missing:
            self._send(404, {"detail": "Not Found"})
            return
        job = self.owner.jobs.get(segments[2])
        if job is None:
            self._send(404, {"detail": f"job {segments[2]} not found"})
            return
        self._job_route(method, job, segments[3:], query)

    def _job_page(self, query: dict[str, list[str]]) -> tuple[int, dict]:
        jobs = list(self.owner.jobs.values())
        if "status" in query:
            jobs = [j for j in jobs if j.status == query["status"][0]]
        limit = int(query.get("limit", ["50"])[0])
        after = query.get("after", [None])[0]
        start = 0
        if after and self.owner.list_paging != "ignore-after":
            ids = [j.job_id for j in jobs]
            if after not in ids:
                return 400, {"detail": f"unknown cursor {after}"}
            start = ids.index(after) + 1
        page = jobs[start:start + limit]
        listed = []
        for job in page:
            item = job.with_position({"job_id": job.job_id, "status": job.status})
            if job.created_at:
                item["created_at"] = job.created_at
            if job.model:
                item["model"] = job.model
            listed.append(item)
        body: dict[str, Any] = {"jobs": listed}
        more = start + limit < len(jobs)
        if self.owner.list_paging == "next-cursor":
            body["next_cursor"] = page[-1].job_id if more and page else None
        elif self.owner.list_paging == "has-more":
            body["has_more"] = more
        return 200, body

    def _create(self, body: Any) -> None:
        if self._fault("create") == "handled":
            return
        if self.owner.create_answer is not None:
            self._send(*self.owner.create_answer)
            return
        key = self.headers.get("Idempotency-Key")
        canonical = json.dumps(body, sort_keys=True)
        if key and key in self.owner.idempotency:
            job_id, previous = self.owner.idempotency[key]
            if previous != canonical:
                self._send(409, {"detail": "Idempotency-Key reused with a different body"})
            else:
                self._send(200, {"job_id": job_id, "status": self.owner.jobs[job_id].status})
            return
        job_id = f"job_{len(self.owner.jobs) + 1:04d}"
        self.owner.add_job(ScriptedJob(job_id, list(self.owner.create_job_template),
                                       artifacts=self.owner.create_job_artifacts))
        if key:
            self.owner.idempotency[key] = (job_id, canonical)
        self._send(201, {"job_id": job_id, "status": "queued", "created_at": "2026-01-01T00:00:00Z",
                         "updated_at": "2026-01-01T00:00:00Z"})

    def _job_route(self, method: str, job: ScriptedJob, rest: list[str], query: dict[str, list[str]]) -> None:
        since = int(query.get("since_seq", ["0"])[0])
        if method == "GET" and not rest:
            self._job_status(job)
        elif method == "GET" and rest == ["events"] and "text/event-stream" in (self.headers.get("Accept") or ""):
            self._sse(job, since)
        elif method == "GET" and rest == ["events"]:
            self._job_events(job, since, int(query.get("limit", ["200"])[0]))
        elif method == "GET" and rest == ["events", "stream"] and self.owner.events_stream:
            self._sse(job, since)
        elif method == "GET" and rest == ["metrics"]:
            self._job_metrics(job, int(query.get("after_step", ["-1"])[0]), int(query.get("limit", ["200"])[0]))
        elif method == "POST" and rest == ["cancel"]:
            self._job_cancel(job)
        else:
            self._send(404, {"detail": "Not Found"})

    def _job_status(self, job: ScriptedJob) -> None:
        if self._fault("status") == "handled":
            return
        job.advance()
        payload = {"job_id": job.job_id, "status": job.status, "created_at": "2026-01-01T00:00:00Z"}
        if job.stamp_updates:
            payload["updated_at"] = f"2026-01-01T00:00:{job.tick:02d}Z"
        if job.artifacts is not None and job.status == "succeeded":
            payload["artifacts"] = job.artifacts
        self._send(200, job.with_position(payload))

    def _job_events(self, job: ScriptedJob, since: int, limit: int) -> None:
        fault = self._fault("events")
        if fault == "handled":
            return
        events = [e for e in job.visible_events() if int(e["seq"]) > since][:limit]
        if fault == "dup":
            events = events + events
        elif fault == "shuffle":
            events = list(reversed(events))
        elif fault == "stale":
            events = job.visible_events()[:limit]  # ignores since_seq: everything again
        self._send(200, {"events": events})

    def _job_metrics(self, job: ScriptedJob, after: int, limit: int) -> None:
        fault = self._fault("metrics")
        if fault == "handled":
            return
        points = [m for m in job.visible_metrics() if m["step"] > after][:limit]
        if fault == "dup":
            points = points + points
        self._send(200, {"job_id": job.job_id, "points": points})

    def _job_cancel(self, job: ScriptedJob) -> None:
        if self._fault("cancel") == "handled":
            return
        if self.owner.list_paging:  # the job's status moves, as the jobs view would see
            job.timeline = [*job.timeline[:job.tick], (self.owner.cancel_status, [], [])]
            job.tick = len(job.timeline)
        self._send(200, {"job_id": job.job_id, "status": "cancelled", "message": "cancel requested"})

    def _sse(self, job: ScriptedJob, since: int) -> None:
        if not self.owner.sse_enabled:
            self._send(200, {"events": [e for e in job.visible_events() if e["seq"] > since]})
            return
        fault = self._fault("stream")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        sent = 0
        for item in job.visible_events():
            if item["seq"] <= since:
                continue
            self.wfile.write(f"id: {item['seq']}\nevent: {item['type']}\ndata: {json.dumps(item)}\n\n".encode())
            self.wfile.flush()
            sent += 1
            if fault == "drop" and sent == 2:
                self.connection.close()
                return


class TinyTaskApp:
    """``/health`` and ``/task_info`` with the SDK's task-app auth (docs/wire-contract.md#task-app-auth)."""

    def __init__(self, keys: list[str] | None = None, *, health_status: int | None = None) -> None:
        self.keys = keys if keys is not None else ["env_key_0123456789abcdef0123456789abcdef"]
        self.health_status = health_status
        self.taskset: dict[str, Any] = {"name": "tiny"}  # what /task_info answers (names no environment)
        self.seen_headers: list[dict[str, str]] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> TinyTaskApp:
        app = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                app.seen_headers.append(dict(self.headers))
                path = urlsplit(self.path).path
                if path == "/":
                    return self._send(200, {"status": "ok", "service": "tiny"})
                if not app.keys:
                    return self._send(503, {"detail": {"error": {"code": "missing_environment_api_key",
                                                                 "message": "no key configured"}}})
                got = [self.headers.get("X-API-Key") or ""]
                got += (self.headers.get("X-API-Keys") or "").split(",")
                auth = self.headers.get("Authorization") or ""
                if auth.startswith("Bearer "):
                    got.append(auth[7:])
                got = [g for g in got if g]
                if not any(g in app.keys for g in got):
                    return self._send(400, {"detail": {"error": {
                        "code": "unauthorised", "message": "API key missing or invalid",
                        "allowed_first15": [k[:15] for k in app.keys], "allowed_count": len(app.keys),
                        "got_first15": [g[:15] for g in got], "got_lens": [len(g) for g in got]}}})
                if path == "/health":
                    return self._send(app.health_status or 200, {"healthy": True})
                if path == "/task_info":
                    return self._send(200, {"taskset": app.taskset})
                return self._send(404, {"detail": "Not Found"})

            def _send(self, status: int, body: Any) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

        self._server = _QuietServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": POLL_S}, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()


def training_timeline(steps: int = 4, *, noise: bool = True) -> list[tuple[str, list[dict], list[dict]]]:
    """A plausible RL job: created, started, steps with metrics (from step 0), completed."""
    seq = 0

    def next_event(type_: str, level: str = "info", message: str = "", **data: Any) -> dict:
        nonlocal seq
        seq += 1
        return event(seq, type_, level, message, **data)

    timeline = [("queued", [next_event("rl.job.created", message="job created")], [])]
    started = [next_event("rl.train.started", message="training started")]
    if noise:
        started.append(next_event("hatchet.submission.attempt", message="submitting"))
    timeline.append(("running", started, []))
    for step in range(steps):
        score = round(0.2 + 0.7 * step / max(steps - 1, 1), 4)
        timeline.append(("running", [next_event("rl.train.step", message=f"step {step}", step=step)],
                         [metric("train.mean_score", step, score), metric("train.loss", step, 1.0 - score)]))
    timeline.append(("succeeded", [next_event("rl.job.completed", message="done")], []))
    return timeline


def shuffled(items: list, seed: int = 0) -> list:
    copy = list(items)
    random.Random(seed).shuffle(copy)
    return copy


def finished_job(job_id: str, steps: int, offset: float) -> ScriptedJob:
    """A job that ended before anyone looked: mean score and loss for every step, all visible."""
    timeline = [("running", [event(step + 1)], [metric("train.mean_score", step, round(0.1 * step + offset, 4)),
                                                 metric("train.loss", step, round(1 - 0.1 * step, 4))])
                for step in range(steps)]
    timeline.append(("succeeded", [event(steps + 1, "rl.job.completed")], []))
    job = ScriptedJob(job_id, timeline)
    job.tick = len(timeline)
    return job
