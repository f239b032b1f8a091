"""The pieces under the servers: the store, the policy's state keys and update, payload checks."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.local.policies.base import Episode, group_advantages, latest_observation
from app.local.policies.tabular.policy import Decision, TabularPolicy, state_key
from app.local.state.store import IdempotencyConflict, Store
from app.local.taskapps import gridworld
from app.local.training.plan import InvalidJobPayload, plan_from_payload
from support.tiers import examples

from ..conftest import payload, small_config


def test_a_compact_state_line_is_the_key_verbatim():
    # No task is parsed: whatever a task app puts on its `state:` line is the state.
    assert state_key("x\nstate: pos=0,0 goal=4,4 blocked=up,left") == "state:pos=0,0 goal=4,4 blocked=up,left"
    assert state_key("Guess.\n  state:   lo=1   hi=8 ") == "state:lo=1 hi=8"
    assert state_key("a state: inline is not a line").startswith("text:")
    assert state_key("free text").startswith("text:") and state_key("free text") == state_key("free text")


def test_the_observation_is_the_latest_user_or_tool_message():
    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": "guess"},
                {"role": "assistant", "content": None, "tool_calls": []},
                {"role": "tool", "tool_call_id": "c1", "content": "3 is too low"}]
    assert latest_observation(messages) == "3 is too low"
    assert latest_observation(messages[:2]) == "guess"
    assert latest_observation([{"role": "user", "content": [{"type": "text", "text": "a"}]}]) == "a"


def test_the_gridworld_says_its_compact_state_itself():
    episode = gridworld.Episode(7, 12)
    lay = episode.layout
    assert lay.shortest >= 2 and lay.free(lay.start) and lay.free(lay.goal)
    text = episode.observation()["text"]
    (x, y), (gx, gy) = lay.start, lay.goal
    sign = {1: "+", -1: "-", 0: "0"}
    assert f"state: goal={sign[(gx > x) - (gx < x)]}x{sign[(gy > y) - (gy < y)]}y blocked_towards_goal=" in text


def test_the_gridworld_text_and_state_line_name_the_same_blocked_moves():
    """Issue 37: "Blocked moves here: up, left." beside `blocked=-` read as a contradiction; the
    text now names the blocked moves towards the goal as the state line does, in its words."""
    for seed in range(40):
        episode = gridworld.Episode(seed, 12)
        text = episode.observation()["text"]
        stuck = episode.compact_state().rsplit("blocked_towards_goal=", 1)[1]
        named = "none" if stuck == "-" else stuck.replace(",", ", ")
        assert f"(blocked towards the goal: {named})." in text, text
        assert f"blocked_towards_goal={stuck}" in text.splitlines()[-1]


def test_group_advantages_are_relative_to_the_group():
    group = [Episode([], s) for s in (1.0, 0.0, 0.0, 1.0)]
    group_advantages(group)
    assert [round(e.advantage, 3) for e in group] == [1.0, -1.0, -1.0, 1.0]
    same = [Episode([], 0.5) for _ in range(3)]
    group_advantages(same)
    assert all(e.advantage == 0 for e in same)


def test_an_update_moves_probability_towards_the_rewarded_action():
    policy = TabularPolicy()
    actions = ("up", "down", "left", "right")
    good = Episode([[Decision("s", actions, "right")]], 1.0, advantage=1.0)
    bad = Episode([[Decision("s", actions, "left")]], 0.0, advantage=-1.0)
    stats = policy.step([good, bad], lr=1.0)
    p = dict(zip(actions, policy.probs("s", actions), strict=True))
    assert p["right"] > 0.25 > p["left"]
    assert math.isclose(stats.entropy, math.log(4))
    rng = random.Random(1)
    assert policy.sample("unseen", actions, rng) in actions
    assert TabularPolicy.from_json(policy.to_json()).table == policy.table


def test_store_numbers_events_per_job_and_keeps_idempotency(tmp_path):
    store = Store(tmp_path / "s.sqlite3")
    a, created = store.create_job("job_a", {"x": 1}, "h1", "key-1")
    assert created and a["status"] == "queued"
    assert store.create_job("job_other", {"x": 1}, "h1", "key-1") == (store.get_job("job_a"), False)
    with pytest.raises(IdempotencyConflict):
        store.create_job("job_other", {"x": 2}, "h2", "key-1")
    store.create_job("job_b", {}, "h3", None)
    for i in range(3):
        store.append_event("job_a", "t", f"a{i}")
        store.append_event("job_b", "t", f"b{i}")
    assert [e["seq"] for e in store.events("job_a", since_seq=0, limit=10)] == [1, 2, 3]
    assert [e["message"] for e in store.events("job_b", since_seq=1, limit=1)] == ["b1"]
    assert store.set_running("job_a") and not store.set_running("job_a")
    assert store.finish_job("job_a", "succeeded", event_type="rl.job.completed", message="ok")["seq"] == 4
    assert store.finish_job("job_a", "failed", event_type="rl.job.failed", message="late") is None
    store.close()
    reopened = Store(tmp_path / "s.sqlite3")  # job_b was queued: the backend will resume it
    assert reopened.interrupted == ["job_b"]
    assert reopened.get_job("job_a")["status"] == "succeeded"
    assert reopened.get_job("job_b")["status"] == "queued"


def test_plan_reads_the_sizes():
    plan = plan_from_payload(payload("http://127.0.0.1:9/", small_config(batch_size=3)))
    assert (plan.task_url, plan.batch_size, plan.group_size, plan.total_steps) == ("http://127.0.0.1:9", 3, 2, 2)
    assert plan.eval_due(1) and plan.eval_due(2)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                     lambda inner: (st.lists(inner, max_size=3)
                                    | st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                     max_leaves=12)


@settings(max_examples=examples(150), deadline=None)
@given(body=_json, data=st.dictionaries(st.sampled_from(["endpoint_base_url", "config", "base_model", "model"]),
                                        _json, max_size=4))
def test_any_body_is_either_a_plan_or_a_clear_422(body, data):
    for candidate in (body, {"job_type": "rl", "data": data}):
        try:
            plan_from_payload(candidate)
        except InvalidJobPayload as exc:
            assert str(exc).startswith("Invalid RL job payload")


def test_every_bound_of_a_section_the_backend_reads_is_a_field_of_its_model():
    """The job body's models check every NumberBound of the sections they declare: a bound
    added to app.core.config.trainable without a field would be checked by the client only."""
    from app.core.config.trainable import NUMBER_BOUNDS
    from app.local.server.bodies import Compute, Evaluation, PolicySection, Rollout, Training

    sections = {"training": Training, "rollout": Rollout, "evaluation": Evaluation, "compute": Compute,
                "policy": PolicySection}
    for bound in NUMBER_BOUNDS:
        section, key = bound.location.split(".")
        assert key in sections[section].model_fields, bound.location


def test_a_job_body_names_every_problem_with_its_path():
    body = payload("http://127.0.0.1:9", small_config())  # then broken past the client's own checks
    body["job_type"] = "sft"
    body["data"].update(endpoint_base_url="placeholder", base_model=None, model=None)
    body["data"]["config"]["training"].update(batch_size=0, group_size="4")
    with pytest.raises(InvalidJobPayload) as refused:
        plan_from_payload(body)
    detail = str(refused.value)
    assert detail.startswith("Invalid RL job payload: ")
    for words in ("job_type", "data.endpoint_base_url", "data.config.training.batch_size: 0 is out of range",
                  "data.config.training.group_size: must be a whole number", "data.base_model or data.model"):
        assert words in detail, (words, detail)


def test_a_flat_step_is_called_solved_only_when_the_score_rose_to_it() -> None:
    """All rollouts scoring alike teach nothing: after a rise that is a solved task (a harder one
    helps), at the start or after a fall it points at the task app."""
    from types import SimpleNamespace

    from app.local.training.runner import JobRunner

    def warning(first: float | None, score: float) -> str:
        run = SimpleNamespace(flat_steps=0, first_score=first)
        said = JobRunner._flat_warning(None, run, 4, [Episode([], score) for _ in range(4)])  # type: ignore[arg-type]
        assert said is not None and "nothing was learned" in said["message"]
        return str(said["message"])

    assert "solves the task" in warning(0.1, 1.0)
    assert "rejecting the policy's actions" in warning(0.1, 0.0)
    assert "rejecting the policy's actions" in warning(None, 1.0)


@pytest.mark.parametrize(("omp", "expected"), [(None, "all"), ("1", 1), ("64", "all"), ("zero", "all"), ("0", "all")])
def test_torch_threads_are_the_cores_or_fewer_when_omp_num_threads_says_so(monkeypatch, omp, expected):
    import os

    from app.local.policies.lm.model import cpu_threads

    if omp is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", omp)
    assert cpu_threads() == (len(os.sched_getaffinity(0)) if expected == "all" else expected)
