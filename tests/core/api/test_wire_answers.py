"""The client's reading of the answer models (app/core/api/wire_answers.py): what the hosted
service or an older backend sends is read as before, as docs/wire-contract.md#tolerant-reading says."""

from __future__ import annotations

from app.core.api.wire import JobStatus
from app.core.api.wire_answers import JobAction, JobPage, MetricsPage, ModelCheckAnswer, RolloutPage


def test_a_job_page_in_any_of_its_forms() -> None:
    for body in ([{"id": "job_a"}], {"data": {"jobs": [{"job_id": "job_a"}]}}, {"jobs": [{"job_id": "job_a"}, 3]}):
        assert [job.job_id for job in JobPage.model_validate(body).jobs] == ["job_a"]
    last = JobPage.model_validate({"jobs": [], "next_cursor": None})
    assert "next_cursor" in last.model_fields_set and last.next_cursor is None  # said: no more
    assert "next_cursor" not in JobPage.model_validate({"jobs": []}).model_fields_set  # not said
    odd = JobPage.model_validate({"jobs": [], "next_cursor": True, "has_more": "yes"})
    assert (odd.next_cursor, odd.has_more, "next_cursor" in odd.model_fields_set) == (None, None, True)


def test_a_job_keeps_the_hosted_services_fields_and_believes_only_a_queued_position() -> None:
    job = JobStatus.model_validate({"id": "job_a", "state": "QUEUED", "queue_position": 2, "model": 7, "region": "eu"})
    assert (job.job_id, job.status, job.queue_position, job.model) == ("job_a", "queued", 2, None)
    assert job.model_extra == {"id": "job_a", "state": "QUEUED", "region": "eu"}
    assert JobStatus.model_validate({"status": "running", "queue_position": 2}).queue_position is None
    assert JobStatus.model_validate({"status": "queued", "queue_position": True}).queue_position is None


def test_other_pages_and_answers() -> None:
    assert [p.value for p in MetricsPage.model_validate({"metrics": [{"name": "a", "value": "0.5"}]}).points] == [0.5]
    assert JobAction.model_validate("cancelled").model_dump() == {"job_id": None, "status": None, "message": None}
    page = RolloutPage.model_validate({"rollouts": [1, {"rollout_id": "r"}], "next_after": 5})
    assert page.rollouts == [] and page.next_after is None
    assert ModelCheckAnswer.read({"trains": "lm"}) is None  # no verdict
    read = ModelCheckAnswer.read({"ok": False, "bytes": True, "problems": [{"message": "x" * 3000}] * 30 + ["junk"]})
    assert read is not None and read.bytes is None and len(read.problems) == 20
    assert read.problems[0].message == "x" * 3000 and read.path is None
    assert read.finished is True  # an answer that does not say: finished
    unfinished = ModelCheckAnswer.read({"ok": True, "finished": False})
    assert unfinished is not None and unfinished.finished is False
