"""The `lm` policy's generation loop (app/local/policies/lm/batching.py, issue 40 item 1): the
turns of concurrent episodes decoded together, each episode's KV cache kept across its turns.
A seeded turn through the loop is the batch-1 path's turn (tests/support/lm_reference.py) within
float tolerance, alone or beside others; a turn joins a batch that is decoding; a cancel ends its
row only. The tiny model, CPU, offline, seeded. docs/embedded-policy.md#batched-generation."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from app.local.policies.base import ActCancelled, ActOptions, Episode, PolicySettings
from app.local.taskapps.press import PRESS_TOOL, SYSTEM_PROMPT, TOOL_CHOICE
from support.pilot_waits import poll_until

pytestmark = pytest.mark.usefixtures("trainer_extra")  # torch: the slow tier

MAX_TOKENS = 48
TOLERANCE = 1e-4  # logprobs: a batched forward pass sums in another order than a batch-1 one


def _policy(model: Path) -> Any:
    from app.local.policies.lm.policy import LmPolicy

    return LmPolicy(PolicySettings(model=str(model), learning_rate=1e-2, seed=0, total_steps=2, batch_size=1,
                                   group_size=2, options={"trainer_mode": "full", "max_tokens": MAX_TOKENS}))


@pytest.fixture
def policy(tiny_model: Path) -> Iterator[Any]:
    made = _policy(tiny_model)
    yield made
    made.close()


def _messages(label: str, padding: int = 0) -> list[dict[str, Any]]:
    """A press request; `padding` words make prompts of different lengths."""
    return [{"role": "system", "content": SYSTEM_PROMPT + " Be quick." * padding},
            {"role": "user", "content": f"Press {label}."}]


def _seed_of(rng_seed: int) -> int:
    """The seed `act` draws for a training turn from random.Random(rng_seed)."""
    return random.Random(rng_seed).getrandbits(63)


def _assert_batch_one(policy: Any, act: Any, grammar: bool, seed: int, start: int | None = None) -> None:
    """The turn `act` recorded equals the batch-1 path's from the same prompt and seed."""
    from app.local.policies.lm.acting import _Call
    from support.lm_reference import batch_one_turn

    memo = act.memo
    sequence = memo.sequence
    begin = memo.end - memo.tokens
    compiled = policy._grammar([PRESS_TOOL])[0] if grammar else None
    ids, logprobs, chosen, entropy = batch_one_turn(policy, sequence.ids[:begin], compiled, seed,
                                                    _Call(policy.temperature, policy.top_p, MAX_TOKENS))
    assert sequence.ids[begin:memo.end] == ids
    assert sequence.mask[begin:memo.end] == chosen
    assert sequence.logprobs[begin:memo.end] == pytest.approx(logprobs, abs=TOLERANCE)
    assert memo.entropy_sum == pytest.approx(entropy, abs=TOLERANCE)


@contextmanager
def _all_queued(policy: Any, count: int) -> Iterator[None]:
    """The model held (the policy's lock) until `count` turns are queued: they meet in the batch."""
    with policy.lock:
        yield
        poll_until(lambda: policy.batcher.queued >= count, timeout=60)


def _settled(policy: Any) -> None:
    """Waits until the loop's batch is empty: a turn's caller is answered before the loop keeps
    its cache, and its row leaves the batch after (batching.py `_leave`)."""
    poll_until(lambda: not policy.batcher.rows, timeout=60)


def _in_threads(calls: list[Callable[[], Any]]) -> list[Any]:
    results: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            results[index] = calls[index]()
        except BaseException as exc:  # noqa: BLE001 - checked by the test
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    return results


def _widest_batch(policy: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records the batch's row count at each forward pass of the loop."""
    widths: list[int] = []
    batcher_type = type(policy.batcher)
    original = batcher_type._forward

    def forward(self: Any) -> None:
        widths.append(len(self.rows))
        original(self)

    monkeypatch.setattr(batcher_type, "_forward", forward)
    return widths


def _forced_first(act: Any) -> int:
    """How many tokens the grammar forced at the start of the turn (fed with the prompt's last)."""
    memo = act.memo
    chosen = memo.sequence.mask[memo.end - memo.tokens:memo.end]
    return chosen.index(1) if 1 in chosen else len(chosen)


def _passes_fed(policy: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Records each forward pass of the model as (rows, tokens a row) it is fed."""
    fed: list[tuple[int, int]] = []
    model = policy.model
    original = model.forward

    def counting(*args: Any, **kwargs: Any) -> Any:
        rows, width = kwargs["input_ids"].shape
        fed.append((int(rows), int(width)))
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counting)
    return fed


def _logits_columns(policy: Any, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records, for each forward pass of the model, how many fed columns it computed logits for."""
    columns: list[int] = []
    model = policy.model
    original = model.forward

    def counting(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        columns.append(int(out.logits.shape[1]))
        return out

    monkeypatch.setattr(model, "forward", counting)
    return columns


@pytest.mark.parametrize("grammar", [True, False], ids=["tool-call grammar", "free"])
def test_a_seeded_turn_alone_is_the_batch_one_turn(policy: Any, grammar: bool) -> None:
    tools, choice = ([PRESS_TOOL], TOOL_CHOICE) if grammar else (None, None)
    act = policy.act(_messages("C"), tools, choice, "trace_j:alone", random.Random(5))
    _assert_batch_one(policy, act, grammar, _seed_of(5))


def test_concurrent_turns_of_different_lengths_are_each_their_batch_one_turn(
        policy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    widths = _widest_batch(policy, monkeypatch)
    count = 6

    def turn(i: int) -> Callable[[], Any]:
        grammar = i % 2 == 0
        tools, choice = ([PRESS_TOOL], TOOL_CHOICE) if grammar else (None, None)
        return lambda: policy.act(_messages("ABCD"[i % 4], padding=3 * i), tools, choice, f"trace_j:c{i}",
                                  random.Random(10 + i))

    with _all_queued(policy, count):
        results: list[Any] = []
        runner = threading.Thread(target=lambda: results.extend(_in_threads([turn(i) for i in range(count)])))
        runner.start()
    runner.join(timeout=300)
    assert max(widths) == count  # every turn was in the batch at once
    lengths = {len(r.memo.sequence.ids[:r.memo.end - r.memo.tokens]) for r in results}
    assert len(lengths) == count  # prompts of different lengths: padded on the left
    for i, act in enumerate(results):
        _assert_batch_one(policy, act, i % 2 == 0, _seed_of(10 + i))


def test_a_second_turn_prefills_only_the_new_tokens_on_the_kept_cache(policy: Any,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    fed = _passes_fed(policy, monkeypatch)
    columns = _logits_columns(policy, monkeypatch)
    rng = random.Random(3)
    messages = _messages("B")
    first = policy.act(messages, [PRESS_TOOL], TOOL_CHOICE, "trace_j:two", rng)
    prompt_one = first.memo.end - first.memo.tokens
    # the first turn prefills its prompt but the last token, fed with the grammar's first run
    assert fed[:2] == [(1, prompt_one - 1), (1, 1 + _forced_first(first))]
    messages = [*messages, first.message, {"role": "tool", "tool_call_id": first.call_id, "content": "Right."}]
    fed.clear()
    columns.clear()
    state = rng.getstate()
    second = policy.act(messages, [PRESS_TOOL], TOOL_CHOICE, "trace_j:two", rng)
    prompt_two = second.memo.end - second.memo.tokens
    # the kept cache holds every token fed so far: the prompt and the first completion but its
    # last token (an end of turn, never fed); the task app's text and that token are fed, with
    # the grammar's first run
    assert fed[0] == (1, prompt_two - (first.memo.end - 1) + _forced_first(second))
    assert fed[0][1] - _forced_first(second) < prompt_two // 2
    # logits only from the prompt's last token on (it predicts the forced run's first token): the
    # task app's text before it needs none
    assert columns[0] == 1 + _forced_first(second) < fed[0][1]
    replay = random.Random()
    replay.setstate(state)
    _assert_batch_one(policy, second, True, replay.getrandbits(63))  # the same as a full re-prefill


def test_a_new_episode_starts_on_the_prefix_another_episode_kept(policy: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    fed = _passes_fed(policy, monkeypatch)
    first = policy.act(_messages("B"), [PRESS_TOOL], TOOL_CHOICE, "trace_j:p0", random.Random(6))
    fed.clear()
    other = policy.act(_messages("C"), [PRESS_TOOL], TOOL_CHOICE, "trace_j:p1", random.Random(7))
    prompt = other.memo.sequence.ids[:other.memo.sequence.prompt_len]
    shared = 0
    while prompt[shared] == first.memo.sequence.ids[shared]:
        shared += 1
    # only what follows the shared prefix, with the grammar's first run
    assert shared >= 16 and fed[0] == (1, len(prompt) - shared + _forced_first(other))
    _assert_batch_one(policy, other, True, _seed_of(7))


def test_the_kept_caches_are_dropped_when_an_update_changes_the_weights(policy: Any) -> None:
    rng = random.Random(2)
    group = []
    for i, score in enumerate((0.0, 1.0)):
        act = policy.act(_messages("B"), [PRESS_TOOL], TOOL_CHOICE, f"trace_j:u{i}", rng)
        group.append(Episode([act.memo], score))
    policy.act(_messages("A"), [PRESS_TOOL], TOOL_CHOICE, "trace_j:other", rng)
    _settled(policy)
    assert len(policy.batcher.kept) == 3
    policy.update([group])
    messages = _messages("A")
    other = policy.batcher.kept["trace_j:other"]
    second = policy.act([*messages, {"role": "user", "content": "Again."}], [PRESS_TOOL], TOOL_CHOICE,
                        "trace_j:other", rng)
    _settled(policy)
    assert policy.batcher.kept["trace_j:other"] is not other
    # after the update, nothing of the old weights is kept: the episode's turn prefilled it all
    assert list(policy.batcher.kept) == ["trace_j:other"]
    assert len(policy.batcher.kept["trace_j:other"].ids) == second.memo.end - 1


def test_a_turn_that_arrives_while_another_decodes_joins_before_that_one_ends(
        policy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(policy, "eos_ids", [])  # the long turn runs to max_tokens
    left: list[str] = []
    batcher_type = type(policy.batcher)
    original = batcher_type._leave

    def leave(self: Any, indices: list[int]) -> None:
        left.extend(self.rows[i].episode for i in indices)
        original(self, indices)

    monkeypatch.setattr(batcher_type, "_leave", leave)
    widths = _widest_batch(policy, monkeypatch)
    results: list[Any] = []
    long = threading.Thread(target=lambda: results.append(
        policy.act(_messages("A"), None, None, "trace_j:long", random.Random(1))))
    long.start()
    poll_until(lambda: policy.batcher.steps >= 1, timeout=60)  # the long turn is decoding
    with _all_queued(policy, 2):
        short = threading.Thread(target=lambda: results.append(policy.act(
            _messages("B"), None, None, "trace_j:short", random.Random(2), ActOptions(max_tokens=4))))
        short.start()
    short.join(timeout=300)
    long.join(timeout=300)
    assert left == ["trace_j:short", "trace_j:long"]  # the short turn left first
    assert max(widths) == 2
    assert sorted(r.memo.tokens for r in results) == [4, MAX_TOKENS]


def test_a_cancelled_row_leaves_the_others_results_intact(policy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    cancel = threading.Event()
    original = type(policy)._sample
    drawn: list[int] = []

    def sample(self: Any, row: Any, generator: Any, call: Any) -> int:
        if call.cancel is cancel:
            drawn.append(1)
            if len(drawn) == 3:
                cancel.set()  # the route sets it when the client disconnects
        return original(self, row, generator, call)

    monkeypatch.setattr(type(policy), "_sample", sample)
    calls = [lambda: policy.act(_messages("A"), None, None, "trace_j:k0", random.Random(20)),
             lambda: policy.act(_messages("B", 2), None, None, "trace_j:gone", random.Random(21),
                                ActOptions(cancel=cancel)),
             lambda: policy.act(_messages("C", 4), [PRESS_TOOL], TOOL_CHOICE, "trace_j:k2", random.Random(22))]
    results: list[Any] = []
    with _all_queued(policy, 3):
        runner = threading.Thread(target=lambda: results.extend(_in_threads(calls)))
        runner.start()
    runner.join(timeout=300)
    assert isinstance(results[1], ActCancelled) and len(drawn) == 3
    gone = policy.episodes["trace_j:gone"]
    assert len(gone.ids) == gone.prompt_len  # nothing of the cancelled turn was kept
    kept = policy.batcher.kept.get("trace_j:gone")  # if any: of its prompt alone
    assert kept is None or (len(kept.ids) <= len(gone.ids) and gone.ids[:len(kept.ids)] == kept.ids)
    assert results[0].memo.tokens > 3  # (the tiny model's free turns seldom end before max_tokens)
    _assert_batch_one(policy, results[0], False, _seed_of(20))
    _assert_batch_one(policy, results[2], True, _seed_of(22))


def test_a_restart_counts_and_its_turn_is_a_fresh_prompts(policy: Any) -> None:
    rng = random.Random(4)
    first = policy.act(_messages("C"), [PRESS_TOOL], TOOL_CHOICE, "trace_j:r", rng)
    _settled(policy)
    assert "trace_j:r" in policy.batcher.kept
    edited = [*_messages("D"), first.message, {"role": "tool", "tool_call_id": first.call_id, "content": "Right."}]
    state = rng.getstate()
    again = policy.act(edited, [PRESS_TOOL], TOOL_CHOICE, "trace_j:r", rng)
    assert policy.restarts == 1
    assert again.memo.sequence is not first.memo.sequence
    replay = random.Random()
    replay.setstate(state)
    _assert_batch_one(policy, again, True, replay.getrandbits(63))


def test_a_groups_turns_on_one_prompt_are_computed_once_until_they_differ(
        policy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    fed = _passes_fed(policy, monkeypatch)
    batcher_type = type(policy.batcher)
    original_choices = batcher_type._choices
    distributions: list[int] = []

    def choices(self: Any, row: Any) -> Any:
        distributions.append(1)
        return original_choices(self, row)

    monkeypatch.setattr(batcher_type, "_choices", choices)
    original_sample = type(policy)._sample
    draws: list[int] = []

    def sample(self: Any, *args: Any) -> int:
        draws.append(1)
        return original_sample(self, *args)

    monkeypatch.setattr(type(policy), "_sample", sample)
    count = 4
    calls = [(lambda i=i: policy.act(_messages("B"), [PRESS_TOOL], TOOL_CHOICE, f"trace_j:g{i}",
                                     random.Random(30 + i))) for i in range(count)]
    results: list[Any] = []
    with _all_queued(policy, count):
        runner = threading.Thread(target=lambda: results.extend(_in_threads(calls)))
        runner.start()
    runner.join(timeout=300)
    # the prompt prefilled once, then its last token and the grammar's first run fed by one row
    # that stands for the four: their caches hold the same tokens and they feed the same
    assert [rows for rows, _ in fed[:2]] == [1, 1]
    assert policy.batcher.shared_rows >= count - 1
    # the first token the four sample is drawn from one distribution, computed once for them
    assert len(distributions) <= len(draws) - (count - 1)
    for i, act in enumerate(results):
        _assert_batch_one(policy, act, True, _seed_of(30 + i))  # each still its own batch-1 turn


def test_acting_puts_every_modules_own_mode_back() -> None:
    import torch

    from app.local.policies.lm.eval_mode import EvalMode

    seen: list[bool] = []

    class Probe(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.drop = torch.nn.Dropout(0.5)
            self.frozen = torch.nn.Linear(2, 2)

    model = Probe()
    model.train()
    model.frozen.eval()  # a module the trainer keeps in eval mode stays so
    modes = EvalMode()
    with modes.eval(model, 0):
        seen += [module.training for module in model.modules()]
    assert seen == [False, False, False]
    assert [model.training, model.drop.training, model.frozen.training] == [True, True, False]

    class Hooked(Probe):
        def train(self, mode: bool = True) -> Hooked:
            seen.append(mode)  # a module's own switch runs
            return super().train(mode)

    hooked = Hooked()
    seen.clear()
    with EvalMode().eval(hooked, 0):
        assert not hooked.drop.training
    assert seen == [False, True] and hooked.training  # eval, then its mode put back


def test_a_wide_feed_beside_single_tokens_is_a_pass_of_its_own(policy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.local.policies.lm import batching

    monkeypatch.setattr(policy, "eos_ids", [])  # the free turn decodes a token a step to max_tokens
    monkeypatch.setattr(batching, "PREFILL_IN_BATCH_TOKENS", 1000)  # the joining prompt is fed in the batch
    passes = _passes_fed(policy, monkeypatch)
    results: list[Any] = []
    free = threading.Thread(target=lambda: results.append(
        policy.act(_messages("A"), None, None, "trace_j:free", random.Random(41))))
    free.start()
    poll_until(lambda: policy.batcher.steps >= 2, timeout=60)  # decoding a token a step
    with _all_queued(policy, 2):  # a longer prompt joins, with the grammar's first run
        wide = threading.Thread(target=lambda: results.append(policy.act(
            _messages("B", padding=12), [PRESS_TOOL], TOOL_CHOICE, "trace_j:wide", random.Random(42))))
        wide.start()
    wide.join(timeout=300)
    free.join(timeout=300)
    assert policy.batcher.split_steps >= 1
    joined = _forced_first(next(a for a in results if a.memo.sequence is policy.episodes["trace_j:wide"]))
    # the joining row's feed (its prompt's rest and the grammar's first run) was a pass of its
    # own, beside the free row's single token: no pass of two rows that wide
    assert not any(rows == 2 and width > joined for rows, width in passes)
    for act in results:
        free_turn = act.memo.sequence is policy.episodes["trace_j:free"]
        _assert_batch_one(policy, act, not free_turn, _seed_of(41 if free_turn else 42))


def test_the_model_loads_without_the_hubs_kernels_and_a_pass_walks_no_module(
        policy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the Hub's kernels on, every train/eval switch kernelized the model again (about 60 ms
    a pass for SmolLM2 with LoRA) and acting had to switch through `train`."""
    assert not any(getattr(module, "use_kernels", False) for module in policy.model.modules())
    switched: list[bool] = []
    original = policy.model.train

    def train(mode: bool = True) -> Any:
        switched.append(mode)
        return original(mode)

    monkeypatch.setattr(policy.model, "train", train)
    mode = policy.model.training
    act = policy.act(_messages("A"), [PRESS_TOOL], TOOL_CHOICE, "trace_j:k", random.Random(8))
    assert act.memo.tokens > 0 and switched == []  # each module's flag set directly
    assert policy.model.training == mode  # put back


def test_turns_that_arrive_one_after_another_are_collected_until_a_gap() -> None:
    """The idle loop's collection window closes COLLECT_GAP_S after the last arrival, at most
    COLLECT_MAX_S after the first: a step's episodes, asking about 10 ms apart, meet."""
    from types import SimpleNamespace

    from app.local.policies.lm.acting import _Call
    from app.local.policies.lm.batching import COLLECT_GAP_S, COLLECT_MAX_S, Batcher, _Row

    batcher = Batcher(SimpleNamespace(weights_version=0))  # type: ignore[arg-type]

    def arrive(at: float) -> None:
        batcher._queue.append(_Row("trace_j:e", [1], None, None, _Call(1.0, 1.0, 4), at))

    arrive(100.0)
    assert batcher._window_ends() == pytest.approx(100.0 + COLLECT_GAP_S)
    arrive(100.010)  # another, 10 ms later: the window stays open for it and for a next
    assert batcher._window_ends() == pytest.approx(100.010 + COLLECT_GAP_S)
    for k in range(2, 30):  # a stream that never pauses: cut at COLLECT_MAX_S after the first
        arrive(100.0 + 0.010 * k)
    assert batcher._window_ends() == pytest.approx(100.0 + COLLECT_MAX_S)


def test_a_turn_queued_while_another_prefills_joins_the_same_step(policy: Any,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A step's first turn prefills its whole prompt alone (no kept cache after an update); the
    turns that arrive meanwhile join before the first step instead of decoding a step behind."""
    widths = _widest_batch(policy, monkeypatch)
    model = policy.model
    original = model.forward
    results: list[Any] = []
    later = threading.Thread(target=lambda: results.append(
        policy.act(_messages("B"), [PRESS_TOOL], TOOL_CHOICE, "trace_j:later", random.Random(52))))

    def prefill_while_another_arrives(*args: Any, **kwargs: Any) -> Any:
        if not later.is_alive() and not results:  # the first pass: the first turn's prefill
            later.start()
            poll_until(lambda: policy.batcher.queued >= 2, timeout=60)
        return original(*args, **kwargs)

    monkeypatch.setattr(model, "forward", prefill_while_another_arrives)
    first = policy.act(_messages("A"), [PRESS_TOOL], TOOL_CHOICE, "trace_j:first", random.Random(51))
    later.join(timeout=300)
    assert widths[0] == 2  # both in the first step
    _assert_batch_one(policy, first, True, _seed_of(51))
    _assert_batch_one(policy, results[0], True, _seed_of(52))


def test_a_draw_follows_the_distribution_and_never_takes_a_masked_token() -> None:
    """`_sample` inverts the cumulative distribution at one uniform draw: over many seeded draws
    each token's share is its probability; a token the grammar masked (-inf) or the nucleus cut
    is never drawn."""
    import math

    import torch

    from app.local.policies.lm.acting import Acting, _Call

    sample = Acting._sample
    logits = torch.full((49152,), -math.inf)
    allowed = {7: 0.5, 300: 0.3, 49151: 0.15, 0: 0.05}
    for token, probability in allowed.items():
        logits[token] = math.log(probability)
    generator = torch.Generator().manual_seed(0)
    draws = 20_000
    counts: dict[int, int] = {}
    for _ in range(draws):
        token = sample(None, logits, generator, _Call(1.0, 1.0, 4))  # type: ignore[arg-type]
        counts[token] = counts.get(token, 0) + 1
    assert set(counts) <= set(allowed)
    for token, probability in allowed.items():  # 4 standard deviations at most
        assert abs(counts.get(token, 0) / draws - probability) < 4 * math.sqrt(probability * (1 - probability) / draws)
    nucleus = {sample(None, logits, generator, _Call(1.0, 0.75, 4)) for _ in range(2_000)}  # type: ignore[arg-type]
    assert nucleus == {7, 300}  # 0.5 + 0.3 reach 0.75: the tail is cut


def test_a_turn_whose_joining_fails_ends_with_that_failure(policy: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Joined turns go into the batch together after the joins; if that fails (memory), each
    joined turn's caller gets the failure, not a loop that went away under it."""
    batcher_type = type(policy.batcher)
    original = batcher_type._add
    failures = [MemoryError("the batch's cache could not grow")]

    def add(self: Any, joined: list[Any]) -> None:
        if failures:
            raise failures.pop()
        original(self, joined)

    monkeypatch.setattr(batcher_type, "_add", add)
    with pytest.raises(MemoryError, match="could not grow"):
        policy.act(_messages("A"), [PRESS_TOOL], TOOL_CHOICE, "trace_j:fails", random.Random(61))
    again = policy.act(_messages("A"), [PRESS_TOOL], TOOL_CHOICE, "trace_j:next", random.Random(62))
    _assert_batch_one(policy, again, True, _seed_of(62))  # a new loop serves the next turn


def test_a_batch_layer_grows_in_place_until_its_room_is_used() -> None:
    """A step's new keys and values are written into the buffer the layer's tensors start (no copy
    of the whole batch's cache), a new buffer only when the room is used up or the tensor was
    replaced (a row left, a row joined)."""
    import torch

    from app.local.policies.lm.kv_cache import GROWTH_ROOM, growing

    keys, values = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)
    layer = growing(keys, values)
    first = torch.randn(2, 3, 1, 4)
    layer.extend(first, first)
    room = layer.key_room
    written = [first]
    for _ in range(GROWTH_ROOM):  # the rest of the room: it was made with GROWTH_ROOM to spare
        step = torch.randn(2, 3, 1, 4)
        layer.update(step, step)
        written.append(step)
    assert layer.key_room is room and layer.keys.data_ptr() == room.data_ptr()  # one buffer throughout
    assert torch.equal(layer.keys, torch.cat([keys, *written], 2))
    assert torch.equal(layer.values, torch.cat([values, *written], 2))
    layer.extend(first, first)  # past the room: a new buffer, the same values
    assert layer.key_room is not room and torch.equal(layer.keys, torch.cat([keys, *written, first], 2))
    layer.keys = layer.keys.index_select(0, torch.tensor([1]))  # a row left: the old buffer is not written
    layer.extend(first[:1], first[:1])
    assert torch.equal(layer.keys, torch.cat([torch.cat([keys, *written, first], 2)[1:], first[:1]], 2))
