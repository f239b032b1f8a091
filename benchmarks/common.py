"""Shared pieces of the benchmarks: figures, statistics, process probes, the child protocol.

Every benchmark module runs in its own child process (``python -m benchmarks.bench_x --json
FILE``), started by ``python -m benchmarks``: one benchmark's threads, caches and heap then
cannot leak into the next one's CPU or memory figures. A module can also be run on its own.

Nothing here asserts on time: the machine is shared and noisy, so a benchmark reports figures
(medians of several repetitions) and, where one exists, a baseline measured in the same run,
so the ratio is meaningful even when the absolute numbers drift between runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Figure:
    """One row of the table. ``ratio`` is value / baseline (for times lower is better, for
    rates higher is better: the goal column says which)."""

    name: str
    value: float | None
    unit: str = ""
    baseline: float | None = None
    baseline_label: str = ""
    goal: str = ""
    met: bool | None = None
    note: str = ""
    samples: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.baseline:
            return None
        return self.value / self.baseline

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ratio"] = self.ratio
        return data


def below(value: float | None, limit: float) -> bool | None:
    return None if value is None else value < limit


def at_most(value: float | None, limit: float) -> bool | None:
    return None if value is None else value <= limit


def above(value: float | None, limit: float) -> bool | None:
    return None if value is None else value > limit


# --------------------------------------------------------------------------- statistics


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); enough for tens to thousands of samples."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def time_calls(func: Callable[[], object], repeat: int, warmup: int = 1) -> list[float]:
    """Wall times in ms of ``repeat`` calls after ``warmup`` untimed calls (first calls pay
    for imports, caches and allocator growth that a long-running app paid long ago)."""
    for _ in range(warmup):
        func()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        func()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


# --------------------------------------------------------------------------- process probes


def rss_mb() -> float:
    """Resident memory of this process now (VmRSS), in MB (MiB)."""
    return _status_kb("VmRSS") / 1024


def peak_rss_mb() -> float:
    return _status_kb("VmHWM") / 1024


def _status_kb(key: str) -> int:
    with open("/proc/self/status", encoding="ascii") as handle:
        for line in handle:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{key} not in /proc/self/status")


def cpu_seconds() -> float:
    """CPU time of every thread of this process (user + system); children are excluded."""
    return time.process_time()


def thread_cpu() -> dict[str, float]:
    """CPU seconds per live thread of this process (from /proc/self/task), by Python thread
    name where there is one: shows whether the UI thread or the feed thread spends it."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    ticks = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat", encoding="ascii") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = names.get(int(tid), f"thread {tid}")
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return out


def machine() -> dict[str, Any]:
    import platform

    info: dict[str, Any] = {"python": platform.python_version(), "cpus": os.cpu_count(),
                            "platform": platform.platform()}
    try:
        info["loadavg"] = list(os.getloadavg())
    except OSError:
        pass
    try:
        from importlib.metadata import version

        info["textual"] = version("textual")
    except Exception:
        pass
    return info


def isolate_state() -> Path:
    """The app writes a run history and each job's event stream under its state folder:
    point it at a temporary one so benchmarks leave the user's state alone."""
    folder = Path(tempfile.mkdtemp(prefix="synth-tui-bench-state-"))
    os.environ["SYNTH_TUI_STATE_DIR"] = str(folder)
    for name in ("NO_COLOR", "TEXTUAL_THEME"):
        os.environ.pop(name, None)
    return folder


def say(message: str) -> None:
    """Progress goes to stderr, so a child's stdout stays free for whatever it wraps."""
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- child protocol


def child_main(name: str, run: Callable[[bool], list[Figure]], argv: list[str] | None = None) -> list[Figure]:
    """Entry point of a benchmark module: ``--quick`` and ``--json FILE`` (the runner's
    protocol); without ``--json`` it prints its rows."""
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.{name}")
    parser.add_argument("--quick", action="store_true", help="small sizes, few repetitions (smoke run)")
    parser.add_argument("--json", type=Path, help="write the figures here (used by python -m benchmarks)")
    args = parser.parse_args(argv)
    isolate_state()
    started = time.monotonic()
    figures = run(args.quick)
    elapsed = time.monotonic() - started
    if args.json:
        args.json.write_text(json.dumps({"name": name, "seconds": elapsed,
                                         "figures": [f.as_dict() for f in figures]}, indent=2))
    else:
        print(format_table(figures))
    return figures


def figure_from_dict(data: dict[str, Any]) -> Figure:
    data = {k: v for k, v in data.items() if k != "ratio"}
    return Figure(**data)


# --------------------------------------------------------------------------- the table


def _number(value: float | None, unit: str = "") -> str:
    if value is None:
        return "—"
    if unit == "":
        text = f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    elif 0 < abs(value) < 0.1:
        text = f"{value:.3f}"
    elif abs(value) >= 1000:
        text = f"{value:,.0f}"
    elif abs(value) >= 100:
        text = f"{value:.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return f"{text} {unit}".strip()


def format_table(figures: Sequence[Figure]) -> str:
    header = ("figure", "value", "baseline", "ratio", "goal", "met?")
    rows = []
    for f in figures:
        baseline = _number(f.baseline, f.unit)
        if f.baseline is not None and f.baseline_label:
            baseline += f" ({f.baseline_label})"
        ratio = "—" if f.ratio is None else (f"{f.ratio:,.0f}x" if f.ratio >= 100 else f"{f.ratio:.3g}x")
        met = {True: "yes", False: "NO", None: "—"}[f.met]
        rows.append((f.name, _number(f.value, f.unit), baseline, ratio, f.goal or "—", met))
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return " | ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [line(header), "-+-".join("-" * w for w in widths)]
    out += [line(r) for r in rows]
    return "\n".join(out)
