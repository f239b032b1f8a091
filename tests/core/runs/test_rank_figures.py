"""A data-parallel job's per-rank figures from its step events (app/core/runs/ranks.py)."""

from __future__ import annotations

from app.core.api.wire import JobEvent
from app.core.runs.ranks import rank_figures, rank_texts


def step(seq: int, **data: object) -> JobEvent:
    return JobEvent(seq=seq, type="rl.train.step", data=data)


def test_the_latest_step_of_two_or_more_processes_gives_the_figures():
    events = [step(1, step=1, world_size=2.0, rank0_generation_tokens_per_s=400.0, rank1_generation_tokens_per_s=10,
                   rank0_allreduce_s=0.2, rank1_allreduce_s=0.001, allreduce_s=0.1005),
              JobEvent(seq=2, type="rl.eval.summary", data={"world_size": 1}),
              step(3, step=2, world_size=2.0, rank0_generation_tokens_per_s=498.7, rank1_generation_tokens_per_s=123.45,
                   rank0_allreduce_s=0.0228, rank1_allreduce_s=0.0014, allreduce_s=0.0121)]
    figures = rank_figures(events)
    assert figures is not None and figures.step == 2 and figures.world == 2
    assert figures.tokens_per_s == (498.7, 123.45) and figures.allreduce_s == (0.0228, 0.0014)
    full, medium, short, shortest = rank_texts(figures)
    # One name and unit with the `all-reduce s` chart, numbers as its readouts write them.
    assert full == ("2 ranks, step 2:  sampled tokens/s r0 499 · r1 123  ·  all-reduce s r0 0.0228 · r1 0.0014 "
                    "(mean 0.0121)")
    assert medium == "× 2 step 2: tok/s r0 499 r1 123  all-reduce s r0 0.0228 r1 0.0014"
    assert short == "× 2 step 2: tok/s 123-499 (slowest r1) · all-reduce s 0.0121, max 0.0228 (r0)"
    assert shortest == "× 2 step 2: tok/s 123-499 (slowest r1)"


def test_one_process_or_no_step_gives_none():
    assert rank_figures([]) is None
    assert rank_figures([step(1, step=1, world_size=1.0, generation_tokens_per_s=50.0)]) is None
    assert rank_figures([step(1, step=1)]) is None  # the stand-in, the hosted service
    assert rank_figures([step(1, step=1, world_size="2")]) is None
    assert rank_figures([step(1, step=1, world_size=float("nan"))]) is None


def test_a_figure_missing_or_not_a_number_is_a_dash_never_a_crash():
    figures = rank_figures([step(1, world_size=2, rank0_generation_tokens_per_s=float("inf"),
                                 rank1_generation_tokens_per_s=7.25, rank1_allreduce_s=True)])
    assert figures is not None and figures.step is None
    assert figures.tokens_per_s == (None, 7.25) and figures.allreduce_s == (None, None)
    full, _, short, _ = rank_texts(figures)
    assert full == ("2 ranks, latest step:  sampled tokens/s r0 — · r1 7.2  ·  all-reduce s r0 — · r1 — "
                    "(mean —)")
    assert short == "× 2 latest step: tok/s 7.2-7.2 (slowest r1) · all-reduce s —"


def test_a_number_too_large_for_a_float_is_unknown_not_a_crash() -> None:
    from app.core.api.wire import JobEvent
    from app.core.runs.ranks import rank_figures

    figures = rank_figures([JobEvent(seq=1, type="rl.train.step", message="",
                                     data={"world_size": 2, "rank0_generation_tokens_per_s": 10**400})])
    assert figures is not None and figures.tokens_per_s == (None, None)


def test_the_chart_of_the_all_reduce_has_the_ranks_lines_name_and_unit():
    from app.core.runs.series import chart_panels

    titles = [panel.title for panel in chart_panels(["train.mean_score", "train.allreduce_s", "train.kl"])]
    assert titles == ["mean score", "all-reduce s", "kl"]


def test_the_tokens_per_s_chart_says_it_counts_sampled_tokens():
    """Issue 39: a grammar's forced scaffold is not generation; the chart says what it counts."""
    from app.core.runs.series import chart_panels

    titles = [panel.title for panel in chart_panels(["train.mean_score", "train.generation_tokens_per_s"])]
    assert titles == ["mean score", "sampled tokens/s"]
