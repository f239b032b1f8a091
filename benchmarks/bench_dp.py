"""Benchmark of the `lm` trainer data-parallel (docs/scaling.md): one GRPO step's time with 1
and 2 processes on this machine, the one-process backend being the baseline measured in the
same run.

For each layout, a real job on the embedded backend (`start_backend(policy_kind="lm",
parallel=Parallel(N))`) trains the tiny Qwen3-architecture test model (built here) on the press
task app, seeded, full fine-tune, 2 groups x 8 episodes a step. From the job's own step events:
`step_seconds` (the GRPO step as the backend sees it), the whole step (rollouts + step: the
time between two step events) and, with 2 processes, `allreduce_s`; medians of steps 2 and on
(the first carries the warm-up). Also the train score, first 3 steps to last 3, and the wall
time to the first step (the ranks' start). On 2 cores no speed-up is expected: the figure is
for correctness and overhead.

    .venv/bin/python -m benchmarks.bench_dp [--quick]   (python -m benchmarks --only dp)

Needs the trainer extra and 2 cores; without them the figures say so and are empty.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, Figure, child_main, say

# One copy of the tests' press job payload (tests/support/lm_fixtures.py).
sys.path[:0] = [str(REPO / "tests")]

API_KEY, ENV_KEY = "sk_bench_dp_0123456789", "e" * 32


def _stamp(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["created_at"]).replace("Z", "+00:00")).timestamp()


def one_layout(model: Path, task_url: str, processes: int, steps: int) -> dict[str, float]:
    """Run one job with `processes` ranks; its step figures (seconds) and scores."""
    import httpx

    from app.local.policies.base import Parallel
    from app.local.servers import start_backend
    from support.lm_fixtures import press_payload

    with tempfile.TemporaryDirectory() as tmp, \
            start_backend(api_key=API_KEY, db_path=Path(tmp) / "s.sqlite3", env_api_keys=[ENV_KEY], policy_kind="lm",
                          parallel=Parallel(processes)) as backend, \
            httpx.Client(base_url=backend.url + "/api", headers={"Authorization": f"Bearer {API_KEY}"},
                         timeout=30.0) as api:
        started = time.monotonic()
        created = api.post("/rl/jobs", json=press_payload(task_url, model, "full", steps=steps, lr=1e-2))
        job_id = created.raise_for_status().json()["job_id"]
        deadline = started + 1800
        while (status := api.get(f"/rl/jobs/{job_id}").json()["status"]) not in ("succeeded", "failed", "cancelled"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {status} after 30 min")
            time.sleep(0.5)
        events = api.get(f"/rl/jobs/{job_id}/events", params={"limit": 1000}).json()["events"]
        if status != "succeeded":
            raise RuntimeError(f"job {job_id} {status}: {[e['message'] for e in events][-3:]}")
    step_events = [e for e in events if e["type"] == "rl.train.step"]
    stamps = [_stamp(e) for e in step_events]
    data = [e["data"] for e in step_events]
    later = data[1:] or data
    scores = [float(d.get("mean_score", d.get("train_mean_score", 0.0))) for d in data]
    first_event = _stamp(events[0])
    return {
        "step_s": statistics.median(float(d["step_seconds"]) for d in later),
        "whole_step_s": statistics.median(b - a for a, b in zip(stamps, stamps[1:], strict=False)) if len(stamps) > 1
        else float("nan"),
        "allreduce_s": statistics.median(float(d.get("allreduce_s", 0.0)) for d in later),
        "to_first_step_s": stamps[0] - first_event if stamps else float("nan"),
        "score_first": statistics.fmean(scores[:3]) if scores else float("nan"),
        "score_last": statistics.fmean(scores[-3:]) if scores else float("nan"),
    }


def run(quick: bool) -> list[Figure]:
    from app.local.parallel.launch import cores
    from app.local.policies import trainer_extra_missing

    missing = trainer_extra_missing()
    if missing or cores() < 2:
        return [Figure("lm data-parallel", None, note=missing or "needs 2 cores")]
    from app.local.policies.lm.tiny_model import build_tiny_qwen3
    from app.local.servers import ServerHandle, _bind
    from app.local.taskapps.press import create_press_taskapp

    steps = 4 if quick else 8
    app = create_press_taskapp(env_api_keys=[ENV_KEY], asks=("A",))
    with tempfile.TemporaryDirectory() as tmp, ServerHandle("task app", app, _bind("127.0.0.1", 0)).start("/") as press:
        model = build_tiny_qwen3(Path(tmp) / "tiny")
        results = {}
        for processes in (1, 2):
            say(f"{processes} process(es): a {steps}-step job on the tiny model")
            results[processes] = one_layout(model, press.url, processes, steps)
            say(f"  {results[processes]}")
    one, two = results[1], results[2]
    note = (f"median of steps 2-{steps}; train score {two['score_first']:.2f} -> {two['score_last']:.2f} with 2 "
            f"processes, {one['score_first']:.2f} -> {one['score_last']:.2f} with 1")
    return [
        Figure("lm GRPO step (step_seconds), tiny model, 2 processes (gloo)", two["step_s"] * 1000, "ms",
               baseline=one["step_s"] * 1000, baseline_label="1 process, same job", goal="correct; no speed-up "
               "expected on 2 cores", note=note),
        Figure("  whole step (rollouts + GRPO step), 2 processes", two["whole_step_s"] * 1000, "ms",
               baseline=one["whole_step_s"] * 1000, baseline_label="1 process"),
        Figure("  all-reduce per step (DDP hook), 2 processes", two["allreduce_s"] * 1000, "ms"),
        Figure("  job start to its first step, 2 processes (the ranks' start)", two["to_first_step_s"], "s",
               baseline=one["to_first_step_s"], baseline_label="1 process"),
    ]


if __name__ == "__main__":
    child_main("bench_dp", run)
