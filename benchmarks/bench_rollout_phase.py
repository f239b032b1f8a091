"""Issue 40's done-when measurement, run by `python -m benchmarks --only lm` (bench_lm.run).

One real `synth-tui backend --trainer lm` process and one `synth-tui taskapp --game press`
process on free loopback ports, started as bench_soak.Servers starts them. On that one backend,
the same seeded job twice: SmolLM2-135M-Instruct (LoRA, the tests' fixture folder:
tests/support/smollm2.py; `--quick`: the tiny random Qwen3) trained for 2 steps of 2 seeds x 4
episodes x 2 turns, first with `[rollout] max_concurrent_rollouts = 8`, then with 1 (8 first,
so its memory figure is not the leftover of the other job's heap; the second job gets the warm
file cache, so the ratio is if anything understated). Figures:

- the rollout phase of the warm step (`rollout_seconds` of step 2's `rl.train.step` event: step
  1 also pays for the grammar's compile and the first allocations) at 8 against 1; goal: 8 in
  flight at least 3x faster;
- the sampled tokens/s of that phase (`sampled_tokens / rollout_seconds`), at 8 and at 1;
- the backend's peak resident memory with all its descendants, sampled every 100 ms over each
  job (the sum of their VmRSS: pages a child shares with its parent count twice); goal <= 2,500 MB;
- the turns that waited past the task app's timeout: the job's rollout retries (the task app
  answers 502 when its chat call runs out of the rollout's time, and the backend retries) plus a
  rollout cut at `[rollout] timeout_s` (not retried: the job fails); goal 0. Beside it, the
  `rl.rollout.slow` events: rollouts still unanswered at half their time (not past it).

`phase_figures` turns a job's events into those numbers (tests/benchmarks/test_bench_rollout_phase.py).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from benchmarks.bench_soak import TERMINAL, Servers
from benchmarks.common import Figure, at_most, say

WARM_STEP = 2
STEPS = 2
SEEDS, EPISODES, TURNS = 2, 4, 2
IN_FLIGHT = (8, 1)  # the order the jobs run in (see the docstring)
RSS_EVERY_S = 0.1
RSS_GOAL_MB = 2500.0
SPEEDUP_GOAL = 3.0
JOB_TIMEOUT_S = 3600.0


# --------------------------------------------------------------------------- events -> figures


def phase_figures(events: Sequence[dict[str, Any]], warm_step: int = WARM_STEP) -> dict[str, Any]:
    """What one job's events (as GET /api/rl/jobs/{id}/events gives them) say of its warm step's
    rollout phase and of its turns past the task app's timeout. Raises ValueError when the job
    has no `rl.train.step` event for `warm_step` (it failed before, or ran fewer steps)."""
    step = next((e["data"] for e in events
                 if e.get("type") == "rl.train.step" and (e.get("data") or {}).get("step") == warm_step), None)
    if step is None:
        ended = next((e for e in reversed(events) if e.get("type") in ("rl.job.failed", "rl.job.cancelled")), None)
        why = f": {ended['type']}: {ended.get('message', '')}" if ended else ""
        raise ValueError(f"no rl.train.step event for step {warm_step}{why}")
    rollout_s = float(step["rollout_seconds"])
    sampled = float(step.get("sampled_tokens", 0.0))
    retry_events = [e for e in events if e.get("type") == "rl.rollout.retry"]
    # The counter is in every retry event and in the job's last event; only the first few
    # retries are events of their own (app/local/training/rollouts.py RETRY_EVENTS_SHOWN).
    counted = [int(e["data"]["retries"]) for e in events
               if isinstance((e.get("data") or {}).get("retries"), int)]
    retries = max([len(retry_events), *counted])
    slow = sum(e.get("type") == "rl.rollout.slow" for e in events)
    final = next((e for e in reversed(events) if e.get("type") in
                  ("rl.job.completed", "rl.job.failed", "rl.job.cancelled")), None)
    # A rollout cut at its deadline fails the job (app/local/training/rollouts.py _transport_failure).
    cut = int(final is not None and final["type"] == "rl.job.failed"
              and "answer within" in str(final.get("message", "")))
    return {
        "rollout_seconds": rollout_s,
        "sampled_tokens": sampled,
        "sampled_per_s": sampled / rollout_s if rollout_s > 0 else 0.0,
        "step_seconds": float(step.get("step_seconds", 0.0)),
        "turns": int(step.get("turns", 0)),
        "mean_score": float(step.get("mean_score", 0.0)),
        "retries": retries,
        "answers_502": sum("502" in str(e.get("message", "")) for e in retry_events),
        "cut": cut,
        "slow": slow,
        "past_timeout": retries + cut,
        "ended": None if final is None else final["type"],
    }


# --------------------------------------------------------------------------- memory of a process tree


def tree_rss_mb(root: int) -> float:
    """VmRSS of `root` and all its descendants now, summed, in MB (MiB); 0 when it is gone."""
    parents: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as stat:
                    parents[int(name)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent and pid not in tree]
        tree.update(children)
        frontier += children
    return sum(_vm_rss_kb(pid) for pid in tree) / 1024


def _vm_rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class RssSampler:
    """Samples a process tree's memory every RSS_EVERY_S in a thread; `peak(since, until)` is
    the highest sample in that window (time.monotonic())."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(RSS_EVERY_S):
            self.samples.append((time.monotonic(), tree_rss_mb(self.root)))

    def peak(self, since: float, until: float) -> float:
        return max((mb for at, mb in list(self.samples) if since <= at <= until), default=0.0)

    def first(self, since: float) -> float:
        """The first sample at or after `since`: what the tree held when a job started."""
        return next((mb for at, mb in list(self.samples) if at >= since), 0.0)


# --------------------------------------------------------------------------- the job


def job_config(model: str, in_flight: int, pretrained: bool) -> dict[str, Any]:
    """The press job of the done-when: [policy] so max_tokens can be set (a press call is about
    20 tokens; README: Train a language model), one eval instance at each end (the least a job has)."""
    return {
        "algorithm": {"type": "online", "method": "policy_gradient", "variety": "gspo"},
        # Recorded, not used, by the embedded backend (configs/rl/lm_press.toml).
        "compute": {"gpu_type": "H100", "gpu_count": 1},
        "topology": {"type": "single_node_split", "gpus_for_vllm": 1, "gpus_for_training": 1, "gpus_for_ref": 0,
                     "tensor_parallel": 1},
        "policy": {"model_name": model, "trainer_mode": "lora", "label": "bench-rollout-phase", "max_tokens": 48},
        "rollout": {"env_name": "press-button", "policy_name": "press-lm", "max_turns": TURNS,
                    "episodes_per_batch": SEEDS * EPISODES, "max_concurrent_rollouts": in_flight,
                    "batches_per_step": 1, "ops": ["agent", "env"]},
        "evaluation": {"instances": 1, "every_n_iters": 0, "seeds": [0]},
        "training": {"num_epochs": 1, "iterations_per_epoch": STEPS, "max_turns": TURNS, "batch_size": SEEDS,
                     "group_size": EPISODES, "learning_rate": 5e-5 if pretrained else 1e-2, "log_interval": 1,
                     "seed": 0},
    }


def all_events(client: httpx.Client, job_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    while True:
        page = client.get(f"/rl/jobs/{job_id}/events",
                          params={"since_seq": events[-1]["seq"] if events else 0, "limit": 1000})
        got = page.raise_for_status().json()["events"]
        if not got:
            return events
        events += got


def run_job(servers: Servers, client: httpx.Client, model: str, in_flight: int, pretrained: bool,
            sampler: RssSampler) -> dict[str, Any]:
    from app.commands.demo import demo_payload

    load = os.getloadavg()[0]
    payload = demo_payload(job_config(model, in_flight, pretrained), servers.taskapp_url)
    started = time.monotonic()
    job_id = client.post("/rl/jobs", json=payload).raise_for_status().json()["job_id"]
    while (status := client.get(f"/rl/jobs/{job_id}").raise_for_status().json()["status"]) not in TERMINAL:
        if time.monotonic() - started > JOB_TIMEOUT_S:
            raise TimeoutError(f"job {job_id} ({in_flight} in flight) still {status} after {JOB_TIMEOUT_S:.0f} s")
        time.sleep(0.5)
    ended = time.monotonic()
    figures = phase_figures(all_events(client, job_id))
    figures.update(status=status, wall_s=ended - started, peak_mb=sampler.peak(started, ended),
                   start_mb=sampler.first(started),
                   load_before=load, load_after=os.getloadavg()[0])
    say(f"rollout phase: {in_flight} in flight: {status} in {figures['wall_s']:.0f} s; step {WARM_STEP}'s rollouts "
        f"{figures['rollout_seconds']:.1f} s, {figures['sampled_per_s']:.2f} sampled tokens/s, peak "
        f"{figures['peak_mb']:.0f} MB (from {figures['start_mb']:.0f} MB at its start), {figures['retries']} retries, "
        f"{figures['slow']} slow; load {load:.1f} -> {figures['load_after']:.1f}")
    return figures


def measure(model: Path, pretrained: bool, folder: Path) -> dict[int, dict[str, Any]]:
    """Both jobs on one backend; per in-flight count, phase_figures plus the job's peak memory."""
    servers = Servers(folder, backend_args=("--trainer", "lm"), taskapp_args=("--game", "press"), up_within_s=120.0)
    try:
        backend_pid = servers.procs[1].pid
        with RssSampler(backend_pid) as sampler, servers.client() as client:
            results = {n: run_job(servers, client, str(model), n, pretrained, sampler) for n in IN_FLIGHT}
        hwm = _status_kb(backend_pid, "VmHWM") / 1024
        for result in results.values():
            result["backend_hwm_mb"] = hwm
        return results
    except Exception:
        say(servers.log_tail())
        raise
    finally:
        servers.stop()


def _status_kb(pid: int, key: str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
        return next((int(line.split()[1]) for line in status if line.startswith(key + ":")), 0)


def figures(label: str, results: dict[int, dict[str, Any]]) -> list[Figure]:
    many, one = results[IN_FLIGHT[0]], results[IN_FLIGHT[1]]
    speedup = one["rollout_seconds"] / many["rollout_seconds"] if many["rollout_seconds"] else 0.0
    cores = os.cpu_count()
    loads = (f"load average {one['load_before']:.1f}-{one['load_after']:.1f} (1 in flight), "
             f"{many['load_before']:.1f}-{many['load_after']:.1f} (8) on {cores} cores")
    job = (f"one `synth-tui backend --trainer lm`, press task app, {label} LoRA, {SEEDS} seeds x {EPISODES} episodes "
           f"x {TURNS} turns, {STEPS} steps, seed 0")
    return [
        Figure(f"lm rollout phase of a warm step (step {WARM_STEP}), {label}: 8 episodes in flight",
               many["rollout_seconds"], "s", baseline=one["rollout_seconds"], baseline_label="1 in flight",
               goal=f">= {SPEEDUP_GOAL:g}x faster (ratio <= {1 / SPEEDUP_GOAL:.2f})", met=speedup >= SPEEDUP_GOAL,
               note=f"{speedup:.2f}x faster; {job}; jobs {many['status']} in {many['wall_s']:.0f} s / "
                    f"{one['status']} in {one['wall_s']:.0f} s; step mean score {many['mean_score']:.2f} / "
                    f"{one['mean_score']:.2f}; {loads}"),
        Figure(f"  sampled tokens/s of that rollout phase, {label}: 8 in flight", many["sampled_per_s"], "tokens/s",
               baseline=one["sampled_per_s"], baseline_label="1 in flight", goal="higher is better",
               note=f"{many['sampled_tokens']:.0f} / {one['sampled_tokens']:.0f} tokens sampled in "
                    f"{many['turns']} / {one['turns']} turns (the rest forced by the grammar)"),
        Figure(f"  backend peak RSS with its children over the job, {label}: 8 in flight", many["peak_mb"], "MB",
               baseline=one["peak_mb"], baseline_label="the job with 1 in flight, after it",
               goal=f"<= {RSS_GOAL_MB:,.0f} MB", met=at_most(many["peak_mb"], RSS_GOAL_MB),
               note=f"VmRSS of the backend and its descendants summed, sampled every {RSS_EVERY_S * 1000:.0f} ms; "
                    f"{many['start_mb']:.0f} / {one['start_mb']:.0f} MB when each job started (the job with 1 in "
                    f"flight runs second, on what the first left); the backend process's own VmHWM over both jobs "
                    f"{many['backend_hwm_mb']:.0f} MB"),
        Figure(f"  turns past the task app's timeout, {label}: 8 in flight", many["past_timeout"], "",
               baseline=one["past_timeout"], baseline_label="1 in flight", goal="0",
               met=at_most(many["past_timeout"], 0) and at_most(one["past_timeout"], 0),
               note=f"retries {many['retries']} / {one['retries']} (of them answered 502: {many['answers_502']} / "
                    f"{one['answers_502']}), rollouts cut at the deadline {many['cut']} / {one['cut']}; rollouts "
                    f"unanswered at half their time (rl.rollout.slow, not past it) {many['slow']} / {one['slow']}"),
    ]


def run(label: str, model: Path, pretrained: bool, folder: Path) -> list[Figure]:
    say(f"{label}: the rollout phase with 8 and 1 episodes in flight, one `synth-tui backend --trainer lm`")
    folder = folder / "rollout-phase"
    folder.mkdir()
    return figures(label, measure(model, pretrained, folder))


def main_run(quick: bool) -> list[Figure]:
    """`python -m benchmarks.bench_rollout_phase [--quick]`: this part of bench_lm alone."""
    import tempfile

    from app.local.policies import trainer_extra_missing

    missing = trainer_extra_missing()
    if missing:
        return [Figure("lm rollout phase", None, note=missing)]
    with tempfile.TemporaryDirectory() as tmp:
        if quick:
            from app.local.policies.lm.tiny_model import build_tiny_qwen3

            return run("tiny Qwen3 (140k params)", build_tiny_qwen3(Path(tmp) / "tiny"), False, Path(tmp))
        from support.smollm2 import smollm2_folder

        return run("SmolLM2-135M", smollm2_folder(), True, Path(tmp))


if __name__ == "__main__":
    import sys

    from benchmarks.common import REPO, child_main

    sys.path[:0] = [str(REPO / "tests")]  # the SmolLM2 fixture (tests/support/smollm2.py)
    child_main("bench_rollout_phase", main_run)
