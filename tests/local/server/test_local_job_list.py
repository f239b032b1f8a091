"""The embedded backend's job list pages with ``after`` (docs/wire-contract.md#job-list)."""

from __future__ import annotations

import pytest

from support import loopback_http
from support.seeded_backend import API_KEY, start_seeded_backend


@pytest.fixture
def seeded(tmp_path):
    server, ids = start_seeded_backend(tmp_path / "state.sqlite3", 7)
    with server, loopback_http.client(base_url=server.url + "/api", headers={"Authorization": f"Bearer {API_KEY}"},
                                      timeout=15.0) as api:
        yield api, ids


def test_after_pages_through_every_job_newest_first(seeded):
    api, ids = seeded
    seen, after = [], None
    for _ in range(10):
        params = {"limit": 3, **({"after": after} if after else {})}
        page = api.get("/rl/jobs", params=params)
        assert page.status_code == 200, page.text
        jobs = [j["job_id"] for j in page.json()["jobs"]]
        seen += jobs
        if len(jobs) < 3:
            break
        after = jobs[-1]
    assert seen == ids  # newest first, each job once


def test_after_combines_with_status_and_is_mirrored_under_learning(seeded):
    api, ids = seeded
    failed = [j["job_id"] for j in api.get("/rl/jobs", params={"status": "failed"}).json()["jobs"]]
    assert failed == ["job_seed004", "job_seed001"]
    later = api.get("/learning/jobs", params={"status": "failed", "after": "job_seed004"}).json()["jobs"]
    assert [j["job_id"] for j in later] == ["job_seed001"]
    assert api.get("/rl/jobs", params={"after": ids[-1]}).json() == {"jobs": []}  # after the oldest: nothing


@pytest.mark.parametrize("after", ["job_nope", "../x", "%00", "' OR 1=1 --"])
def test_an_unknown_after_is_a_json_400(seeded, after):
    api, _ = seeded
    answer = api.get("/rl/jobs", params={"after": after})
    assert answer.status_code == 400
    assert "after must be the job_id" in answer.json()["detail"]


def test_an_overlong_or_empty_after_is_refused_as_json(seeded):
    api, _ = seeded
    for after in ("x" * 129, ""):
        answer = api.get("/rl/jobs", params={"after": after})
        assert 400 <= answer.status_code < 500 and "detail" in answer.json()
