"""``synth-tui compare``: several jobs' metrics read whole and shown together."""

from __future__ import annotations

from app.cli.dispatch import main
from app.core.api.client import SynthClient
from app.core.api.wire import MetricPoint
from app.core.errors import ExitCode
from app.core.runs.compare import ComparedRun, compare_rows, read_run
from support.fakes import finished_job


def test_compare_prints_each_metric_of_each_job(faulty_backend, monkeypatch, capsys):
    faulty_backend.add_job(finished_job("job_a", 5, 0.0))
    faulty_backend.add_job(finished_job("job_b", 3, 0.05))
    monkeypatch.setenv("SYNTH_API_KEY", faulty_backend.api_key)
    code = main(["compare", "job_a", "job_b", "--no-tui", "--backend", faulty_backend.url])
    out, err = capsys.readouterr()
    assert code == ExitCode.OK, err
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["METRIC", "JOB", "POINTS", "LAST", "CI95", "BEST", "STEP"]
    assert ["train.mean_score", "job_a", "5", "0.4000", "-", "0.4000", "4"] in rows  # no interval sent
    assert ["train.mean_score", "job_b", "3", "0.2500", "-", "0.2500", "2"] in rows
    assert ["train.loss", "job_b", "3", "0.8000", "-", "0.8000", "2"] in rows
    assert faulty_backend.api_key not in out + err


def test_compare_prints_an_evaluations_interval(faulty_backend, monkeypatch, capsys):
    for job_id, ci in (("job_a", [0.1, 0.4]), ("job_b", [0.62, 0.97])):
        job = finished_job(job_id, 2, 0.0)
        job.timeline[0][2].append({"name": "eval.mean_score", "step": 0, "value": 0.25,
                                   "data": {"n": 16, "ci95": [0.05, 0.5]}})
        job.timeline[1][2].append({"name": "eval.mean_score", "step": 1, "value": 0.8,
                                   "data": {"n": 16, "ci95": ci, "ci_method": "wilson"}})
        faulty_backend.add_job(job)
    monkeypatch.setenv("SYNTH_API_KEY", faulty_backend.api_key)
    assert main(["compare", "job_a", "job_b", "--no-tui", "--backend", faulty_backend.url]) == ExitCode.OK
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["eval.mean_score", "job_a", "2", "0.8000", "0.1000-0.4000", "0.8000", "1"] in rows
    assert ["eval.mean_score", "job_b", "2", "0.8000", "0.6200-0.9700", "0.8000", "1"] in rows


def test_compare_needs_two_jobs_and_says_which_is_missing(faulty_backend, monkeypatch, capsys):
    faulty_backend.add_job(finished_job("job_a", 2, 0.0))
    monkeypatch.setenv("SYNTH_API_KEY", faulty_backend.api_key)
    assert main(["compare", "job_a", "job_a", "--no-tui", "--backend", faulty_backend.url]) == ExitCode.USAGE
    assert "at least two different job ids" in capsys.readouterr().err
    code = main(["compare", "job_a", "job_nope", "--no-tui", "--backend", faulty_backend.url])
    err = capsys.readouterr().err
    assert code == ExitCode.BACKEND and "job_nope" in err and "Traceback" not in err


def test_compare_refuses_a_dead_backend_with_exit_5(monkeypatch, capsys, dead_port):
    monkeypatch.setenv("SYNTH_API_KEY", "sk_test_0123456789abcdef")
    code = main(["compare", "job_a", "job_b", "--no-tui", "--backend", f"http://127.0.0.1:{dead_port}"])
    assert code == ExitCode.BACKEND
    assert "Traceback" not in capsys.readouterr().err


async def test_a_run_is_read_across_pages_without_duplicates(faulty_backend):
    job = finished_job("job_long", 450, 0.0)  # 900 points: five pages of 200
    faulty_backend.add_job(job)
    async with SynthClient(faulty_backend.url, faulty_backend.api_key, retries=0) as client:
        run = await read_run(client, "job_long")
    assert len(run.store.get("train.mean_score")) == 450 and not run.truncated
    async with SynthClient(faulty_backend.url, faulty_backend.api_key, retries=0) as client:
        short = await read_run(client, "job_long", max_pages=2)
    assert short.truncated


def test_rows_follow_the_chart_order_and_mark_a_missing_metric():
    a, b = ComparedRun("job_a"), ComparedRun("job_b")
    a.store.add([MetricPoint(name="train.loss", step=1, value=0.5),
                 MetricPoint(name="eval.mean_score", step=1, value=0.2),
                 MetricPoint(name="train.mean_score", step=1, value=0.3)])
    b.store.add([MetricPoint(name="train.mean_score", step=2, value=0.4)])
    rows = [(r.metric, r.job_id, r.points) for r in compare_rows([a, b])]
    assert rows == [("train.mean_score", "job_a", 1), ("train.mean_score", "job_b", 1),
                    ("eval.mean_score", "job_a", 1), ("eval.mean_score", "job_b", 0),
                    ("train.loss", "job_a", 1), ("train.loss", "job_b", 0)]


def test_run_labels_tell_the_runs_of_a_chart_apart_in_a_few_characters():
    from app.core.runs.compare import run_labels

    hosted = ["job_f035a1b2c3d4e5f6a7b8c9d0", "job_f035a1ffffffffffffffffff", "job_9c2e41000000000000000000"]
    labels = run_labels(hosted)
    assert labels == {hosted[0]: "f035a1b…", hosted[1]: "f035a1f…", hosted[2]: "9c2e41…"}
    assert len(set(labels.values())) == 3
    # Ids that differ only at the end (a local sequence) are shown whole; short ones too.
    assert run_labels(["job_local_000001", "job_local_000002"]) == {
        "job_local_000001": "local_000001", "job_local_000002": "local_000002"}
    assert run_labels(["job_first", "job_rerun"]) == {"job_first": "first", "job_rerun": "rerun"}
    assert run_labels(["job_"]) == {"job_": "job_"}


def test_a_throughput_is_best_at_its_highest_a_loss_reads_min():
    """Issue 37: compare marked the lowest tokens/s as BEST. Each metric knows its direction:
    a score or a throughput is better higher; a loss has no direction a chart can assume."""
    run = ComparedRun("job_a")
    run.store.add([MetricPoint(name=name, step=step, value=value)
                   for step, (rate, loss) in enumerate([(120.0, 0.9), (480.0, 0.5), (300.0, 0.7)], 1)
                   for name, value in (("train.generation_tokens_per_s", rate), ("train.loss", loss))])
    rate = run.store.get("train.generation_tokens_per_s").readouts()
    assert (rate.best, rate.best_label) == (480.0, "best")
    loss = run.store.get("train.loss").readouts()
    assert (loss.best, loss.best_label) == (0.5, "min")
    rows = {row.metric: row for row in compare_rows([run, ComparedRun("job_b")]) if row.job_id == "job_a"}
    assert rows["train.generation_tokens_per_s"].best == 480.0
