"""A synthetic backend for the CPU benchmark, run as its own process so its CPU is not counted.

Stdlib only (ThreadingHTTPServer, HTTP/1.1 keep-alive). It serves jobs whose events and metric
points appear over wall time at fixed rates, with the JSON shapes of docs/wire-contract.md#endpoints-and-auth:

    GET /api/{rl,learning}/jobs/{id}                      -> job status object
    GET /api/{rl,learning}/jobs/{id}/events?since_seq&limit -> {"events": [...]}
    GET /api/{rl,learning}/jobs/{id}/metrics?after_step&limit -> {"job_id", "points": [...]}

Bearer auth. It offers no server-sent events: a request with ``Accept: text/event-stream``
gets the JSON page (what docs/wire-contract.md#sse asks of a stand-in), so a client falls back to polling.

A job's clock starts at its first request, so a scenario started later sees the same stream.

    python -m benchmarks.synthetic_backend --api-key KEY --job job_idle,0,0,200,100 \\
        --job job_stream,20,2,200,100
    (name, events/s, metric points/s, events already there, points already there)

It prints ``READY <url>`` on stdout when it listens.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

CREATED = datetime.now(UTC) - timedelta(hours=1)


@dataclass
class Job:
    job_id: str
    events_per_s: float
    points_per_s: float
    preload_events: int
    preload_points: int
    started: float | None = None  # monotonic time of the first request
    started_utc: datetime | None = None

    def touch(self) -> None:
        if self.started is None:
            self.started = time.monotonic()
            self.started_utc = datetime.now(UTC)

    def _elapsed(self) -> float:
        return time.monotonic() - (self.started or time.monotonic())

    def event_count(self) -> int:
        return self.preload_events + math.floor(self._elapsed() * self.events_per_s)

    def point_count(self) -> int:
        return self.preload_points + math.floor(self._elapsed() * self.points_per_s)

    def event(self, seq: int) -> dict:
        live = seq - self.preload_events
        if live > 0 and self.started_utc is not None:
            created = self.started_utc + timedelta(seconds=live / self.events_per_s)
        else:
            created = CREATED + timedelta(seconds=seq)
        if seq % 20 == 0:
            kind, level, message = "hatchet.worker.heartbeat", "debug", "worker alive"
        elif seq % 10 == 0:
            kind, level = "rl.eval.summary", "info"
            message = f"Eval after step {seq}: mean score 0.612 over 32 episodes"
        else:
            kind, level, message = "rl.train.step", "info", f"Step {seq}: mean score 0.57, loss -0.14, entropy 0.53"
        return {"job_id": self.job_id, "seq": seq, "type": kind, "level": level, "message": message,
                "data": {"step": seq}, "created_at": created.isoformat()}

    def point(self, step: int) -> dict:
        value = 0.2 + 0.6 * (1 - math.exp(-step / 200)) + 0.05 * math.sin(step * 1.7)
        return {"job_id": self.job_id, "name": "train.mean_score", "value": value, "step": step, "epoch": 0,
                "phase": "train", "data": {"n": 32}, "created_at": CREATED.isoformat()}

    def status(self) -> dict:
        # updated_at never changes: "no new data" also means no status change.
        return {"job_id": self.job_id, "status": "running", "training_type": "rl", "model": "Qwen/Qwen3-0.6B",
                "created_at": CREATED.isoformat(), "updated_at": CREATED.isoformat(), "metadata": {}}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the real backend
    disable_nagle_algorithm = True
    jobs: dict[str, Job] = {}
    api_key = ""
    lock = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: object) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.headers.get("Authorization") != f"Bearer {self.api_key}":
            self._send(401, {"detail": "Missing or invalid API key"})
            return
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        segments = [s for s in parts.path.split("/") if s]
        if len(segments) < 4 or segments[0] != "api" or segments[1] not in ("rl", "learning") \
                or segments[2] != "jobs":
            self._send(404, {"detail": "Not Found"})
            return
        job = self.jobs.get(segments[3])
        if job is None:
            self._send(404, {"detail": f"job {segments[3]} not found"})
            return
        with self.lock:
            job.touch()
        rest = segments[4:]
        limit = max(1, min(1000, int(query.get("limit", 200))))
        if not rest:
            self._send(200, job.status())
        elif rest == ["events"]:
            since = int(query.get("since_seq", 0))
            last = min(job.event_count(), since + limit)
            self._send(200, {"events": [job.event(seq) for seq in range(max(since, 0) + 1, last + 1)]})
        elif rest == ["metrics"]:
            after = int(query.get("after_step", -1))
            last = min(job.point_count(), after + 1 + limit)
            self._send(200, {"job_id": job.job_id, "points": [job.point(s) for s in range(after + 1, last)]})
        else:
            self._send(404, {"detail": "Not Found"})


def parse_job(text: str) -> Job:
    name, events, points, pre_events, pre_points = text.split(",")
    return Job(name, float(events), float(points), int(pre_events), int(pre_points))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--job", action="append", type=parse_job, required=True)
    args = parser.parse_args(argv)
    Handler.jobs = {job.job_id: job for job in args.job}
    Handler.api_key = args.api_key
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"READY http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        sys.stdout.flush()


if __name__ == "__main__":
    main()
