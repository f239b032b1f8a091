"""What a chat request asks of the `lm` policy's answer: real token counts, finish_reason
"length", OpenAI's logprobs, sampling within the job's bounds (issue 39 item 2); a prompt bounded
by the model's context and [policy] max_prompt_tokens, and a generation that stops when its caller
goes away (issue 41 item 2). The tiny model, CPU, offline, seeded. docs/wire-contract.md#the-chat-answer."""

from __future__ import annotations

import math
import random
import threading
from pathlib import Path
from typing import Any

import pytest

from app.local.policies.base import ActCancelled, ActOptions, PolicyCannotAct, PolicySettings
from app.local.taskapps.press import PRESS_TOOL, SYSTEM_PROMPT, TOOL_CHOICE
from support import loopback_http

pytestmark = pytest.mark.usefixtures("trainer_extra")  # torch: the slow tier

JOB_MAX_TOKENS = 48


def _policy(model: Path, **options: Any) -> Any:
    from app.local.policies.lm.policy import LmPolicy

    return LmPolicy(PolicySettings(model=str(model), learning_rate=1e-2, seed=0, total_steps=2, batch_size=1,
                                   group_size=2, options={"trainer_mode": "full", "max_tokens": JOB_MAX_TOKENS,
                                                          **options}))


@pytest.fixture(scope="module")
def policy(tiny_model: Path) -> Any:
    return _policy(tiny_model)


def _messages(text: str = "Press B.") -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": text}]


def test_usage_counts_the_prompts_and_the_completions_tokens(policy: Any) -> None:
    act = policy.act(_messages(), [PRESS_TOOL], TOOL_CHOICE, "trace_j:usage", random.Random(0))
    rendered = policy._render(_messages(), [PRESS_TOOL])
    assert act.prompt_tokens == len(policy.tokenizer(rendered, add_special_tokens=False)["input_ids"]) > 20
    assert act.completion_tokens == act.memo.tokens > 1  # every token of the turn, the grammar's scaffold too
    assert act.finish_reason is None and act.logprobs is None


def test_max_tokens_cuts_the_turn_and_says_length_and_is_bounded_by_the_jobs(policy: Any) -> None:
    cut = policy.act(_messages(), [PRESS_TOOL], TOOL_CHOICE, "trace_j:cut", random.Random(0), ActOptions(max_tokens=3))
    assert (cut.completion_tokens, cut.finish_reason) == (3, "length")  # the scaffold alone is longer
    assert "tool_calls" not in cut.message
    free = policy.act(_messages(), None, None, "trace_j:free", random.Random(0), ActOptions(max_tokens=10_000))
    assert free.completion_tokens <= JOB_MAX_TOKENS


def test_temperature_0_is_greedy_and_logprobs_come_in_openais_shape(policy: Any) -> None:
    greedy = ActOptions(temperature=0, top_logprobs=3, max_tokens=8)
    one = policy.act(_messages(), None, None, "trace_j:g1", random.Random(1), greedy)
    two = policy.act(_messages(), None, None, "trace_j:g2", random.Random(2), greedy)
    assert one.message == two.message  # whatever the seed
    content = one.logprobs["content"]
    assert len(content) == one.completion_tokens
    for entry in content:
        assert set(entry) == {"token", "logprob", "bytes", "top_logprobs"}
        assert entry["logprob"] <= 0 and len(entry["top_logprobs"]) == 3
        assert entry["top_logprobs"][0]["token"] == entry["token"]  # greedy: the most probable
        assert math.isclose(entry["top_logprobs"][0]["logprob"], entry["logprob"], abs_tol=1e-5)
        assert entry["bytes"] == list(entry["token"].encode("utf-8"))
    sampled = policy.act(_messages(), None, None, "trace_j:s", random.Random(3), ActOptions(logprobs=True,
                                                                                           max_tokens=4))
    assert all(e["top_logprobs"] == [] for e in sampled.logprobs["content"])
    with pytest.raises(PolicyCannotAct, match="top_logprobs must be 0 to 20"):
        policy.act(_messages(), None, None, "trace_j:t", random.Random(3), ActOptions(top_logprobs=21))


def test_a_prompt_over_the_bound_is_refused_naming_both_lengths(tiny_model: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    bounded = _policy(tiny_model, max_prompt_tokens=64)
    with pytest.raises(PolicyCannotAct) as refused:
        bounded.act(_messages("Press B. " * 40), None, None, "trace_j:long", random.Random(0))
    words = str(refused.value)
    assert "bounded at 64 tokens ([policy] max_prompt_tokens)" in words
    prompt_tokens = int(words.split("the prompt is ")[1].split(" tokens")[0].replace(",", ""))
    assert prompt_tokens > 64
    # A text that cannot fit is refused without being tokenised (the model's context: 2,048 tokens).
    encoded: list[int] = []
    original = bounded._encode
    monkeypatch.setattr(bounded, "_encode", lambda text: encoded.append(len(text)) or original(text))
    with pytest.raises(PolicyCannotAct, match=r"the prompt is [\d,]+ characters, more than 64 tokens could hold"):
        bounded.act(_messages("x" * 3_000_000), None, None, "trace_j:huge", random.Random(0))
    assert encoded == []
    unbounded = _policy(tiny_model)
    with pytest.raises(PolicyCannotAct, match=r"bounded at 2,000 tokens \(the model's context of 2,048 tokens "
                                              r"less max_tokens 48\)"):
        unbounded.act(_messages("x" * 3_000_000), None, None, "trace_j:huge", random.Random(0))


def test_a_cancelled_generation_stops_between_tokens_and_keeps_nothing(policy: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    cancel, sampled = threading.Event(), []
    original = type(policy)._sample

    def sample(self: Any, row: Any, generator: Any, call: Any) -> int:
        sampled.append(1)
        if len(sampled) == 3:
            cancel.set()  # the route sets it when the client disconnects
        return original(self, row, generator, call)

    monkeypatch.setattr(type(policy), "_sample", sample)
    monkeypatch.setattr(policy, "eos_ids", [])  # the turn would run to max_tokens
    with pytest.raises(ActCancelled):
        policy.act(_messages(), None, None, "trace_j:gone", random.Random(0), ActOptions(cancel=cancel))
    assert len(sampled) == 3 < JOB_MAX_TOKENS
    sequence = policy.episodes["trace_j:gone"]
    assert len(sequence.ids) == sequence.prompt_len  # nothing of the cancelled turn was kept
    assert policy.lock.acquire(timeout=5)  # the model is free again
    policy.lock.release()


def test_calls_to_a_finished_job_at_once_load_it_once_and_break_no_other_job(
        tiny_model: Path, press_app: Any, tmp_path: Path) -> None:
    """Issue 41's probe: two calls at once to a finished lm job's chat endpoint answered 500
    ("Cannot copy out of meta tensor") and broke the backend's next lm job; one call at a time
    made a job loading beside it fail ("cannot import name 'GRPOConfig'"). The saved policy is
    loaded once and kept, and loads never run side by side."""

    from app.local.servers import start_backend
    from support.lm_fixtures import press_payload

    from ..conftest import API_KEY, ENV_KEY, api_client, create_job, wait_terminal

    with start_backend(api_key=API_KEY, db_path=tmp_path / "state.sqlite3", env_api_keys=[ENV_KEY],
                       policy_kind="lm") as backend, api_client(backend) as api:
        done = create_job(api, press_payload(press_app.url, tiny_model, "full", steps=1, lr=1e-2))
        assert wait_terminal(api, done, timeout=300)["status"] == "succeeded"
        answers: list[int] = []

        def call() -> None:
            answer = loopback_http.post(f"{backend.url}/v1/chat/completions", params={"cid": f"trace_{done}"},
                                        json={"messages": _messages(), "tools": [PRESS_TOOL],
                                              "tool_choice": TOOL_CHOICE, "max_tokens": 8},
                                        headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120)
            answers.append(answer.status_code)

        following = create_job(api, press_payload(press_app.url, tiny_model, "full", steps=1, lr=1e-2))
        callers = [threading.Thread(target=call) for _ in range(3)]
        for caller in callers:
            caller.start()
        for caller in callers:
            caller.join(180)
        assert answers == [200, 200, 200], answers
        assert wait_terminal(api, following, timeout=300)["status"] == "succeeded"
