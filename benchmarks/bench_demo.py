"""Figure 6: the demo end to end, and the embedded backend (``bench_trainer``) folded in.

Demo: ``synth-tui demo --no-tui --workdir <tmp>`` as a subprocess, exactly as a user runs it
(servers start, the job is created and watched, the SDK-style lines are printed); wall time
from start to the line "Final status: succeeded", median of 3 (``--quick``: 1). The first
step's ``train.mean_score`` and the last ``eval.mean_score`` are parsed from its metric lines
(``[metric] train.mean_score=0.1725 (step=1) n=32``).

Trainer: ``bench_trainer.main`` (backend and task app in this process, no UI), medians of 3
runs (``--quick``: 1 run of 1 policy update, so its scores are not comparable).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import bench_trainer
from benchmarks.common import REPO, Figure, above, below, child_main, median, say

METRIC_LINE = re.compile(r"\[metric\] (?P<name>[\w.]+)=(?P<value>-?[\d.]+|nan) \(step=(?P<step>\d+)\)")
DONE = "Final status: succeeded"


def demo_command(workdir: Path) -> list[str]:
    script = Path(sys.executable).with_name("synth-tui")
    entry = [str(script)] if script.exists() else [sys.executable, "-m", "app.cli"]
    return [*entry, "demo", "--no-tui", "--workdir", str(workdir)]


def demo_once() -> dict:
    with tempfile.TemporaryDirectory(prefix="synth-tui-bench-demo-") as tmp:
        env = dict(os.environ, SYNTH_TUI_STATE_DIR=str(Path(tmp) / "state"))
        started = time.monotonic()
        proc = subprocess.Popen(demo_command(Path(tmp) / "demo"), cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        wall = None
        first_train, last_eval = None, None
        tail: list[str] = []
        assert proc.stdout is not None
        for line in proc.stdout:
            tail = (tail + [line])[-20:]
            if wall is None and DONE in line:
                wall = time.monotonic() - started
            match = METRIC_LINE.search(line)
            if match and match["value"] != "nan":
                if match["name"] == "train.mean_score" and first_train is None:
                    first_train = float(match["value"])
                elif match["name"] == "eval.mean_score":
                    last_eval = float(match["value"])
        code = proc.wait()
        exited = time.monotonic() - started
    if wall is None:
        raise RuntimeError(f"the demo did not succeed (exit {code}):\n{''.join(tail)}")
    return {"wall": wall, "exited": exited, "first": first_train, "final": last_eval}


def run(quick: bool) -> list[Figure]:
    runs = []
    for number in range(1 if quick else 3):
        result = demo_once()
        runs.append(result)
        say(f"demo: run {number + 1}: succeeded after {result['wall']:.1f} s (exited at {result['exited']:.1f} s), "
            f"first train.mean_score {result['first']}, final eval.mean_score {result['final']}")
    wall, first, final = (median([r[k] for r in runs if r[k] is not None]) for k in ("wall", "first", "final"))
    n = len(runs)
    trainer = bench_trainer.main(["--runs", "1", "--iterations", "1"] if quick else ["--runs", "3"])
    t_runs = 1 if quick else 3
    quick_note = "; --quick: 1 update, scores not comparable" if quick else ""
    return [
        Figure(f"demo --no-tui: start to 'Final status: succeeded' (median of {n})", wall, "s",
               goal="< 60 s", met=below(wall, 60.0), samples=[r["wall"] for r in runs]),
        Figure(f"  demo first-step train.mean_score (median of {n})", first, "", goal="near chance (< 0.4)",
               met=below(first, 0.4), samples=[r["first"] for r in runs if r["first"] is not None]),
        Figure(f"  demo final eval.mean_score (median of {n})", final, "", goal="> 0.8", met=above(final, 0.8),
               samples=[r["final"] for r in runs if r["final"] is not None]),
        Figure(f"trainer job wall, in-process, no UI (median of {t_runs})", trainer["wall_s"], "s",
               note=f"first-step mean score {trainer['first_step_mean_score']:.3f}, final eval "
                    f"{trainer['final_eval_mean_score']:.3f}{quick_note}"),
        Figure("  trainer rollouts/s", trainer["rollouts_per_s"], ""),
        Figure("  trainer chat completions/s", trainer["chat_completions_per_s"], ""),
    ]


if __name__ == "__main__":
    child_main("bench_demo", run)
