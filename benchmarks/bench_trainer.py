"""Benchmark of the embedded backend's RL loop on the demo config.

Starts the backend and the gridworld task app in this process (as `synth-tui demo` does),
runs the demo config several times, and reports medians of: the first train step's mean
score, the final eval mean score, the job's wall time, rollouts/s and chat completions/s
(the backend counts both and reports them in the job's `rl.job.completed` event data).

    .venv/bin/python -m benchmarks.bench_trainer [--runs 3] [--iterations N]

``python -m benchmarks`` folds it in through ``bench_demo`` (``main`` returns the medians).
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from app.commands.demo import demo_payload as job_payload
from app.commands.demo import load_demo_config
from app.local.servers import start_backend, start_taskapp

TERMINAL = {"succeeded", "failed", "cancelled"}


def run_job(client: httpx.Client, payload: dict, timeout_s: float = 300.0) -> dict:
    started = time.monotonic()
    job_id = client.post("/rl/jobs", json=payload).raise_for_status().json()["job_id"]
    deadline = started + timeout_s
    while (status := client.get(f"/rl/jobs/{job_id}").json()["status"]) not in TERMINAL:
        if time.monotonic() > deadline:
            raise TimeoutError(f"job {job_id} still {status} after {timeout_s:.0f}s")
        time.sleep(0.05)
    wall = time.monotonic() - started
    if status != "succeeded":
        raise RuntimeError(f"job {job_id} ended {status}")
    points = client.get(f"/rl/jobs/{job_id}/metrics", params={"limit": 1000}).json()["points"]
    events = client.get(f"/rl/jobs/{job_id}/events", params={"limit": 1000}).json()["events"]
    counters = next(e["data"] for e in events if e["type"] == "rl.job.completed")
    return {
        "first_step_mean_score": next(p["value"] for p in points if p["name"] == "train.mean_score"),
        "final_eval_mean_score": [p["value"] for p in points if p["name"] == "eval.mean_score"][-1],
        "wall_s": wall,
        "rollouts_per_s": counters["rollouts_per_s"],
        "chat_completions_per_s": counters["chat_completions_per_s"],
    }


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=None,
                        help="policy updates per run (default: the demo config's; smaller for a smoke run)")
    args = parser.parse_args(argv)
    api_key, env_key = f"sk_bench_{secrets.token_hex(8)}", secrets.token_hex(32)
    runs = []
    with tempfile.TemporaryDirectory() as tmp, \
            start_taskapp(env_api_keys=[env_key]) as taskapp, \
            start_backend(api_key=api_key, db_path=Path(tmp) / "bench.sqlite3", env_api_keys=[env_key]) as backend, \
            httpx.Client(base_url=backend.url + "/api", headers={"Authorization": f"Bearer {api_key}"},
                         timeout=30.0) as client:
        config = load_demo_config()
        if args.iterations:
            config["training"].update(num_epochs=1, iterations_per_epoch=args.iterations)
        payload = job_payload(config, taskapp.url, backend.url + "/api")
        for i in range(args.runs):
            result = run_job(client, payload)
            runs.append(result)
            print(f"run {i + 1}: " + ", ".join(f"{k}={v:.3f}" for k, v in result.items()), flush=True)
    medians = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    print(f"median of {len(runs)}: " + ", ".join(f"{k}={v:.3f}" for k, v in medians.items()))
    return medians


if __name__ == "__main__":
    main()
