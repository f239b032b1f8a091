"""A run as this machine saved it: the feed's events.jsonl read back, metrics rebuilt from the
step summaries when they carry them."""

from __future__ import annotations

import json

from app.core.paths import run_dir
from app.core.runs.saved_run import read_saved_run, run_span
from support.fakes import event


def write_events(job_id: str, lines: list[str]) -> None:
    folder = run_dir(job_id)
    folder.mkdir(parents=True)
    (folder / "events.jsonl").write_text("".join(line + "\n" for line in lines))


def test_nothing_saved_is_none():
    assert read_saved_run("job_never_watched") is None


def test_events_without_step_summaries_have_no_metrics():
    write_events("job_hosted", [json.dumps(event(1, "rl.job.created")), json.dumps(event(2, "rl.job.completed"))])
    saved = read_saved_run("job_hosted")
    assert saved is not None and [e.seq for e in saved.batch.events] == [1, 2]
    assert not saved.metrics_kept


def test_step_summaries_become_metric_points_and_bad_lines_are_skipped():
    write_events("job_demo", [
        json.dumps(event(1, "rl.train.step", step=0, mean_score=0.25, loss=0.9, entropy=1.2)),
        "not json", "[1, 2]",
        json.dumps(event(2, "rl.eval.summary", step=0, mean_score=0.5)),
        json.dumps(event(3, "rl.train.step", step="one", mean_score=0.3)),  # no usable step: no point
    ])
    saved = read_saved_run("job_demo")
    assert saved is not None and len(saved.batch.events) == 3
    assert {(p.name, p.step, p.value, p.phase) for p in saved.batch.points} == {
        ("train.mean_score", 0, 0.25, "train"), ("train.loss", 0, 0.9, "train"),
        ("train.entropy", 0, 1.2, "train"), ("eval.mean_score", 0, 0.5, "eval")}


def test_the_saved_runs_length_and_its_points_times_come_from_the_events():
    write_events("job_timed", [
        json.dumps({**event(1, "rl.job.created"), "created_at": "2026-01-01T12:00:00Z"}),
        json.dumps({**event(2, "rl.train.step", step=1, mean_score=0.5), "created_at": "2026-01-01T12:01:30Z"}),
        json.dumps({**event(3, "rl.job.completed"), "created_at": "2026-01-01T12:02:05Z"}),
    ])
    saved = read_saved_run("job_timed")
    assert saved is not None and run_span(saved.batch.events) == 125
    assert [p.created_at for p in saved.batch.points] == ["2026-01-01T12:01:30Z"]
    assert run_span(saved.batch.events[:1]) is None
