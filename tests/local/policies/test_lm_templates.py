"""Every turn of a multi-turn episode is trained, whichever TRL chat template the model speaks
(issue 39 item 1; docs/embedded-policy.md#tool-call-arguments-and-the-templates-scaffold).

A matrix over TRL's templates (trl/chat_templates/): each with the tiny model's tokenizer carrying
that template's chat tokens (app/local/policies/lm/tiny_model.py), a real two-turn episode through
the policy's acting path, the task app echoing the wire answer (OpenAI's JSON-string arguments) as
task apps do. CPU, offline, seeded; needs the trainer extra."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from app.local.policies.base import Episode, PolicySettings
from app.local.servers import start_backend
from app.local.taskapps.press import PRESS_TOOL, SYSTEM_PROMPT, TOOL_CHOICE
from support.lm_fixtures import press_payload

from ..conftest import API_KEY, ENV_KEY, api_client, create_job, events_of, wait_terminal
from ..misbehaving_taskapps import history_editing_taskapp

pytestmark = pytest.mark.usefixtures("trainer_extra")  # torch: the slow tier; fails, never skips, without it

ACTING = ("qwen2_5", "qwen3", "qwen3_instruct_2507", "llama3_1", "llama3_2")  # render tools and tool calls
REFUSED = {"phi3_5": "cannot render a tool-calling conversation",  # no tools, no tool calls, no tool role
           "gemma3": "cannot render a tool-calling conversation",
           # <parameter=label>A</parameter>: not a JSON object the grammar generates
           "qwen3_5_nothink": "does not render a tool call as its name followed by its arguments as a JSON object"}


@pytest.fixture(scope="module")
def template_models(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> dict[str, Path]:
    """The tiny model for each template of the matrix (its tokenizer with that template's tokens)."""
    from app.local.policies.lm.tiny_model import build_tiny_qwen3

    root = tmp_path_factory.mktemp("templates")
    return {name: build_tiny_qwen3(root / name, template=name) for name in (*ACTING, *REFUSED)}


def _settings(model: Path, **options: Any) -> PolicySettings:
    return PolicySettings(model=str(model), learning_rate=1e-2, seed=0, total_steps=2, batch_size=1, group_size=2,
                          options={"trainer_mode": "full", **options})


def _two_turns(policy: Any, cid: str, rng: random.Random) -> list[Any]:
    """A press episode of two turns, the history built as a task app builds it from the wire answer."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM_PROMPT},
                                      {"role": "user", "content": "Press C."}]
    acts = []
    for said in ("Right. Press D.", "Right."):
        act = policy.act(messages, [PRESS_TOOL], TOOL_CHOICE, cid, rng)
        acts.append(act)
        calls = act.message["tool_calls"]
        assert isinstance(calls[0]["function"]["arguments"], str)  # OpenAI's wire format: a JSON string
        json.loads(calls[0]["function"]["arguments"])
        messages = [*messages, {"role": "assistant", "content": None, "tool_calls": calls},
                    {"role": "tool", "tool_call_id": act.call_id, "content": said}]
    return acts


@pytest.mark.parametrize("template", ACTING)
def test_a_two_turn_episode_is_one_sequence_whose_both_turns_carry_loss(template_models: dict[str, Path],
                                                                        template: str) -> None:
    from app.local.policies.lm.policy import LmPolicy

    policy = LmPolicy(_settings(template_models[template]))
    assert "could not be learned" not in policy.template_kind, policy.template_kind
    acts = _two_turns(policy, "trace_j:r1", random.Random(0))
    first, second = (a.memo for a in acts)
    assert policy.restarts == 0 and first.sequence is second.sequence
    batch = policy._batch([[Episode([first, second], 1.0)]])
    assert batch.stats["episode_restarts"] == 0.0
    prompt_len = first.sequence.prompt_len
    completion, mask = batch.samples["completion_ids"][0], batch.samples["env_mask"][0]
    for memo in (first, second):  # each turn's generated tokens are in the completion, the model's choices masked 1
        span = slice(memo.end - memo.tokens - prompt_len, memo.end - prompt_len)
        assert completion[span] == first.sequence.ids[memo.end - memo.tokens:memo.end]
        chosen = first.sequence.mask[memo.end - memo.tokens:memo.end]
        assert mask[span] == chosen and sum(chosen) >= 1, (template, chosen)
    assert len(completion) == second.end - prompt_len


@pytest.mark.parametrize("template", sorted(REFUSED))
def test_a_template_that_cannot_act_in_a_tool_calling_episode_is_refused_saying_why(
        template_models: dict[str, Path], template: str) -> None:
    from app.local.policies.lm.chat_templates import judge_template
    from app.local.policies.lm.model import ModelUnavailable, load_tokenizer
    from app.local.policies.lm.policy import LmPolicy

    verdict = judge_template(load_tokenizer(template_models[template]), template, None)
    assert verdict.problem is not None and REFUSED[template] in verdict.problem
    with pytest.raises(ModelUnavailable, match=REFUSED[template]):
        LmPolicy(_settings(template_models[template]))


LOOP_LAST = (  # ChatML whose assistant turn renders differently once it is not the last message
    "{% if tools %}{{ tools | tojson }}{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.tool_calls %}<tool_call>\n"
    '{"name": "{{ m.tool_calls[0].function.name }}", "arguments": {{ m.tool_calls[0].function.arguments | tojson }}}'
    "\n</tool_call>{% if not loop.last %} (done){% endif %}{% else %}{{ m.content }}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% endif %}")


def test_the_model_check_refuses_a_template_whose_episodes_would_restart(tiny_model: Path, tmp_path: Path) -> None:
    from app.local.policies.lm.chat_templates import judge_template
    from app.local.policies.lm.model import load_tokenizer

    template = tmp_path / "loop_last.jinja"
    template.write_text(LOOP_LAST, encoding="utf-8")
    verdict = judge_template(load_tokenizer(tiny_model), "tiny", str(template))
    assert verdict.problem is not None and "is not prefix-preserving in a tool-calling episode" in verdict.problem
    assert "' (done)" in verdict.problem  # where the texts part: the render adds what was never generated


def test_restarts_are_counted_per_step_and_the_first_is_a_warning_once(tiny_model: Path) -> None:
    from app.local.policies.lm.policy import LmPolicy

    policy = LmPolicy(_settings(tiny_model))
    rng = random.Random(1)
    try:
        acts = _two_turns(policy, "trace_j:a", rng)
        edited = [{"role": "system", "content": "Press what you are told."}, {"role": "user", "content": "Press C."},
                  acts[0].message, {"role": "tool", "tool_call_id": acts[0].call_id, "content": "Right."}]
        again = policy.act(edited, [PRESS_TOOL], TOOL_CHOICE, "trace_j:a", rng)  # the history changed: a restart
        assert policy.restarts == 1
        other = policy.act([{"role": "user", "content": "Press A."}], [PRESS_TOOL], TOOL_CHOICE, "trace_j:b", rng)
        stats = policy.update([[Episode([*[a.memo for a in acts], again.memo], 1.0), Episode([other.memo], 0.0)]])
        assert stats.extra["episode_restarts"] == 1.0
        [warning] = stats.events
        assert warning["type"] == "rl.train.policy.warning" and warning["level"] == "warning"
        assert "An episode restarted" in warning["message"] and "training variant" in warning["message"]
        assert warning["data"]["part_generated"].startswith("the button the user names")  # after "Press "
        assert warning["data"]["part_rendered"].startswith("what you are told")
        group = [Episode([policy.act([{"role": "user", "content": "Press B."}], [PRESS_TOOL], TOOL_CHOICE,
                                     f"trace_j:c{i}", rng).memo], float(i)) for i in range(2)]
        stats = policy.update([group])
        assert stats.extra["episode_restarts"] == 0.0 and stats.events == []  # this step's count; warned once
    finally:
        policy.close()


def _job(model: Path, task_url: str, tmp_path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    with start_backend(api_key=API_KEY, db_path=tmp_path / "state.sqlite3", env_api_keys=[ENV_KEY],
                       policy_kind="lm") as backend, api_client(backend) as api:
        job_id = create_job(api, press_payload(task_url, model, "full", steps=2, lr=1e-2))
        job = wait_terminal(api, job_id, timeout=600)
        events = events_of(api, job_id)
    assert job["status"] == "succeeded", (job, [e["message"] for e in events][-5:])
    return job, events


def test_a_qwen2_5_job_trains_both_turns_of_every_press_episode(template_models: dict[str, Path], press_app: Any,
                                                                tmp_path: Path) -> None:
    _, events = _job(template_models["qwen2_5"], press_app.url, tmp_path)
    steps = [e["data"] for e in events if e["type"] == "rl.train.step"]
    assert len(steps) == 2 and all(s["episode_restarts"] == 0 for s in steps), steps
    assert all(s["model_turns"] == 32 for s in steps)  # 16 episodes of 2 turns each
    assert not [e for e in events if "restarted" in e["message"]]


def test_a_job_whose_task_app_edits_its_history_says_so_once_and_counts_each_step(tiny_model: Path,
                                                                                  tmp_path: Path) -> None:
    with history_editing_taskapp([ENV_KEY]) as app:
        _, events = _job(tiny_model, app.url, tmp_path)
    steps = [e["data"] for e in events if e["type"] == "rl.train.step"]
    assert [s["episode_restarts"] for s in steps] == [16, 16]  # each step's own, not a running total
    [warning] = [e for e in events if e["type"] == "rl.train.policy.warning" and "restarted" in e["message"]]
    assert warning["level"] == "warning" and "own" in warning["data"]["chat_template"]
    assert warning["data"]["part_rendered"].startswith(" again.")  # "Pick a number" is common to both
