"""app/core/runs/rollouts.py: tolerant reading of what a backend says about a job's rollouts
(docs/wire-contract.md#rollouts), on a plain HTTP server on a loopback port. Hypothesis sends
odd shapes; a bounded number of examples each."""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.core.api.client import SynthClient
from app.core.api.errors import BadResponseError, NotFoundError
from app.core.errors import ExitCode
from app.core.runs.rollouts import (
    STALE_PAGES,
    RolloutsNotServed,
    action_text,
    get_rollout,
    list_rollouts,
    rollout_from,
    rollout_steps,
    summary_from,
    turn_from,
)
from support.tiers import examples

KEY = "sk_test_rollouts_core_0123456789"
BOUNDED = settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20)
good_summary = st.fixed_dictionaries({
    "rollout_id": st.text(min_size=1, max_size=12), "step": st.integers(0, 50),
    "phase": st.sampled_from(["train", "eval"]), "index": st.integers(0, 64), "seed": st.none() | st.integers(),
    "reward": st.floats(-1, 1), "turns": st.integers(0, 12)})
fields = ("rollout_id", "step", "phase", "index", "seed", "reward", "turns", "observation", "images", "tools", "tool",
          "arguments", "applied", "done", "trajectory", "turns_cut", "images_omitted", "action")
odd_items = st.dictionaries(st.sampled_from(fields), json_values, max_size=8) | json_values


class PagedBackend:
    """GET /api/rl/jobs/job_x (the job) and /api/rl/jobs/job_x/rollouts (`pages`, each a body,
    chosen by the `after` it is asked with: page n answers after=str(n))."""

    def __init__(self) -> None:
        self.pages: list[Any] = []
        self.rollout_status = 200
        self.ignore_after = False
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                owner.requests += 1
                parts = urlsplit(self.path)
                after = parse_qs(parts.query).get("after", ["0"])[0]
                if parts.path == "/api/rl/jobs/job_x":
                    return self.send(200, {"job_id": "job_x", "status": "succeeded"})
                if parts.path == "/api/rl/jobs/job_x/rollouts" and owner.rollout_status == 200:
                    index = 0 if owner.ignore_after or not after.isdigit() else int(after)
                    return self.send(200, owner.pages[index] if index < len(owner.pages) else {"rollouts": []})
                if parts.path == "/api/rl/jobs/job_x/rollouts":
                    return self.send(owner.rollout_status, {"detail": "Method Not Allowed"})
                if parts.path.startswith("/api/rl/jobs/job_x/rollouts/"):
                    return self.send(200, owner.pages[0])
                self.send(404, {"detail": "Not Found"})

            def send(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def paged() -> Iterator[PagedBackend]:
    server = PagedBackend()
    yield server
    server.close()


def listed(server: PagedBackend, **kwargs: Any) -> Any:
    async def go() -> Any:
        async with SynthClient(server.url, KEY, retries=0) as client:
            return await list_rollouts(client, "job_x", **kwargs)

    return asyncio.run(go())


@given(item=odd_items)
@BOUNDED
def test_any_item_is_a_summary_or_skipped(item):
    summary = summary_from(item)
    if summary is not None:
        assert summary.rollout_id and summary.step >= 0 and math.isfinite(summary.reward) and summary.turns >= 0
    turn = turn_from(item, 3)
    if turn is not None:
        assert isinstance(turn.action, str) and all(isinstance(i, str) for i in turn.images)
        assert turn.reward is None or math.isfinite(turn.reward)
    try:
        rollout = rollout_from(item, "r1")
    except BadResponseError:
        return
    assert rollout.summary.rollout_id and len(rollout.turns) <= 4


@given(pages=st.lists(st.lists(good_summary | odd_items, max_size=6), min_size=1, max_size=STALE_PAGES),
       ignore_after=st.booleans())
@BOUNDED
def test_every_page_is_read_best_first_skipping_what_is_odd(paged, pages, ignore_after):
    paged.pages = [{"rollouts": items, "next_after": str(n + 1) if n + 1 < len(pages) else None}
                   for n, items in enumerate(pages)]
    paged.ignore_after = ignore_after
    got = listed(paged)
    rewards = [s.reward for s in got]
    assert rewards == sorted(rewards, reverse=True)
    assert len({s.rollout_id for s in got}) == len(got)
    usable = {s.rollout_id for page in (pages[:1] if ignore_after else pages) for i in page
              if (s := summary_from(i)) is not None}
    assert {s.rollout_id for s in got} == usable  # every usable one of the pages it could read


def test_odd_page_shapes_are_empty_lists(paged):
    for body in ([], "text", {"rollouts": "no"}, {"rollouts": [1, None, {}]}, {"next_after": "1"}):
        paged.pages, paged.ignore_after = [body], False
        assert listed(paged) == []
    paged.pages = [None]  # JSON null is no answer: the client's typed error, exit 5
    with pytest.raises(BadResponseError):
        listed(paged)
    # A backend that ignores `after` and names the same cursor again: the listing stops there.
    paged.pages, paged.ignore_after, paged.requests = [{"rollouts": [], "next_after": "x"}], True, 0
    assert listed(paged) == [] and paged.requests <= 2
    paged.pages = [[{"rollout_id": "a", "step": 1, "reward": 0.5}]]  # a bare list
    assert [s.rollout_id for s in listed(paged)] == ["a"]


def test_a_backend_without_the_route_is_not_served_exit_5(paged):
    for status in (404, 405):
        paged.rollout_status = status
        with pytest.raises(RolloutsNotServed) as caught:
            listed(paged)
        assert caught.value.exit_code == ExitCode.BACKEND and "does not serve" in str(caught.value)
    paged.rollout_status = 200


def test_an_unknown_job_is_not_found(paged):
    async def go() -> None:
        async with SynthClient(paged.url, KEY, retries=0) as client:
            await list_rollouts(client, "job_other")

    with pytest.raises(NotFoundError):
        asyncio.run(go())


def test_one_rollout_reads_tolerantly(paged):
    paged.pages = [{"rollout_id": "r9", "step": 3, "phase": "eval", "index": 2, "seed": 7, "reward": 0.9,
                    "turns": 2, "turns_cut": 1, "trajectory": [
                        {"index": 1, "observation": "at 0,0", "images": ["data:image/png;base64,AA", 5],
                         "tools": ["move", None], "tool": "move", "arguments": {"direction": "up"},
                         "applied": "action=\"up\"", "reward": 0, "done": False},
                        "junk",
                        {"observation": 12, "arguments": '{"content": "hi"}', "reward": float("inf"), "done": 1}]}]

    async def go() -> Any:
        async with SynthClient(paged.url, KEY, retries=0) as client:
            return await get_rollout(client, "job_x", "r9")

    rollout = asyncio.run(go())
    assert rollout.summary.phase == "eval" and rollout.summary.turns == 2 and rollout.turns_cut == 1
    first, last = rollout.turns
    assert first.action == 'move(direction="up")' and first.images == ("data:image/png;base64,AA",)
    assert first.tools == ("move",) and first.reward == 0 and not first.done
    assert last.action == "hi" and last.reward is None and last.done is False and last.observation == "12"


def test_action_text_and_steps():
    assert action_text("move", {"direction": "up"}) == 'move(direction="up")'
    assert action_text("interact_many", '{"actions": ["a", "b"]}') == 'interact_many(actions=["a", "b"])'
    assert action_text("move", "not json") == "move(not json)"
    assert action_text(None, {"content": "left"}) == "left"
    assert action_text(None, None) == ""
    summaries = [summary_from({"rollout_id": str(i), "step": s, "reward": 0.1}) for i, s in enumerate([5, 1, 5, 3])]
    assert rollout_steps([s for s in summaries if s is not None]) == [1, 3, 5]
