"""Metric series for the reward chart: storage, the default metric, smoothing, downsampling.

The chart must cost the same at step 10 and at step 1,000,000, so everything the chart reads
is either kept up to date in O(1) per point (running EMA and moving average) or reduced to a
fixed number of points per screen column (``downsample``).
"""

from __future__ import annotations

import math
import time
from array import array
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from app.core.api.wire import MetricPoint, parse_iso
from app.core.runs.intervals import Interval, change, change_words, point_interval

# The default series (docs/product.md#metrics-grid): the GEPA metric when present, else the first present of the
# job's mean-score / reward metrics.
PREFERRED_METRICS = (
    "gepa.transformation.mean_score",
    "train.mean_score",
    "eval.mean_score",
    "eval.reward_mean",
    "train.mean_reward",
    "train.reward_mean",
)
SMOOTHING_MODES = ("none", "ema", "moving average")
EMA_ALPHA = 0.2
MOVING_WINDOW = 10


def default_metric(names: Iterable[str]) -> str | None:
    names = list(names)
    for preferred in PREFERRED_METRICS:
        if preferred in names:
            return preferred
    for name in names:
        if "score" in name or "reward" in name:
            return name
    return names[0] if names else None


# Below this size (and above zero) 4 decimals would say one digit or none ("-0.0000" for an lm
# job's loss of -2.24e-08): such a number is written in scientific notation.
SCIENTIFIC_BELOW = 1e-3


def shown_number(value: float) -> str:
    """A metric's value for a readout, a table or a log line: 4 decimals, 3 significant digits
    when large, scientific notation when small ("-2.24e-08", never "-0.0000")."""
    if abs(value) >= 1e5:
        return f"{value:.3g}"
    if 0 < abs(value) < SCIENTIFIC_BELOW:
        return f"{value:.2e}"
    return f"{value + 0.0:.4f}"  # + 0.0: -0.0 reads "0.0000"


def small_axis(low: float, high: float) -> bool:
    """A y axis from ``low`` to ``high`` whose labels need scientific notation: plotext would
    write "-0.00000002000" (shown_number's rule, on the larger end)."""
    return 0 < max(abs(low), abs(high)) < SCIENTIFIC_BELOW


def axis_ticks(low: float, high: float, count: int) -> list[float]:
    """``count`` values from ``low`` to ``high``, evenly spaced (one when they are equal)."""
    if high <= low or count < 2:
        return [low]
    return [low + (high - low) * i / (count - 1) for i in range(count)]


# A measure whose name holds one of these is a score: higher is better, its readout is "best".
# So is a throughput (issue 37: compare called the lowest tokens/s the best). Anything else (a
# loss, KL, entropy, a gradient norm) has no better direction a chart can assume, so its readout
# is its minimum, said as "min" (docs/product.md#metrics-grid).
SCORE_WORDS = ("score", "reward", "accuracy", "success", "return", "win_rate")
THROUGHPUT_WORDS = ("per_s", "per_second", "per_sec", "per_min", "throughput", "/s")


def higher_is_better(name: str) -> bool:
    """Higher is better: a score or a throughput (its name says which)."""
    return any(word in name for word in (*SCORE_WORDS, *THROUGHPUT_WORDS))


MAX_CHARTED = 1e15
# A rate needs its points spread over at least this many seconds: points that arrive together
# with no time of their own (a saved run read back) would otherwise make millions a minute.
MIN_RATE_SPAN_S = 1.0

class MetricSeries:
    """One metric's points in step order, with its smoothed copies kept incrementally."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.steps: array[float] = array("d")
        self.values: array[float] = array("d")
        self.ema: array[float] = array("d")
        self.moving: array[float] = array("d")
        self._window_sum = 0.0
        self.version = 0
        self.minimum = math.inf
        self.maximum = -math.inf
        self._arrivals: list[tuple[float, float]] = []  # (time, step), recent only
        self._backend_clock: bool | None = None  # whether _arrivals hold the backend's times
        # An evaluation's 95 % interval by step, where its point carries one (intervals.py).
        self.intervals: dict[float, Interval] = {}

    def __len__(self) -> int:
        return len(self.steps)

    def add(self, step: float, value: float, now: float | None = None, interval: Interval | None = None) -> None:
        # Beyond ±1e15 a chart's range overflows (1e308 - -1e308 is inf) and plotext fails;
        # such a value says "diverged", which the event log still shows in full.
        if not math.isfinite(value) or abs(value) > MAX_CHARTED or not math.isfinite(step) or abs(step) > MAX_CHARTED:
            return
        if self.steps and step < self.steps[-1]:
            self._insert(step, value)
        else:
            self.steps.append(step)
            self.values.append(value)
            self._smooth_next()
        self.minimum = min(self.minimum, value)
        self.maximum = max(self.maximum, value)
        if interval is not None:
            self.intervals[step] = interval
        if self._backend_clock != (now is not None):  # two clocks' times are never compared
            self._backend_clock, self._arrivals = now is not None, []
        self._arrivals.append((time.monotonic() if now is None else now, step))
        del self._arrivals[:-20]
        self.version += 1

    def _smooth_next(self) -> None:
        """Extend the EMA and the moving average by the next value not yet smoothed: O(1)."""
        count = len(self.ema) + 1
        value = self.values[count - 1]
        previous = self.ema[-1] if self.ema else value
        self.ema.append(previous + EMA_ALPHA * (value - previous))
        self._window_sum += value
        if count > MOVING_WINDOW:
            self._window_sum -= self.values[count - 1 - MOVING_WINDOW]
        self.moving.append(self._window_sum / min(count, MOVING_WINDOW))

    def _insert(self, step: float, value: float) -> None:
        """A late point: put it in place and recompute the smoothing (rare)."""
        index = bisect_left(self.steps, step)
        self.steps.insert(index, step)
        self.values.insert(index, value)
        self.ema, self.moving, self._window_sum = array("d"), array("d"), 0.0
        for _ in self.values:
            self._smooth_next()

    def smoothed(self, mode: str) -> array[float]:
        return {"ema": self.ema, "moving average": self.moving}.get(mode, self.values)

    def interval_at(self, index: int) -> Interval | None:
        """The interval of the point at `index` (-1: the last), if its point carried one."""
        return self.intervals.get(self.steps[index]) if self.steps else None

    def readouts(self) -> Readouts:
        if not self.values:
            return Readouts(self.name, None, None, None, None, None, None)
        best = self.maximum if higher_is_better(self.name) else self.minimum
        rate = None
        if len(self._arrivals) >= 2:
            (t0, s0), (t1, s1) = self._arrivals[0], self._arrivals[-1]
            if t1 - t0 >= MIN_RATE_SPAN_S:
                rate = (s1 - s0) / (t1 - t0) * 60.0
        return Readouts(self.name, self.values[-1], best, self.minimum, self.maximum, int(self.steps[-1]), rate,
                        self.interval_at(-1))


@dataclass(frozen=True)
class Readouts:
    name: str
    last: float | None
    best: float | None  # a score's or a throughput's maximum; any other measure's minimum (``best_label``)
    minimum: float | None
    maximum: float | None
    step: int | None
    steps_per_minute: float | None
    interval: Interval | None = None  # the last value's 95 % interval, when its point carried one

    @property
    def last_text(self) -> str:
        """The last value, with its interval's half-width when it has one: `0.9200 ±0.0900`."""
        if self.last is None:
            return "—"
        text = shown_number(self.last)
        return text if self.interval is None else f"{text} ±{shown_number(self.interval.half_width)}"

    @property
    def best_label(self) -> str:
        """What ``best`` is called: "best" for a score or a throughput, "min" for anything else."""
        return "best" if higher_is_better(self.name) else "min"


class MetricStore:
    """Every metric of a job, in the order first seen."""

    def __init__(self) -> None:
        self.series: dict[str, MetricSeries] = {}

    def add(self, points: Iterable[MetricPoint]) -> set[str]:
        changed = set()
        for point in points:
            if point.value is None or not point.name:
                continue
            series = self.series.get(point.name)
            if series is None:
                series = self.series[point.name] = MetricSeries(point.name)
            series.add(float(point.step), float(point.value), now=_timestamp(point.created_at),
                       interval=point_interval(point.data))
            changed.add(point.name)
        return changed

    def names(self) -> list[str]:
        return list(self.series)

    def points(self) -> list[tuple[str, int, float]]:
        """Every (name, step, value), series by series: a copy, safe to write out elsewhere."""
        return [(name, int(step), value) for name, series in self.series.items()
                for step, value in zip(series.steps, series.values, strict=True)]

    def get(self, name: str | None) -> MetricSeries | None:
        return self.series.get(name) if name else None

    def rows(self) -> list[tuple[str, int, float, Interval | None]]:
        """`points()` with each point's interval (None where it carried none): the export's rows."""
        return [(name, int(step), value, series.intervals.get(step)) for name, series in self.series.items()
                for step, value in zip(series.steps, series.values, strict=True)]


BASELINE_METRIC = "eval.mean_score"


def baseline_change(store: MetricStore, name: str = BASELINE_METRIC) -> str | None:
    """The final line's change from the step-0 evaluation to the last one (`eval 0.31 -> 0.92,
    +0.61 +/- 0.09`; docs/product.md#live-dashboard), or None without an evaluation at step 0 and a
    later one (the hosted service's jobs have none at step 0)."""
    series = store.get(name)
    if series is None or len(series) < 2 or series.steps[0] != 0:
        return None
    moved = change(series.values[0], series.interval_at(0), series.values[-1], series.interval_at(-1))
    return change_words(name.partition(".")[0], moved)


def _timestamp(created_at: str | None) -> float | None:
    """The backend's time of a point, so the rate means steps per minute of training, not of
    arrival (a replayed or caught-up history arrives all at once)."""
    at = parse_iso(created_at)
    return at.timestamp() if at else None


def window(steps: Sequence[float], recent: int | None) -> int:
    """The index where the zoomed view starts: the last ``recent`` steps, or everything."""
    if not recent or not steps:
        return 0
    return bisect_left(steps, steps[-1] - recent + 1)


def downsample(steps: array[float], values: array[float], columns: int,
               start: int = 0) -> tuple[list[float], list[float]]:
    """At most two points per column: each bucket's min and max, so peaks stay visible.

    numpy reads the arrays' buffers in place (no copy), so a redraw over a million points
    costs a few milliseconds; the views are dropped before returning, because an ``array``
    cannot grow while a buffer view of it is alive.
    """
    count = len(steps) - start
    if count <= 0:
        return [], []
    if count <= 2 * columns:
        return list(steps[start:]), list(values[start:])
    import numpy as np  # here, not at the top: a first paint does not wait for numpy
    xs_all = np.frombuffer(steps, dtype=np.float64)[start:]
    ys_all = np.frombuffer(values, dtype=np.float64)[start:]
    edges = np.linspace(0, count, columns + 1).astype(np.int64)[:-1]
    lows = np.minimum.reduceat(ys_all, edges)
    highs = np.maximum.reduceat(ys_all, edges)
    xs = np.repeat(xs_all[edges], 2)
    ys = np.column_stack((lows, highs)).ravel()
    result = xs.tolist(), ys.tolist()
    del xs_all, ys_all
    return result


# -- the metrics grid's panels (docs/product.md#metrics-grid) -----------------------------

# A metric named "<split>.<measure>" with one of these splits shares a panel with its
# namesakes: train.mean_score and eval.mean_score are one chart, two lines.
SPLITS = ("train", "eval")


# A measure whose title is not its name with spaces: the same words as the ranks line
# (app/core/runs/ranks.py), so the chart and the line read as one figure. Tokens/s counts the
# tokens the model sampled, not those a grammar forced (docs/embedded-policy.md#metrics).
MEASURE_TITLES = {"allreduce_s": "all-reduce s", "generation_tokens_per_s": "sampled tokens/s"}


@dataclass(frozen=True)
class ChartPanel:
    """One chart of the grid: a measure and the metric series drawn on it, in legend order."""

    key: str
    series: tuple[str, ...]

    @property
    def title(self) -> str:
        return MEASURE_TITLES.get(self.key) or self.key.replace("_", " ")

    @property
    def lead(self) -> str:
        return self.series[0]


def _measure(name: str) -> str:
    split, _, rest = name.partition(".")
    return rest if split in SPLITS and rest else name


def chart_panels(names: Iterable[str], preferred: str | None = None) -> list[ChartPanel]:
    """Every metric in a panel; train and eval of one measure together (train first).

    The panel of ``preferred`` (else of the default metric) leads; the others keep the order
    their metrics were first seen, so a panel never moves once shown.
    """
    names = list(names)
    grouped: dict[str, list[str]] = {}
    for name in names:
        grouped.setdefault(_measure(name), []).append(name)
    panels = [ChartPanel(key, tuple(sorted(members, key=_split_order))) for key, members in grouped.items()]
    lead = preferred if preferred in names else default_metric(names)
    panels.sort(key=lambda panel: lead not in panel.series)  # stable: the rest keep their order
    return panels


def _split_order(name: str) -> int:
    split = name.partition(".")[0]
    return SPLITS.index(split) if split in SPLITS else len(SPLITS)


def split_slot(name: str) -> int:
    """A series' place among the splits (train 0, eval 1; a measure without a split 0): with
    its run, what gives it the same mark on every chart of a view (widgets/metrics_grid.py)."""
    split = name.partition(".")[0]
    return SPLITS.index(split) if split in SPLITS and _measure(name) != name else 0


def split_label(name: str) -> str:
    """A series' name in its panel's legend: its split ("train", "eval") or its whole name."""
    split = name.partition(".")[0]
    return split if split in SPLITS and _measure(name) != name else name


SPARK_LEVELS = "▁▂▃▄▅▆▇█"


def sparkline(steps: Sequence[float], values: Sequence[float], width: int, *,
              span: tuple[float, float] | None = None, scale: tuple[float, float] | None = None) -> str:
    """A one-line picture of a series over ``width`` columns.

    Columns are placed by step over ``span`` (first and last step of the chart's x axis: the
    series' own by default), so the series of one chart line up; a column is the mean of its
    points, a column without points between two that have some repeats the one before, and
    columns before the series' first point or after its last are blank: a run that stopped
    early, or is still running, covers only the columns of the steps it has. Heights are
    scaled over ``scale`` (low, high; the series' own by default), so one chart's series
    share a scale. A flat series is a flat middle line.
    """
    if not len(values) or width <= 0:
        return ""
    import numpy as np

    xs = np.asarray(steps, dtype=np.float64)
    ys = np.asarray(values, dtype=np.float64)
    first, last = span if span is not None else (float(xs[0]), float(xs[-1]))
    if last > first:
        columns = np.clip(np.rint((xs - first) / (last - first) * (width - 1)), 0, width - 1).astype(np.int64)
    else:
        columns = np.zeros(len(xs), dtype=np.int64)
        width = 1
    counts = np.bincount(columns, minlength=width)
    sums = np.bincount(columns, weights=ys, minlength=width)
    present = counts > 0
    means = np.where(present, sums / np.maximum(counts, 1), np.nan)
    low, high = scale if scale is not None else (float(np.nanmin(means)), float(np.nanmax(means)))
    top = len(SPARK_LEVELS) - 1
    out = []
    level: int | None = None
    end = int(np.flatnonzero(present)[-1])  # the series' last column: blank after it
    for column in range(width):
        if column > end:
            out.append(" ")
            continue
        if present[column]:
            value = float(means[column])
            level = 3 if high - low <= 0 else int(min(top, max(0, round((value - low) / (high - low) * top))))
        out.append(" " if level is None else SPARK_LEVELS[level])
    return "".join(out)
