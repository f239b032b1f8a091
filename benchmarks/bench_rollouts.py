"""Figure 9: what the rollout inspector's storage costs on a long job.

The embedded backend keeps a sample of each train step's rollouts and every eval episode
(app/local/training/rollout_record.py) in its SQLite file, within a per-job byte cap (default 20 MiB,
oldest dropped first: app/local/state/rollout_store.py). This writes 10,000 rollouts of one job
through the real store, into a real SQLite file, with the default cap, and reports the bytes
per rollout stored, the job's total after all of them, and the file's size on disk.

The rollouts are made the way the trainer makes them, without the RL loop (it would take
hours for 10,000 kept rollouts): real gridworld episodes (app/local/taskapps/gridworld.py) played by a
random walker, each turn recorded from the chat request the task app sends (`chat_turn`),
matched to the step reports of the 0.2 answer the task app gives (`read_step_reports`,
`match_turns`), scrubbed (`Scrubber`) and stored (`RolloutStore.add`).

Baseline, same run: the same rollouts as raw JSON (summary and turns, one `json.dumps` each),
the size they would take stored as they are, without compression or a cap.

A second, shorter series gives every turn an image (a 6 kB incompressible data URL, as a
screenshot observation would be), so the cap is reached and holds while rollouts keep coming.
"""

from __future__ import annotations

import base64
import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from app.local.state.store import Store, utc_now
from app.local.taskapps import gridworld
from app.local.taskapps.gridworld_app import MOVE_TOOL, SYSTEM_PROMPT
from app.local.training.rollout_record import (
    DEFAULT_MAX_BYTES,
    Scrubber,
    chat_turn,
    match_turns,
    read_step_reports,
)
from benchmarks.common import Figure, at_most, child_main, say

MIB = float(1 << 20)
KEYS = ("sk_bench_" + "a1b2c3d4" * 4, "f00dfeed" * 8)  # what the scrubber looks for (never present here)


def episode(rng: random.Random, seed: int, image_bytes: int) -> tuple[list[dict[str, Any]], dict[str, Any], float]:
    """One random-walk gridworld episode as the backend sees it: its chat turns and the
    task app's 0.2 answer; with image_bytes, each turn's observation has a new image."""
    game = gridworld.Episode(seed, 12)
    turns, steps = [], []
    while not game.done:
        obs = game.observation()
        content: Any = obs["text"]
        if image_bytes:
            image = "data:image/png;base64," + base64.b64encode(rng.randbytes(image_bytes)).decode()
            content = [{"type": "text", "text": obs["text"]}, {"type": "image_url", "image_url": {"url": image}}]
        body = {"model": "policy", "messages": [{"role": "system", "content": SYSTEM_PROMPT},
                                                {"role": "user", "content": content}],
                "tools": [MOVE_TOOL], "tool_choice": "required"}
        direction = rng.choice(list(gridworld.MOVES))
        call_id = f"call_{rng.getrandbits(64):016x}"
        turns.append(chat_turn(body, "move", {"direction": direction}, call_id))
        moved, reward = game.step(direction)
        steps.append({"obs": obs, "reward": reward, "done": game.done, "truncated": game.done and not game.reached,
                      "tool_calls": [{"id": call_id, "type": "function",
                                      "function": {"name": "move", "arguments": json.dumps({"direction": direction})}}],
                      "info": {"meta": {"inference_url": "http://127.0.0.1:1/api/v1/chat/completions?cid=x"},
                               "action": direction, "moved": moved}})
    return turns, {"trajectories": [{"steps": steps}], "metrics": {"mean_return": game.score}}, game.score


def write_series(store: Store, job_id: str, count: int, cap: int, image_bytes: int) -> dict[str, float]:
    rng = random.Random(16)
    scrub = Scrubber(lambda: KEYS)
    store.create_job(job_id, {"data": {}}, job_id, None)
    raw = 0
    peak = 0
    started = time.perf_counter()
    for n in range(count):
        seed = rng.randrange(1_000_000)
        turns, answer, score = episode(rng, seed, image_bytes)
        used = frozenset(t["call_id"] for t in turns)
        trajectory = scrub.trajectory(match_turns(turns, read_step_reports(answer), used))
        step, index = divmod(n, 4)  # 4 kept a step: the trainer's default sample
        summary = {"rollout_id": f"rl-{step + 1}-{index}-{n:06x}", "phase": "train", "step": step + 1,
                   "index": index, "seed": seed, "reward": score, "turns": len(trajectory)}
        record = {"turns_kept": len(trajectory), "turns_cut": 0, "trajectory": trajectory}
        raw += len(json.dumps({**summary, **record}))
        store.rollouts.add(job_id, summary, record, max_bytes=cap, created_at=utc_now())
        peak = max(peak, store.rollouts.total_bytes(job_id))
    seconds = time.perf_counter() - started
    kept = store.rollouts.count(job_id)
    total = store.rollouts.total_bytes(job_id)
    return {"count": count, "kept": kept, "total": total, "peak": peak, "raw": raw, "seconds": seconds,
            "per_rollout": total / kept if kept else 0.0}


def run(quick: bool) -> list[Figure]:
    count, image_count = (1_000, 400) if quick else (10_000, 600)
    cap = DEFAULT_MAX_BYTES
    with tempfile.TemporaryDirectory(prefix="synth-tui-bench-rollouts-") as tmp:
        db = Path(tmp) / "state.sqlite3"
        store = Store(db)
        text = write_series(store, "job_long", count, cap, 0)
        say(f"rollouts: {text['count']:,} text rollouts in {text['seconds']:.1f} s: {text['kept']:,} kept, "
            f"{text['total'] / MIB:.2f} MiB stored, {text['raw'] / MIB:.2f} MiB as raw JSON")
        images = write_series(store, "job_images", image_count, cap, 6_000)
        say(f"rollouts: {images['count']:,} image rollouts in {images['seconds']:.1f} s: {images['kept']:,} kept, "
            f"{images['total'] / MIB:.2f} MiB stored (peak {images['peak'] / MIB:.2f} MiB), "
            f"{images['raw'] / MIB:.1f} MiB as raw JSON")
        store._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the file's size, not the log's
        store.close()
        on_disk = sum(p.stat().st_size for p in Path(tmp).glob("state.sqlite3*"))
    label = f"{count // 1000}k"
    cap_mb = cap / MIB
    return [
        Figure(f"rollouts: bytes per rollout stored ({label} gridworld)", text["per_rollout"], "B",
               baseline=text["raw"] / count, baseline_label="the same rollout as raw JSON", goal="smaller than raw",
               met=text["per_rollout"] < text["raw"] / count,
               note="zlib-compressed turns + a fixed row cost; 12-turn random walks"),
        Figure(f"  total after {label} rollouts of one job", text["total"] / MIB, "MiB", baseline=text["raw"] / MIB,
               baseline_label="raw JSON", goal=f"<= cap ({cap_mb:.0f} MiB)", met=at_most(text["total"], cap),
               note=f"{text['kept']:,} of {count:,} kept; written in {text['seconds']:.1f} s "
                    f"({1000 * text['seconds'] / count:.2f} ms a rollout, through the real store)"),
        Figure("  SQLite file on disk after both series", on_disk / MIB, "MiB",
               goal=f"<= 2 x cap ({2 * cap_mb:.0f} MiB)", met=at_most(on_disk, 2 * cap),
               note="both jobs, after a WAL checkpoint"),
        Figure(f"rollouts: with a 6 kB image a turn, total after {image_count:,}", images["total"] / MIB, "MiB",
               baseline=images["raw"] / MIB, baseline_label="raw JSON", goal=f"<= cap ({cap_mb:.0f} MiB)",
               met=at_most(images["peak"], cap),
               note=f"{images['kept']:,} newest kept (oldest dropped first); peak {images['peak'] / MIB:.2f} MiB; "
                    f"{images['per_rollout'] / 1e3:.1f} kB a rollout"),
    ]


if __name__ == "__main__":
    child_main("bench_rollouts", run)
