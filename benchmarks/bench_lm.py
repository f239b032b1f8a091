"""Benchmark of the `lm` policy on this machine's CPU (docs/embedded-policy.md).

For the tiny Qwen3-architecture test model (built here, random weights) and SmolLM2-135M-Instruct
(tests/support/smollm2.py: the registry's GGUF, converted once), each against a baseline measured in the
same run:

- generation: a turn's time in the policy's `act` (a tool call constrained by xgrammar, sampled
  with its own KV-cache loop, the scaffold the grammar forces fed in one forward pass) against
  transformers' `generate` sampling the same number of new tokens from the same prompt,
  unconstrained; and `act`'s sampled tokens/s, over the tokens the model chose only (most of a
  constrained call is forced: docs/embedded-policy.md#metrics), with the machine's load average;
- one GRPO step: `update` on 2 groups of 4 episodes through TRL's GRPOTrainer, against one plain
  forward and backward pass of the same sequences (the compute any trainer must do);
- the chat endpoint's overhead per turn (tiny model only: it is the worst case, the model's
  work being smallest): a real job on the embedded backend with a real task app; each chat
  call's wall time as the task app sees it, minus the model's own time in it (the policy's
  generation loop), as a ratio of the latter. Goal: under 10 %;
- issue 40's done-when (benchmarks/bench_rollout_phase.py): the rollout phase of a warm step with
  8 episodes in flight against 1, its sampled tokens/s, the backend's peak memory over the job
  and the turns past the task app's timeout, on one `synth-tui backend --trainer lm`.

    .venv/bin/python -m benchmarks.bench_lm [--quick]   (python -m benchmarks --only lm)

Needs the trainer extra; without it the figures say so and are empty.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import bench_rollout_phase as rollout_phase
from benchmarks.common import REPO, Figure, child_main, say

# The tests' SmolLM2 fixture (tests/support/smollm2.py) converts the pretrained model (one copy).
sys.path[:0] = [str(REPO / "tests")]

from app.local.taskapps import press as press_taskapp  # noqa: E402
from app.local.taskapps.press import PRESS_TOOL as TOOL  # noqa: E402
from app.local.taskapps.press import SYSTEM_PROMPT  # noqa: E402
from app.local.taskapps.press import TOOL_CHOICE as CHOICE  # noqa: E402

MESSAGES = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "Press C."}]


def _policy(folder: Path, mode: str = "lora") -> Any:
    from app.local.policies.base import PolicySettings
    from app.local.policies.lm.policy import LmPolicy

    return LmPolicy(PolicySettings(model=str(folder), learning_rate=1e-4, seed=0, total_steps=100, batch_size=2,
                                   group_size=4, options={"trainer_mode": mode}))


def generation(policy: Any, turns: int) -> dict[str, float]:
    """A turn of act against transformers' generate of the same token count, measured in one
    run: act's and generate's seconds a turn, act's tokens and sampled tokens a turn, act's
    sampled tokens/s."""
    import torch

    rng = random.Random(0)
    policy.act(MESSAGES, [TOOL], CHOICE, "warm", rng)  # the grammar's compile, once per tool set
    tokens, sampled, seconds = 0, 0, 0.0
    for i in range(turns):
        act = policy.act(MESSAGES, [TOOL], CHOICE, f"gen{i}", rng)
        tokens += act.memo.tokens
        sampled += act.memo.sampled
        seconds += act.memo.seconds
    per_turn = max(1, round(tokens / turns))
    ids = torch.tensor([policy.tokenizer.apply_chat_template(MESSAGES, tools=[TOOL], add_generation_prompt=True,
                                                             tokenize=True)["input_ids"]])
    model = policy.model
    model.eval()
    with torch.no_grad():
        model.generate(ids, do_sample=True, max_new_tokens=per_turn, min_new_tokens=per_turn)  # warm
        started = time.perf_counter()
        for _ in range(turns):
            model.generate(ids, do_sample=True, max_new_tokens=per_turn, min_new_tokens=per_turn,
                           pad_token_id=policy.tokenizer.pad_token_id)
        baseline = time.perf_counter() - started
    return {"act_s": seconds / turns, "generate_s": baseline / turns, "tokens": tokens / turns,
            "sampled": sampled / turns, "sampled_per_s": sampled / seconds}


def grpo_step(policy: Any, rounds: int) -> tuple[float, float]:
    """(median seconds of one update, median seconds of a forward + backward of the same batch)."""
    import torch

    from app.local.policies.base import Episode

    rng = random.Random(1)
    update_s, plain_s = [], []
    for r in range(rounds + 1):
        groups = []
        for g in range(2):
            acts = [policy.act(MESSAGES, [TOOL], CHOICE, f"step{r}-{g}-{i}", rng) for i in range(4)]
            groups.append([Episode([a.memo], float(i % 2)) for i, a in enumerate(acts)])
        sequences = [e.memos[0].sequence.ids for group in groups for e in group]
        started = time.perf_counter()
        policy.update(groups)
        took = time.perf_counter() - started
        width = max(len(s) for s in sequences)
        pad = policy.tokenizer.pad_token_id or 0
        batch = torch.tensor([s + [pad] * (width - len(s)) for s in sequences])
        policy.model.train()
        started = time.perf_counter()
        out = policy.model(input_ids=batch, labels=batch)
        out.loss.backward()
        plain = time.perf_counter() - started
        policy.model.zero_grad(set_to_none=True)
        if r:  # the first builds the trainer and its thread
            update_s.append(took)
            plain_s.append(plain)
    return statistics.median(update_s), statistics.median(plain_s)


def endpoint_overhead(folder: Path, steps: int) -> tuple[float, float, int]:
    """(median chat call wall ms, median model ms inside it, turns) over a real job."""
    import copy

    import httpx

    from app.commands.demo import demo_payload, load_demo_config
    from app.local.policies.lm.policy import LmPolicy
    from app.local.servers import ServerHandle, _bind, start_backend

    walls: list[float] = []
    inside: list[float] = []
    original_ask, original_act = press_taskapp.ask_policy, LmPolicy.act

    async def timed_ask(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await original_ask(*args, **kwargs)
        finally:
            walls.append(time.perf_counter() - started)

    def timed_act(self: Any, *args: Any, **kwargs: Any) -> Any:
        act = original_act(self, *args, **kwargs)
        inside.append(act.memo.seconds)
        return act

    press_taskapp.ask_policy, LmPolicy.act = timed_ask, timed_act  # type: ignore[method-assign]
    env_key, api_key = "e" * 32, "sk_bench_lm_0123456789"
    try:
        app = press_taskapp.create_press_taskapp(env_api_keys=[env_key], asks=("A",))
        with tempfile.TemporaryDirectory() as tmp, \
                ServerHandle("task app", app, _bind("127.0.0.1", 0)).start("/") as taskapp, \
                start_backend(api_key=api_key, db_path=Path(tmp) / "s.sqlite3", env_api_keys=[env_key],
                              policy_kind="lm") as backend, \
                httpx.Client(base_url=backend.url + "/api", headers={"Authorization": f"Bearer {api_key}"},
                             timeout=30.0) as api:
            config = copy.deepcopy(load_demo_config())
            config["model"].update(trainer_mode="lora")
            config["rollout"].update(env_name="press-button", max_turns=2, max_concurrent_rollouts=1)
            config["training"].update(num_epochs=1, iterations_per_epoch=steps, batch_size=1, group_size=4,
                                      max_turns=2, learning_rate=1e-3, seed=0)
            del config["evaluation"]
            payload = demo_payload(config, taskapp.url)
            payload["data"]["base_model"] = payload["data"]["config"]["model"]["base"] = str(folder)
            job_id = api.post("/rl/jobs", json=payload).raise_for_status().json()["job_id"]
            deadline = time.monotonic() + 900
            while (status := api.get(f"/rl/jobs/{job_id}").json()["status"]) not in ("succeeded", "failed",
                                                                                       "cancelled"):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"job {job_id} still {status}")
                time.sleep(0.2)
            if status != "succeeded":
                raise RuntimeError(f"job {job_id} {status}")
    finally:
        press_taskapp.ask_policy, LmPolicy.act = original_ask, original_act  # type: ignore[method-assign]
    return statistics.median(walls) * 1000, statistics.median(inside) * 1000, len(walls)


def _rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _episodes(policy: Any, rng: random.Random, label: str) -> list[list[Any]]:
    """2 groups x 4 episodes of one turn each: the README walk's step."""
    from app.local.policies.base import Episode

    groups = []
    for g in range(2):
        acts = [policy.act(MESSAGES, [TOOL], CHOICE, f"{label}-{g}-{i}", rng) for i in range(4)]
        groups.append([Episode([a.memo], float(i % 2)) for i, a in enumerate(acts)])
    return groups


def rss_child(folder: str, micro: int, checkpointing: bool) -> None:
    """In a process of its own (peak RSS only grows): a warm GRPO step's peak RSS, sampled every
    5 ms during the update, printed as JSON (MB): the process at the peak, and above the step's start."""
    import json
    import threading

    from app.local.policies.base import PolicySettings
    from app.local.policies.lm.policy import LmPolicy

    policy = LmPolicy(PolicySettings(model=folder, learning_rate=1e-4, seed=0, total_steps=100, batch_size=2,
                                     group_size=4, options={"trainer_mode": "lora", "micro_batch_size": micro,
                                                            "gradient_checkpointing": checkpointing}))
    rng = random.Random(1)
    try:
        policy.update(_episodes(policy, rng, "first"))  # builds the trainer and its thread
        groups = _episodes(policy, rng, "warm")
        start, peak, done = _rss_mb(), [0.0], threading.Event()

        def sample() -> None:
            while not done.wait(0.005):
                peak[0] = max(peak[0], _rss_mb())

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        policy.update(groups)
        done.set()
        sampler.join()
    finally:
        policy.close()
    print(json.dumps({"peak_mb": max(peak[0], start), "above_start_mb": max(peak[0] - start, 0.0)}))


def step_peak_rss(folder: Path, micro: int, checkpointing: bool = True) -> dict[str, float]:
    import json
    import subprocess

    code = (f"import sys; sys.path[:0] = [{str(REPO)!r}, {str(REPO / 'tests')!r}]; "
            f"from benchmarks.bench_lm import rss_child; rss_child({str(folder)!r}, {micro}, {checkpointing})")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=1800)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def checkpoint_stall(policy: Any, steps: int) -> dict[str, float]:
    """What a checkpoint stalls per step (median seconds), `steps` steps in a row each way:
    `sync_s`, the write inside the step (as every step did before [training] save_every);
    `async_s`, the wait before the next update for the write started after the previous step,
    made while this step's rollouts played (app/local/training/steps.py); and each way's step
    wall time (rollouts + update + the checkpoint's part), `none_wall_s` without a checkpoint."""
    import concurrent.futures

    from app.local.state.checkpoints import Checkpoints

    rng = random.Random(2)
    walls: dict[str, list[float]] = {"none": [], "sync": [], "async": []}
    stalls: dict[str, list[float]] = {"sync": [], "async": []}
    with tempfile.TemporaryDirectory() as tmp, concurrent.futures.ThreadPoolExecutor(1) as pool:
        checkpoints = Checkpoints(Path(tmp))
        policy.update(_episodes(policy, rng, "ck-warm"))
        step = 0
        for mode in ("none", "sync", "async"):
            writing: concurrent.futures.Future[Path] | None = None
            for r in range(steps):
                step += 1
                started = time.perf_counter()
                groups = _episodes(policy, rng, f"ck-{mode}-{r}")
                if writing is not None:
                    waited = time.perf_counter()
                    writing.result()
                    stalls["async"].append(time.perf_counter() - waited)
                policy.update(groups)
                if mode == "sync":
                    saving = time.perf_counter()
                    checkpoints.save("bench", step, policy)
                    stalls["sync"].append(time.perf_counter() - saving)
                elif mode == "async":
                    writing = pool.submit(checkpoints.save, "bench", step, policy)
                walls[mode].append(time.perf_counter() - started)
            if writing is not None:
                writing.result()
    median = statistics.median
    return {"sync_s": median(stalls["sync"]), "async_s": median(stalls["async"]),
            "none_wall_s": median(walls["none"]), "sync_wall_s": median(walls["sync"]),
            "async_wall_s": median(walls["async"][1:] or walls["async"])}


def run(quick: bool) -> list[Figure]:
    from app.local.policies import trainer_extra_missing

    missing = trainer_extra_missing()
    if missing:
        return [Figure("lm policy", None, note=missing)]
    import torch

    from app.local.policies.lm.model import cpu_threads
    from app.local.policies.lm.tiny_model import build_tiny_qwen3

    torch.set_num_threads(cpu_threads())
    figures: list[Figure] = []
    turns, rounds = (4, 1) if quick else (16, 3)
    with tempfile.TemporaryDirectory() as tmp:
        models = [("tiny Qwen3 (140k params)", build_tiny_qwen3(Path(tmp) / "tiny"))]
        if not quick:
            from support.smollm2 import smollm2_folder

            models.append(("SmolLM2-135M", smollm2_folder()))
        for label, folder in models:
            say(f"{label}: generation and GRPO steps")
            policy = _policy(folder)
            try:
                load = os.getloadavg()[0]
                gen = generation(policy, turns)
                figures.append(Figure(
                    f"lm generation, {label}: act, a constrained tool call, a turn", gen["act_s"] * 1000, "ms",
                    baseline=gen["generate_s"] * 1000,
                    baseline_label="transformers generate, same tokens, unconstrained",
                    goal="lower is better",
                    note=f"{gen['sampled_per_s']:.2f} sampled tokens/s ({gen['sampled']:.1f} of {gen['tokens']:.1f} "
                         f"tokens a turn sampled, the rest forced by the grammar); load average {load:.1f} on "
                         f"{os.cpu_count()} cores"))
                step, plain = grpo_step(policy, rounds)
                figures.append(Figure(f"lm GRPO step, {label}: 2 groups x 4 episodes, LoRA", step * 1000, "ms",
                                      baseline=plain * 1000, baseline_label="one forward + backward of the same batch",
                                      goal="lower is better"))
                stall = checkpoint_stall(policy, 2 if quick else 4)
                figures.append(Figure(f"lm checkpoint stall per step, {label}: write off the step", stall["async_s"]
                                      * 1000, "ms", baseline=stall["sync_s"] * 1000,
                                      baseline_label="the write inside the step", goal="lower is better",
                                      note=f"step wall {stall['none_wall_s']:.2f} s without a checkpoint, "
                                           f"{stall['sync_wall_s']:.2f} s written in the step, "
                                           f"{stall['async_wall_s']:.2f} s written during the next rollouts"))
            finally:
                policy.close()
        for label, folder in models:
            say(f"{label}: peak RSS of a warm step, whole batch and in micro-batches (a process each)")
            whole = step_peak_rss(folder, 8)
            micro = step_peak_rss(folder, 2)
            figures.append(Figure(f"lm step peak RSS, {label}: 8 sequences in micro-batches of 2", micro["peak_mb"],
                                  "MB", baseline=whole["peak_mb"], baseline_label="the 8 in one forward + backward",
                                  goal="lower is better",
                                  note=f"above the step's start: {micro['above_start_mb']:.0f} MB in micro-batches, "
                                       f"{whole['above_start_mb']:.0f} MB whole; gradient checkpointing on in both"))
        # Issue 40's done-when: the real model (the tiny one in a quick run) on one `synth-tui backend`.
        figures += rollout_phase.run(models[-1][0], models[-1][1], pretrained=not quick, folder=Path(tmp))
        say("chat endpoint overhead: a real job on the tiny model")
        wall_ms, model_ms, calls = endpoint_overhead(models[0][1], 1 if quick else 3)
        overhead = (wall_ms - model_ms) / model_ms
        figures.append(Figure("lm chat endpoint overhead per turn (tiny model, real job)", overhead * 100, "%",
                              goal="< 10 % of the model's own time", met=overhead < 0.10,
                              note=f"a call takes {wall_ms:.1f} ms median as the task app sees it; the model's "
                                   f"own time in it {model_ms:.1f} ms ({calls} calls)"))
    return figures


if __name__ == "__main__":
    child_main("bench_lm", run)
