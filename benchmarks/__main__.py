"""``python -m benchmarks [--quick] [--only NAME ...]``: run the benchmarks, print one table,
write ``benchmarks/results/latest.json`` and a timestamped copy.

Each benchmark runs in its own child process, one after the other (never in parallel: they
would measure each other). Figures are medians of several repetitions where a figure is a
time; each is shown against its baseline measured in the same run where there is one, and
the ratio is value / baseline. Nothing asserts on time: the goal column says what the design
asks, and "met?" is just that comparison on this run, on a shared, noisy 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from benchmarks.common import REPO, Figure, figure_from_dict, format_table, machine

BENCHMARKS = {
    "chart": "bench_chart",        # 1. chart redraw at 160x45, 1k..1M points
    "log": "bench_log",            # 2. events through the worker-to-log path, key latency
    "cpu": "bench_cpu",            # 3. dashboard CPU, idle and streaming
    "memory": "bench_memory",      # 4. RSS after 1M events
    "requests": "bench_requests",  # 5. requests per tick, event-to-screen latency
    "demo": "bench_demo",          # 6. demo wall time and scores, the trainer benchmark
    "soak": "bench_soak",          # 7. ten demo jobs at once on one backend, three rounds
    "startup": "bench_startup",    # 8. first paint of synth-tui and the demo against a minimal Textual app
    "rollouts": "bench_rollouts",  # 9. the rollout inspector's storage: bytes per rollout, total after 10k
    "lm": "bench_lm",              # 10. the lm policy: generation tokens/s, a GRPO step, chat endpoint overhead
    "admission": "bench_admission",  # 11. 16 demo jobs at once beside two CPU burners: none fails, some queue
    "dp": "bench_dp",              # 12. the lm policy data-parallel: one GRPO step with 1 and 2 processes
}
RESULTS = Path(__file__).resolve().parent / "results"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and few repetitions (a smoke run)")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help=f"run only these (repeatable or comma-separated): {', '.join(BENCHMARKS)}")
    parser.add_argument("--results", type=Path, default=RESULTS, help="where to write the JSON results")
    args = parser.parse_args(argv)
    names = [n.strip() for item in args.only for n in item.split(",") if n.strip()]
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    args.names = names or list(BENCHMARKS)
    return args


def run_child(name: str, quick: bool) -> dict:
    module = BENCHMARKS[name]
    with tempfile.TemporaryDirectory(prefix="synth-tui-bench-") as tmp:
        out = Path(tmp) / f"{name}.json"
        command = [sys.executable, "-m", f"benchmarks.{module}", "--json", str(out), *(["--quick"] if quick else [])]
        print(f"== {name} ({module}) ==", file=sys.stderr, flush=True)
        started = time.monotonic()
        code = subprocess.run(command, cwd=REPO).returncode
        seconds = time.monotonic() - started
        if code != 0 or not out.exists():
            failed = Figure(f"{name}: FAILED (exit {code}; see its output above)", None, met=False)
            return {"name": name, "seconds": seconds, "exit_code": code, "figures": [failed.as_dict()]}
        data = json.loads(out.read_text())
    data.update(name=name, seconds=seconds, exit_code=code)
    return data


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started_at = datetime.now()
    before = machine()
    started = time.monotonic()
    results = [run_child(name, args.quick) for name in args.names]
    total = time.monotonic() - started
    figures = [figure_from_dict(f) for r in results for f in r["figures"]]

    print()
    print(format_table(figures))
    print()
    print("Figures that are times are medians of several repetitions (the count is in the name); ratio = value /"
          " baseline, measured in the same run. Shared, noisy 2-core machine: compare ratios, not absolutes.")
    for figure in figures:
        if figure.note:
            print(f"- {figure.name.strip()}: {figure.note}")
    print(f"Total {total:.0f} s: " + ", ".join(f"{r['name']} {r['seconds']:.0f} s" for r in results))

    report = {
        "started_at": started_at.isoformat(timespec="seconds"), "quick": args.quick, "only": args.names,
        "total_seconds": total, "machine_before": before, "machine_after": machine(),
        "benchmarks": results,
    }
    args.results.mkdir(parents=True, exist_ok=True)
    latest = args.results / "latest.json"
    latest.write_text(json.dumps(report, indent=2))
    stamped = args.results / f"{started_at:%Y%m%d-%H%M%S}{'-quick' if args.quick else ''}.json"
    shutil.copyfile(latest, stamped)
    print(f"Wrote {latest} and {stamped}")
    return 0 if all(r["exit_code"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
