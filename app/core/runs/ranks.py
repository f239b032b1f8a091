"""A data-parallel job's ranks at its latest step: each rank's sampled tokens/s and its
time in the gradients' all-reduce, from the embedded backend's step events
(app/local/parallel/policy.py puts them in `rl.train.step`'s data: `rank<r>_generation_tokens_per_s`,
`rank<r>_allreduce_s`, `allreduce_s`, `world_size`). The dashboard shows them under its header
(widgets/rank_line.py), only for a job trained in more than one process. No Textual import.

A rank much slower than the others generates fewer tokens/s, and every other rank waits for it
in the all-reduce: its own all-reduce is the short one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.core.api.wire import JobEvent
from app.core.runs.rollouts import finite_number
from app.core.runs.series import shown_number

STEP_EVENT = "rl.train.step"


@dataclass(frozen=True)
class RankFigures:
    step: int | None
    tokens_per_s: tuple[float | None, ...]  # by rank
    allreduce_s: tuple[float | None, ...]  # by rank
    mean_allreduce_s: float | None

    @property
    def world(self) -> int:
        return len(self.tokens_per_s)


def rank_figures(events: Sequence[JobEvent]) -> RankFigures | None:
    """The figures of the latest step event of a job trained in 2 or more processes; None
    when the latest step says 1 process or nothing of the kind (the hosted service, the stand-in)."""
    for event in reversed(events):
        if event.type != STEP_EVENT:
            continue
        data = event.data
        world = finite_number(data.get("world_size"))
        if world is None or world < 2 or world != int(world) or world > 4096:
            return None
        ranks = range(int(world))
        step = data.get("step")
        rates = tuple(finite_number(data.get(f"rank{r}_generation_tokens_per_s")) for r in ranks)
        return RankFigures(step=step if isinstance(step, int) and not isinstance(step, bool) else None,
                           tokens_per_s=rates,
                           allreduce_s=tuple(finite_number(data.get(f"rank{r}_allreduce_s")) for r in ranks),
                           mean_allreduce_s=finite_number(data.get("allreduce_s")))
    return None


def _rate(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def _seconds(seconds: float | None) -> str:
    """As the `all-reduce s` chart's readouts write it (shown_number): one unit for both."""
    return "—" if seconds is None else shown_number(seconds)


def _extreme(values: tuple[float | None, ...], *, lowest: bool) -> tuple[int, float] | None:
    """(rank, value) of the lowest or highest known value; the first rank on a tie."""
    known = [(rank, value) for rank, value in enumerate(values) if value is not None]
    if not known:
        return None
    return min(known, key=lambda item: item[1]) if lowest else max(known, key=lambda item: item[1])


def rank_texts(figures: RankFigures) -> list[str]:
    """The line in ways from the longest to the shortest; the widget shows the first that fits.
    The longer ones name every rank; the shortest gives the range and names the slowest rank."""
    ranks = range(figures.world)
    at = f"step {figures.step}" if figures.step is not None else "latest step"
    mean = f"mean {_seconds(figures.mean_allreduce_s)}"
    tokens = " · ".join(f"r{r} {_rate(figures.tokens_per_s[r])}" for r in ranks)
    reduce = " · ".join(f"r{r} {_seconds(figures.allreduce_s[r])}" for r in ranks)
    full = f"{figures.world} ranks, {at}:  sampled tokens/s {tokens}  ·  all-reduce s {reduce} ({mean})"
    tokens_short = " ".join(f"r{r} {_rate(figures.tokens_per_s[r])}" for r in ranks)
    reduce_short = " ".join(f"r{r} {_seconds(figures.allreduce_s[r])}" for r in ranks)
    medium = f"× {figures.world} {at}: tok/s {tokens_short}  all-reduce s {reduce_short}"
    slowest = _extreme(figures.tokens_per_s, lowest=True)
    fastest = _extreme(figures.tokens_per_s, lowest=False)
    longest = _extreme(figures.allreduce_s, lowest=False)
    spread = (f"tok/s {_rate(slowest[1])}-{_rate(fastest[1])} (slowest r{slowest[0]})"
              if slowest and fastest else "tok/s —")
    average = _seconds(figures.mean_allreduce_s)
    waits = f"all-reduce s {average}, max {_seconds(longest[1])} (r{longest[0]})" if longest else \
        f"all-reduce s {average}"
    short = f"× {figures.world} {at}: {spread} · {waits}"
    shortest = f"× {figures.world} {at}: {spread}"
    return [full, medium, short, shortest]
