"""The job list's paging (SynthClient.list_all_jobs) and the jobs view's rows: sorting,
filtering, scores and the headless table (app/core/runs/job_list.py)."""

from __future__ import annotations

import asyncio

import pytest

from app.core.api.client import SynthClient
from app.core.api.wire import JobStatus
from app.core.runs.job_list import (
    JobRow,
    ScoreBook,
    filter_rows,
    fit_columns,
    merge_scores,
    next_sort,
    read_jobs,
    row_of,
    score_metric,
    shown_created,
    sort_rows,
    table_lines,
)
from support.fakes import FaultyBackend, ScriptedJob, metric


def _client(backend: FaultyBackend) -> SynthClient:
    return SynthClient(backend.url, backend.api_key, backoff=0.01)


def _add(backend: FaultyBackend, count: int, status: str = "succeeded") -> list[str]:
    ids = [f"job_{i:03d}" for i in range(count)]
    for job_id in ids:
        backend.add_job(ScriptedJob(job_id, [(status, [], [])]))
    return ids


def _list_requests(backend: FaultyBackend) -> int:
    return sum(1 for verb, path, _, _ in backend.requests if verb == "GET" and path == "/api/rl/jobs")


@pytest.mark.parametrize("style", ["after", "next-cursor", "has-more"])
async def test_pages_are_read_until_the_last(faulty_backend, style):
    faulty_backend.list_paging = style
    ids = _add(faulty_backend, 23)
    async with _client(faulty_backend) as client:
        listed = await client.list_all_jobs(page_size=5)
    assert [j.job_id for j in listed.jobs] == ids
    assert listed.pages == 5 and not listed.capped and listed.note is None
    assert _list_requests(faulty_backend) == 5


async def test_a_full_last_page_costs_one_empty_read(faulty_backend):
    faulty_backend.list_paging = "after"
    ids = _add(faulty_backend, 10)
    async with _client(faulty_backend) as client:
        listed = await client.list_all_jobs(page_size=5)
    assert [j.job_id for j in listed.jobs] == ids and listed.pages == 3


async def test_a_backend_that_ignores_after_does_not_loop(faulty_backend):
    faulty_backend.list_paging = "ignore-after"
    ids = _add(faulty_backend, 12)
    async with _client(faulty_backend) as client:
        listed = await client.list_all_jobs(page_size=5)
    assert [j.job_id for j in listed.jobs] == ids[:5]
    assert listed.pages == 2 and "ignores `after`" in (listed.note or "")


async def test_a_backend_that_ignores_limit_is_read_once(faulty_backend):
    ids = _add(faulty_backend, 12)  # the fake's plain list: every job, whatever the limit
    async with _client(faulty_backend) as client:
        listed = await client.list_all_jobs(page_size=5)
    assert [j.job_id for j in listed.jobs] == ids
    assert listed.pages == 2 and listed.note is not None  # the second read brought nothing new


async def test_the_total_is_capped_and_says_so(faulty_backend):
    faulty_backend.list_paging = "after"
    ids = _add(faulty_backend, 30)
    async with _client(faulty_backend) as client:
        listed = await client.list_all_jobs(page_size=7, max_jobs=10)
    assert [j.job_id for j in listed.jobs] == ids[:10]
    assert listed.capped and "newest 10 jobs" in (listed.note or "")
    assert _list_requests(faulty_backend) == 2


async def test_status_is_asked_of_the_backend_and_unusable_ids_are_left_out(faulty_backend):
    faulty_backend.list_paging = "after"
    _add(faulty_backend, 3, "running")
    _add(faulty_backend, 0)
    faulty_backend.add_job(ScriptedJob("../etc", [("running", [], [])]))
    faulty_backend.add_job(ScriptedJob("job_done", [("succeeded", [], [])]))
    async with _client(faulty_backend) as client:
        listed = await client.list_all_jobs(status="running")
    assert [j.job_id for j in listed.jobs] == ["job_000", "job_001", "job_002"]
    assert "1 job with an unusable id left out" in (listed.note or "")


async def test_rows_carry_model_and_created(faulty_backend):
    faulty_backend.list_paging = "after"
    faulty_backend.add_job(ScriptedJob("job_a", [("running", [], [])], created_at="2026-01-01T12:00:00Z",
                                       model="Qwen/Qwen3-0.6B"))
    async with _client(faulty_backend) as client:
        listing = await read_jobs(client)
    assert listing.rows == [JobRow("job_a", "running", "Qwen/Qwen3-0.6B", "2026-01-01T12:00:00Z")]


def test_the_model_comes_from_the_payload_when_the_job_does_not_name_it():
    job = JobStatus.model_validate({"id": "job_b", "state": "RUNNING",
                                    "payload": {"data": {"base_model": "Qwen/Qwen3-4B"}}})
    assert row_of(job) == JobRow("job_b", "running", "Qwen/Qwen3-4B", None)
    odd = JobStatus.model_validate({"job_id": "job_c", "status": "ok", "model": "evil\x1b[31m"})
    assert row_of(odd).model == "evil\\x1b[31m"


ROWS = [
    JobRow("job_old", "succeeded", "Qwen/Qwen3-4B", "2026-01-01T10:00:00Z", 0.9),
    JobRow("job_mid", "running", "Qwen/Qwen3-0.6B", "2026-01-01T11:00:00Z", 0.4),
    JobRow("job_new", "failed", None, "2026-01-01T12:00:00Z", None),
    JobRow("job_queued", "queued", "llama", None, 0.5),
]


@pytest.mark.parametrize("by, expected", [
    ("created", ["job_new", "job_mid", "job_old", "job_queued"]),
    ("status", ["job_mid", "job_queued", "job_new", "job_old"]),
    ("score", ["job_old", "job_queued", "job_mid", "job_new"]),
    ("model", ["job_queued", "job_mid", "job_old", "job_new"]),
])
def test_sorting(by, expected):
    assert [r.job_id for r in sort_rows(ROWS, by)] == expected


def test_sort_cycles_through_every_order():
    orders = ["created"]
    for _ in range(4):
        orders.append(next_sort(orders[-1]))
    assert orders == ["created", "status", "score", "model", "created"]


@pytest.mark.parametrize("text, expected", [
    ("", ["job_old", "job_mid", "job_new", "job_queued"]),
    ("RUN", ["job_mid"]),
    ("qwen3-", ["job_old", "job_mid"]),
    ("job_ne", ["job_new"]),
    ("  ", ["job_old", "job_mid", "job_new", "job_queued"]),
    ("nothing", []),
])
def test_filtering_over_id_status_and_model(text, expected):
    assert [r.job_id for r in filter_rows(ROWS, text)] == expected


def test_the_headless_table_is_aligned_and_shows_unknowns_as_a_dash():
    lines = table_lines(sort_rows(ROWS, "created"))
    assert lines[0].split() == ["JOB", "STATUS", "MODEL", "CREATED", "SCORE"]
    assert lines[1].split() == ["job_new", "failed", "—", "2026-01-01", "12:00", "—"]
    assert lines[3].split()[-1] == "0.900"
    starts = {line.find(word) for line, word in zip(lines, ["STATUS", "failed", "running", "succeeded"], strict=False)}
    assert len(starts) == 1  # the status column starts at the same place on every line
    assert shown_created(None) == "—" and shown_created("2026-01-01T12:00:00Z", short=True) == "01-01 12:00"


def test_the_score_is_the_last_mean_score_never_a_loss():
    assert score_metric(["train.loss", "train.mean_score", "eval.mean_score"]) == "train.mean_score"
    assert score_metric(["eval.reward_mean", "train.loss"]) == "eval.reward_mean"
    assert score_metric(["train.loss"]) is None


async def test_scores_are_read_incrementally_and_finished_jobs_once(faulty_backend):
    running = faulty_backend.add_job(ScriptedJob("job_run", [
        ("running", [], [metric("train.mean_score", 0, 0.1), metric("train.loss", 0, 0.9)]),
        ("running", [], [metric("train.mean_score", 1, 0.3)]),
    ]))
    faulty_backend.add_job(ScriptedJob("job_done", [("succeeded", [], [metric("eval.mean_score", 4, 0.8)])]))
    faulty_backend.add_job(ScriptedJob("job_plain", [("succeeded", [], [metric("train.loss", 1, 0.5)])]))
    rows = [JobRow("job_run", "running"), JobRow("job_done", "succeeded"), JobRow("job_plain", "succeeded"),
            JobRow("job_gone", "failed")]
    book = ScoreBook()
    async with _client(faulty_backend) as client:
        await book.update(client, book.wanted(rows))
        assert [r.score for r in merge_scores(rows, book)] == [0.1, 0.8, None, None]
        assert book.failures == 1  # job_gone: 404, shown as unknown
        running.advance()
        running.advance()
        assert [r.job_id for r in book.wanted(rows)] == ["job_run"]  # the finished ones were read to their end
        await book.update(client, book.wanted(rows))
    assert book.score("job_run") == 0.3
    after_steps = [h for v, p, h, _ in faulty_backend.requests if p == "/api/rl/jobs/job_run/metrics"]
    assert len(after_steps) == 2


async def test_scores_are_read_four_jobs_at_a_time(faulty_backend):
    rows = [JobRow(f"job_{i}", "succeeded") for i in range(9)]
    for row in rows:
        faulty_backend.add_job(ScriptedJob(row.job_id, [("succeeded", [], [metric("train.mean_score", 1, 0.5)])]))
    book = ScoreBook()
    in_flight, most = 0, 0
    async with _client(faulty_backend) as client:
        real = client.metrics

        async def counted(*args, **kwargs):
            nonlocal in_flight, most
            in_flight += 1
            most = max(most, in_flight)
            try:
                await asyncio.sleep(0.02)
                return await real(*args, **kwargs)
            finally:
                in_flight -= 1

        client.metrics = counted
        await book.update(client, rows, concurrency=4)
    assert all(book.score(r.job_id) == 0.5 for r in rows)
    assert most == 4


WIDTHS = (28, 9, 12, 11, 5)


def test_columns_that_fit_are_kept_whole():
    assert fit_columns(78, WIDTHS) == dict(zip(("Job", "Status", "Model", "Created", "Score"), WIDTHS, strict=True))


def test_a_narrow_table_gives_up_the_model_then_cuts_the_id_and_always_keeps_the_score():
    at_60 = fit_columns(58, WIDTHS)
    assert list(at_60) == ["Job", "Status", "Created", "Score"]
    assert sum(w + 2 for w in at_60.values()) <= 58 and at_60["Job"] < 28
    at_40 = fit_columns(38, WIDTHS)
    assert list(at_40) == ["Job", "Status", "Score"] and sum(w + 2 for w in at_40.values()) <= 38
    assert list(fit_columns(10, WIDTHS)) == ["Job", "Status", "Score"]  # too narrow for all: nothing else goes


@pytest.mark.parametrize(("view", "position"), [
    ({"job_id": "j", "status": "queued", "queue_position": 3}, 3),
    ({"job_id": "j", "status": "QUEUED", "queue_position": 1}, 1),
    ({"job_id": "j", "status": "queued"}, None),  # the hosted service never sends it
    ({"job_id": "j", "status": "running", "queue_position": 2}, None),  # only while queued
    ({"job_id": "j", "status": "queued", "queue_position": True}, None),
    ({"job_id": "j", "status": "queued", "queue_position": "2"}, None),
    ({"job_id": "j", "status": "queued", "queue_position": 0}, None),
    ({"job_id": "j", "status": "queued", "queue_position": 10**12}, None),
    ({"job_id": "j", "status": "queued", "queue_position": 2.0}, None),
])
def test_a_queue_position_is_read_only_when_it_is_a_place_in_a_queue(view, position):
    status = JobStatus.model_validate(view)
    assert status.queue_position == position
    row = row_of(status)
    assert row.queue_position == position
    assert row.shown_status == (f"queued #{position}" if position else status.status)


def test_the_table_shows_a_queued_jobs_place_and_sorts_the_queue_in_order():
    rows = [JobRow("job_c", "queued", created_at="2026-01-01T12:03:00Z", queue_position=2),
            JobRow("job_b", "queued", created_at="2026-01-01T12:02:00Z", queue_position=1),
            JobRow("job_a", "running", created_at="2026-01-01T12:01:00Z")]
    lines = table_lines(sort_rows(rows, "status"))
    assert [line.split()[:3] for line in lines[1:]] == [["job_a", "running", "—"], ["job_b", "queued", "#1"],
                                                          ["job_c", "queued", "#2"]]
    assert lines[0].index("MODEL") > lines[2].index("#1")  # the column is as wide as "queued #1"
