"""95 % confidence intervals of an evaluation's mean score, and of its change from step 0.

The embedded backend computes an evaluation's interval from its per-episode rewards and sends it
in the `eval.mean_score` point's `data.ci95` and the `rl.eval.summary` event
(docs/wire-contract.md#metrics); the client reads it from there (`point_interval`) and shows
none when a backend sends none (the hosted service). UI-free: the dashboard, `compare` and the
export read it through `MetricSeries` (series.py), the final line through `eval_change_line`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Z95 = 1.959963984540054  # the normal quantile of 0.975
BOOTSTRAP_RESAMPLES = 1_000
BOOTSTRAP_SEED = 0  # fixed: the same rewards always give the same interval (and tests can check it)


@dataclass(frozen=True)
class Interval:
    low: float
    high: float
    method: str  # "wilson" (every reward 0 or 1) or "bootstrap"

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion: successes out of n (n > 0)."""
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    # Exactly 0 (1) when none (all) succeeded: the formula's rounding would leave 2.8e-17 (or 1 - 1e-16).
    low = 0.0 if successes == 0 else max(0.0, centre - spread)
    high = 1.0 if successes == n else min(1.0, centre + spread)
    return low, high


def bootstrap(values: Sequence[float], resamples: int = BOOTSTRAP_RESAMPLES,
              seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean (2.5th and 97.5th percentiles of the
    resampled means), with a fixed seed."""
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(resamples))
    return means[int(0.025 * (resamples - 1))], means[math.ceil(0.975 * (resamples - 1))]


def mean_interval(rewards: Sequence[float]) -> Interval | None:
    """The 95 % interval of the rewards' mean: Wilson when every reward is 0 or 1, else a
    percentile bootstrap. None for no rewards."""
    if not rewards:
        return None
    if all(r in (0, 1) for r in rewards):
        low, high = wilson(sum(1 for r in rewards if r == 1), len(rewards))
        return Interval(low, high, "wilson")
    low, high = bootstrap([float(r) for r in rewards])
    return Interval(low, high, "bootstrap")


def interval_data(interval: Interval | None) -> dict[str, Any]:
    """What a point's or an event's data carries of an interval (docs/wire-contract.md#metrics)."""
    if interval is None:
        return {}
    return {"ci95": [interval.low, interval.high], "ci_method": interval.method}


def point_interval(data: Mapping[str, Any]) -> Interval | None:
    """The interval a point's data carries (`ci95`: [low, high]), or None when it carries none
    or a malformed one."""
    pair = data.get("ci95")
    if not isinstance(pair, list | tuple) or len(pair) != 2:
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in pair):
        return None
    low, high = float(pair[0]), float(pair[1])
    if low > high:
        return None
    method = data.get("ci_method")
    return Interval(low, high, method if isinstance(method, str) else "")


@dataclass(frozen=True)
class Change:
    """The change of a mean from one evaluation to another, with its 95 % interval when both
    evaluations have one."""

    first: float
    last: float
    low: float | None = None
    high: float | None = None

    @property
    def delta(self) -> float:
        return self.last - self.first

    @property
    def half_width(self) -> float | None:
        return None if self.low is None or self.high is None else (self.high - self.low) / 2


def change(first: float, first_interval: Interval | None, last: float, last_interval: Interval | None) -> Change:
    """last - first, its interval combined from the two by MOVER (Newcombe's method for two
    Wilson intervals): each side the square root of the sum of the squared distances from each
    mean to the interval's end on that side."""
    if first_interval is None or last_interval is None:
        return Change(first, last)
    delta = last - first
    low = delta - math.hypot(last - last_interval.low, first_interval.high - first)
    high = delta + math.hypot(last_interval.high - last, first - first_interval.low)
    return Change(first, last, low, high)


def change_words(name: str, moved: Change) -> str:
    """`eval 0.31 -> 0.92, +0.61 +/- 0.09`: where the score started, where it ended, and the change
    with the half-width of its interval (left out when there is none)."""
    text = f"{name} {moved.first:.2f} -> {moved.last:.2f}, {moved.delta:+.2f}"
    half = moved.half_width
    return text if half is None else f"{text} +/- {half:.2f}"
