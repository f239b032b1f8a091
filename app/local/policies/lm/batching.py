"""The `lm` policy's generation loop: the turns of concurrent episodes decoded together.

One loop thread owns acting on the model (the transformers path; a vLLM server's turns do not
come here). `Acting.act` renders, finds the episode's sequence and hands the turn to `Batcher.turn`,
which queues it and waits. The loop takes the queued turns (after a short collection window when
it was idle, so that requests sent together meet: `_window_ends`), joins each to the batch
between two tokens on top of its episode's kept KV cache (its last new tokens, with the run its
grammar forces first, fed with the batch's next step; a long prompt prefilled alone first), and
decodes every active turn one step at a time across the batch: a step feeds each row its sampled
token with the run its grammar forces after it (jump-forward), or a forced run alone. A
finished, cut or cancelled turn leaves between two steps; the others go on. Rows whose caches
hold the same tokens and that feed the same (a group's episodes, on one prompt) are computed once
in a step (`_forward`).

The batch is one DynamicCache (transformers) whose rows share one length: a row that joined
shorter is padded on the left, a row that fed fewer tokens in a step than another leaves a hole;
an attention mask marks both, and each row's position ids are its own (its real length).
Each row samples as the batch-1 path did: its own torch.Generator, xgrammar matcher and bitmask,
temperature, top_p and max_tokens (app/local/policies/lm/acting.py `_forced`, `_sample`,
`_note_logprobs`).

An episode's cache is kept after its turn (compacted: padding and holes taken out) and its next
turn prefills only what the task app added, while the kept caches stay within a byte bound
(app/local/policies/lm/kv_cache.py: the oldest dropped first, a dropped one prefilled again). All
kept caches are dropped whenever the weights change (`Acting.weights_changed`: after every
optimizer step, a load, a restore).

The policy's lock is held around each forward pass (the model in eval mode for it, its mode put
back before the lock is released): the training thread, which holds it for a whole step, and
generation exclude each other at forward granularity. docs/embedded-policy.md#batched-generation.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import xgrammar as xgr

from app.local.policies.base import ActCancelled
from app.local.policies.lm.acting import _Call, _Turn, sampling_entropy
from app.local.policies.lm.eval_mode import EvalMode
from app.local.policies.lm.kv_cache import KeptCaches, growing, left_padded

if TYPE_CHECKING:
    from app.local.policies.lm.acting import Acting

# How long the idle loop waits, once a turn arrives, for others sent at the same time: until no
# turn has come for COLLECT_GAP_S, at most COLLECT_MAX_S after the first. The concurrent episodes
# of a step ask about 10 ms apart (each answer goes back to the task app and its next request
# comes through the same event loop); a turn that misses the window decodes a step behind the
# others, a pass of its own each step. A lone turn is late by COLLECT_GAP_S.
COLLECT_GAP_S = 0.015
COLLECT_MAX_S = 0.1
# A joining turn's new tokens (past its kept cache) up to this many are fed with the batch's next
# step, the other rows' single tokens beside them; more are prefilled alone first (a long run
# would make every row of that step as wide).
PREFILL_IN_BATCH_TOKENS = 64
# A forward pass's own cost (the weights' reads, each layer's overhead) in tokens of compute: a
# step is split in two passes when padding every row to the widest feed wastes more tokens than
# this (SmolLM2-135M on 2 CPU cores: a pass of one token about 85 ms, a token in a wide pass 3 ms).
PASS_COST_TOKENS = 28
LOOP_IDLE_EXIT_S = 5.0  # the loop thread ends after this long without a turn (the next one starts it again)
WAIT_POLL_S = 0.5  # how often a waiting turn checks that the loop thread is alive


@dataclass
class _Row:
    """One turn in the loop: its request, its sampling state, and what it has generated."""

    episode: str
    prompt: list[int]
    grammar: Any
    generator: torch.Generator | None
    call: _Call
    started: float
    done: threading.Event = field(default_factory=threading.Event)
    matcher: Any = None
    bitmask: Any = None
    covered: list[int] = field(default_factory=list)  # the tokens the row's cache holds, in order
    last: torch.Tensor | None = None  # the logits after the last token fed
    feeding: list[int] = field(default_factory=list)  # what the coming step feeds
    forced_from: int = 0  # ... from here on, a run the grammar forced (before it: prompt, or a sampled token)
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    chosen: list[int] = field(default_factory=list)
    entropy: float = 0.0
    result: _Turn | None = None
    error: BaseException | None = None


@dataclass
class _Choices:
    """What the rows of a kind draw their next token from in a step (`Batcher._choices`): the
    logits at the temperature, those masked by the grammar, whether the mask left a choice, the
    log of the softmax's total (a token's logprob is its scaled logit less it), and the entropy
    once a row needed it."""

    scaled: torch.Tensor
    drawn_from: torch.Tensor
    choice: int
    log_total: float
    entropy: float | None = None


class Batcher:
    """The generation loop of one LmPolicy (the owner, an `Acting`)."""

    def __init__(self, owner: Acting) -> None:
        self.owner = owner
        self._condition = threading.Condition()
        self._queue: list[_Row] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        self.rows: list[_Row] = []  # the batch, in its cache's row order
        self._cache: Any = None  # the batch's DynamicCache
        self._mask: torch.Tensor | None = None  # [rows, length]: 1 on a token, 0 on padding and holes
        self.kept = KeptCaches()
        self._version = owner.weights_version
        self.steps = 0  # batched forward passes so far
        self.queued = 0  # turns handed to the loop so far
        self.shared_rows = 0  # rows whose forward pass another row's stood for (same tokens, same cache)
        self.split_steps = 0  # steps computed in two passes (narrow feeds apart from wide ones)
        self._modes = EvalMode()

    # -- the callers' side --------------------------------------------------------------

    def turn(self, episode: str, prompt: list[int], grammar: Any, seed: int | None, call: _Call) -> _Turn:
        """One turn through the loop: queued, then waited for (a cancel is noticed by the loop
        between two tokens and raised here as ActCancelled)."""
        row = _Row(episode, prompt, grammar, None if seed is None else torch.Generator().manual_seed(seed), call,
                   time.perf_counter())
        with self._condition:
            if self._closed:
                raise ActCancelled("the policy closed; generation stopped")
            self._queue.append(row)
            self.queued += 1
            self._start_loop()
            self._condition.notify_all()
        while not row.done.wait(WAIT_POLL_S):
            with self._condition:
                if self._thread is None or not self._thread.is_alive():
                    if row in self._queue:  # the loop ended (idle) as this turn came: a new one takes it
                        self._start_loop()
                    elif not row.done.is_set():
                        raise RuntimeError("the generation loop stopped before this turn was generated")
        if row.error is not None:
            raise row.error
        assert row.result is not None
        return row.result

    def close(self) -> None:
        """Stop the loop (turns in flight and queued end with ActCancelled) and free the kept caches."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=30.0)
        self._fail_all(ActCancelled("the policy closed; generation stopped"))
        self.kept.clear()
        with self._condition:
            self._closed = False  # a later turn (a policy used again) starts a new loop

    def _start_loop(self) -> None:
        """The loop thread, unless one runs (called under the condition)."""
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._loop, name="lm-generation", daemon=True)
            self._thread.start()

    # -- the loop ---------------------------------------------------------------------------

    def _loop(self) -> None:
        """Take, join, step, until idle for LOOP_IDLE_EXIT_S (the kept caches stay for the next
        loop) or closed or failed (every turn in flight then ends with the reason)."""
        try:
            while (fresh := self._take()) is not None:
                self._join_all(fresh)
                if self.rows:
                    self._step()
        except BaseException as exc:  # noqa: BLE001 - every turn in flight fails with the loop's error
            self._fail_all(exc)
            self._reset_batch()
            with self._condition:
                if self._thread is threading.current_thread():
                    self._thread = None

    def _take(self) -> list[_Row] | None:
        """The turns queued since the last step (none waited for while the batch has rows); when
        idle, the first one and the others that come with it (`_window_ends`). None: stop the loop."""
        with self._condition:
            if not self.rows:
                idle_until = time.monotonic() + LOOP_IDLE_EXIT_S
                while not self._queue and not self._closed:
                    left = idle_until - time.monotonic()
                    if left <= 0:
                        self._thread = None  # the next turn starts a new loop
                        return None
                    self._condition.wait(left)
                while not self._closed and (left := self._window_ends() - time.perf_counter()) > 0:
                    self._condition.wait(left)
            return self._queued()

    def _queued(self) -> list[_Row]:
        """The turns queued now, taken (none waited for)."""
        with self._condition:
            if self._closed:
                raise ActCancelled("the policy closed; generation stopped")
            fresh, self._queue = self._queue, []
            return fresh

    def _window_ends(self) -> float:
        """When the collection window of the queued turns closes (time.perf_counter())."""
        return min(self._queue[-1].started + COLLECT_GAP_S, self._queue[0].started + COLLECT_MAX_S)

    def _fail_all(self, exc: BaseException) -> None:
        with self._condition:
            waiting, self._queue = self._queue, []
        for row in [*self.rows, *waiting]:
            if not row.done.is_set():
                row.error = exc
                row.done.set()
        self.rows = []

    @contextmanager
    def _model_turn(self) -> Iterator[Any]:
        """The model for one forward pass: under the policy's lock, in eval mode, without grad;
        the kept caches dropped first when the weights changed since the last pass."""
        owner = self.owner
        with owner.lock:
            if owner.weights_version != self._version:
                self._version = owner.weights_version
                self.kept.clear()
            model = owner.model
            with self._modes.eval(model, self._version), torch.no_grad():  # no dropout while acting
                yield model

    # -- joining: a turn's prefill ------------------------------------------------------------

    def _join_all(self, fresh: list[_Row]) -> None:
        """The taken turns joined, and those queued while they joined (a prefill alone takes most
        of a second), then added to the batch together; when that fails, so do they."""
        joined: list[tuple[_Row, Any]] = []
        try:
            while fresh:
                joined += [(row, cache) for row in fresh if (cache := self._join(row)) is not None]
                fresh = self._queued()
            self._add(joined)
        except BaseException as exc:  # noqa: BLE001 - re-raised: the loop fails the batch's rows too
            for row, _ in joined:
                row.error = exc
                row.done.set()
            raise

    def _join(self, row: _Row) -> Any:
        """The turn's cache, to join the batch (`_add`): its kept cache (its episode's, or a prefix
        another holds); None when the turn ended here (cancelled while queued, or its prefill
        failed). The prompt's last new tokens (at least one) are fed with the batch's next step,
        together with the run the grammar forces first (one forward pass for both); a longer rest,
        or a prompt with no kept prefix, is prefilled alone first and kept at once (the turns
        joining after it may share it, and feed what it feeds: one row's pass then stands for
        theirs, `_forward`)."""
        from transformers import DynamicCache

        device = self.owner.loaded.device
        try:
            row.call.check_cancel()
            if row.grammar is not None:
                row.matcher = xgr.GrammarMatcher(row.grammar)
                row.bitmask = xgr.allocate_token_bitmask(1, self.owner._info.vocab_size)
            alone: list[int] = []
            with self._model_turn() as model:  # the kept caches are looked at after a weights check
                kept = self.kept.reusable(row.episode, row.prompt)
                start = len(kept.ids) if kept is not None else 0
                cache: Any = DynamicCache(kept.layers) if kept is not None else DynamicCache()
                new = row.prompt[start:]
                row.covered = list(kept.ids) if kept is not None else []
                if kept is None or len(new) > PREFILL_IN_BATCH_TOKENS:
                    alone = new[:-1] if kept is not None or len(new) > 1 else new
                    out = model(input_ids=torch.tensor([alone], device=device),
                                position_ids=torch.arange(start, start + len(alone), device=device).unsqueeze(0),
                                cache=cache, use_cache=True, logits_to_keep=1)
                    cache, row.last = out.cache, out.logits[0, -1]
                    row.covered = row.prompt[:start + len(alone)]
            rest = row.prompt[len(row.covered):]
            forced = self.owner._forced(row.matcher, row.call.max_tokens)
            row.feeding, row.forced_from = [*rest, *forced], len(rest)
        except BaseException as exc:  # noqa: BLE001 - the turn's failure, raised in its caller
            row.error = exc
            row.done.set()
            return None
        if alone:
            self.kept.store(row.episode, row.covered, [(layer.keys, layer.values) for layer in cache.layers])
        return cache

    def _add(self, joined: list[tuple[_Row, Any]]) -> None:
        """Joined rows (each with its cache) into the batch after its rows: every cache padded on
        the left to the longest, then one concatenation a layer (row by row, each join copied the
        whole batch's cache again)."""
        if not joined:
            return
        device = self.owner.loaded.device
        caches = [cache for _, cache in joined]
        masks = [torch.ones(1, len(row.covered), dtype=torch.long, device=device) for row, _ in joined]
        if self._cache is not None:
            assert self._mask is not None
            caches.insert(0, self._cache)
            masks.insert(0, self._mask)
        length = max(mask.shape[1] for mask in masks)
        batch = caches[0]
        batch.layers = [growing(torch.cat([left_padded(c.layers[index].keys, length) for c in caches], 0),
                                 torch.cat([left_padded(c.layers[index].values, length) for c in caches], 0))
                        for index in range(len(batch.layers))]
        self._cache = batch
        self._mask = torch.cat([left_padded(mask, length, dim=1) for mask in masks], 0)
        self.rows += [row for row, _ in joined]

    # -- a step of the batch --------------------------------------------------------------------

    def _step(self) -> None:
        """Each row's next tokens (sampled, or a forced run), the rows that ended taken out, then
        one forward pass over the batch."""
        leaving = []
        shared: dict[tuple[Any, ...], _Choices] = {}
        for index, row in enumerate(self.rows):
            try:
                more = self._next(row, shared)
            except BaseException as exc:  # noqa: BLE001 - a cancel, or the row's own failure
                row.error, more = exc, False
            if not more:
                leaving.append(index)
        if leaving:
            self._leave(leaving)
        if self.rows:
            self._forward()

    def _next(self, row: _Row, shared: dict[tuple[Any, ...], _Choices]) -> bool:
        """What the row feeds next (acting.py's batch-1 loop, one iteration's first half); False
        when its turn is over: an end-of-turn token, max_tokens, or its grammar's end. What the
        row draws from is computed once for the rows of its kind this step (`shared`: rows whose
        caches cover the same tokens under the same grammar and sampling have the same logits and
        the same mask); each row draws with its own generator."""
        owner, call = self.owner, row.call
        if len(row.ids) >= call.max_tokens:
            return False
        call.check_cancel()  # between tokens: a caller that went away stops the generation
        if row.feeding:  # the prompt's new tokens, set as it joined: fed before anything is sampled
            return True
        forced = owner._forced(row.matcher, call.max_tokens - len(row.ids))
        if forced:
            row.feeding, row.forced_from = forced, 0
            return True
        assert row.last is not None
        # the same tokens from the same turn start: the same logits and the same grammar state
        key = (tuple(row.covered), len(row.prompt), id(row.grammar), call.temperature, call.top_p)
        choices = shared.get(key)
        if choices is None:
            choices = shared[key] = self._choices(row)
        token = owner._sample(choices.drawn_from, row.generator, call)
        if row.matcher is not None and not row.matcher.accept_token(token):
            return False  # cannot happen for a token the mask allowed; stop rather than loop
        choice = choices.choice
        if choice and call.temperature > 0.0 and row.generator is not None:  # greedy: entropy 0
            if choices.entropy is None:
                choices.entropy = sampling_entropy(choices.drawn_from, call.top_p)
            row.entropy += choices.entropy
        row.logprobs.append(float(choices.scaled[token]) - choices.log_total)
        owner._note_logprobs(call, row.last.unsqueeze(0), [token])
        row.ids.append(token)
        row.chosen.append(choice)
        if token in owner.eos_ids or len(row.ids) >= call.max_tokens:
            return False
        if row.matcher is not None and row.matcher.is_terminated():
            return False  # the grammar took its stop token: the turn is over (and has no next run)
        # the run the grammar forces after this token is fed with it: one forward pass for both
        forced = owner._forced(row.matcher, call.max_tokens - len(row.ids))
        row.feeding, row.forced_from = [token, *forced], 1
        return True

    def _choices(self, row: _Row) -> _Choices:
        """The distribution the row's next token is drawn from: its last logits at its temperature,
        masked by its grammar (its matcher fills the bitmask); `choice` 0 when the mask allows one
        token (a forced token the jump-forward did not cover)."""
        assert row.last is not None
        scaled = self.owner._scaled(row.last, row.call)
        drawn_from, choice = scaled, 1
        if row.matcher is not None:
            row.matcher.fill_next_token_bitmask(row.bitmask)
            masked = scaled.clone().unsqueeze(0)
            xgr.apply_token_bitmask_inplace(masked, row.bitmask.to(masked.device))
            drawn_from = masked[0]
            choice = int(torch.isfinite(drawn_from).sum() > 1)
        return _Choices(scaled, drawn_from, choice, float(torch.logsumexp(scaled, -1)))

    def _forward(self) -> None:
        """One step of the batch: each row's tokens, padded on the right to the longest (the
        padding is a hole in the cache, masked), at the row's own positions. Rows whose cache
        holds the same tokens and that feed the same (a group's episodes: one prompt, one forced
        run, often the same sampled token) are computed once: the first of them stands for the
        others, which get its new keys and values and its logits. When a few rows feed long runs
        (a prompt that joined, a forced run) beside rows feeding a token or two, the step is two
        passes, the narrow rows' and the wide rows', if padding every row to the widest would
        cost more than a pass (`_passes`)."""
        assert self._mask is not None
        device = self._mask.device
        width = max(len(row.feeding) for row in self.rows)
        count = len(self.rows)
        ids = torch.zeros(count, width, dtype=torch.long, device=device)
        new_mask = torch.zeros(count, width, dtype=torch.long, device=device)
        positions = torch.zeros(count, width, dtype=torch.long, device=device)
        for index, row in enumerate(self.rows):
            k = len(row.feeding)
            ids[index, :k] = torch.tensor(row.feeding, device=device)
            new_mask[index, :k] = 1
            positions[index] = torch.arange(len(row.covered), len(row.covered) + width, device=device)
        mask = torch.cat([self._mask, new_mask], 1)
        leads, stands_for = self._distinct_rows()
        passes = self._passes(leads)
        first = min(_logits_from(row) for row in self.rows)
        with self._model_turn() as model:
            if len(leads) == count and len(passes) == 1:
                out = model(input_ids=ids, attention_mask=mask, position_ids=positions, cache=self._cache,
                            use_cache=True, logits_to_keep=width - first)
                self._cache, logits = out.cache, out.logits
            else:
                logits = self._forward_passes(model, passes, leads, stands_for, ids, mask, positions, first)
        self._mask = mask
        self.steps += 1
        runs: dict[tuple[Any, ...], list[float]] = {}
        for index, row in enumerate(self.rows):
            self._took(row, logits[index], first, runs)

    def _distinct_rows(self) -> tuple[list[int], list[int]]:
        """(the rows computed: the first of each kind, the index in that list each row takes its
        pass from). Two rows are of a kind when their caches cover the same tokens and they feed
        the same: the same weights give both the same keys, values and logits."""
        seen: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}
        leads: list[int] = []
        stands_for: list[int] = []
        for index, row in enumerate(self.rows):
            kind = (tuple(row.covered), tuple(row.feeding))
            lead = seen.setdefault(kind, len(leads))
            if lead == len(leads):
                leads.append(index)
            stands_for.append(lead)
        return leads, stands_for

    def _passes(self, leads: list[int]) -> list[list[int]]:
        """The computed rows in one pass, or in two (the narrowest feeds, the widest) when padding
        them all to the widest costs more tokens than a pass's own cost, PASS_COST_TOKENS. Each
        pass lists positions in `leads`."""
        order = sorted(range(len(leads)), key=lambda i: len(self.rows[leads[i]].feeding))
        widths = [len(self.rows[leads[i]].feeding) for i in order]
        best, split = len(widths) * widths[-1], 0
        for k in range(1, len(widths)):
            cost = k * widths[k - 1] + (len(widths) - k) * widths[-1] + PASS_COST_TOKENS
            if cost < best:
                best, split = cost, k
        return [order[:split], order[split:]] if split else [list(range(len(leads)))]

    def _forward_passes(self, model: Any, passes: list[list[int]], leads: list[int], stands_for: list[int],
                        ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, first: int) -> torch.Tensor:
        """The computed rows' passes (`passes`: positions in `leads`, the batch rows computed),
        each on a copy of its rows' caches and only as wide as its widest feed; then every row's
        cache grows by its computed row's new keys and values (a narrower pass's padded with
        holes). The batch's logits (a row per batch row) from column `first` of the feeds on."""
        from transformers import DynamicCache

        assert self._mask is not None
        length, width = self._mask.shape[1], ids.shape[1]
        computed_keys: list[torch.Tensor] = []
        computed_values: list[torch.Tensor] = []
        logits: torch.Tensor | None = None
        for part in passes:
            rows = torch.tensor([leads[i] for i in part], device=mask.device)
            at = torch.tensor(part, device=mask.device)
            wide = max(len(self.rows[leads[i]].feeding) for i in part)
            kept_from = min(_logits_from(self.rows[leads[i]]) for i in part)
            # index_select, not indexing with a tensor: the same rows, several times faster on CPU
            cache = DynamicCache([(layer.keys.index_select(0, rows), layer.values.index_select(0, rows))
                                  for layer in self._cache.layers])
            out = model(input_ids=ids[rows, :wide], attention_mask=mask[rows, :length + wide],
                        position_ids=positions[rows, :wide], cache=cache, use_cache=True,
                        logits_to_keep=wide - kept_from)
            if logits is None:
                logits = out.logits.new_zeros(len(leads), width - first, out.logits.shape[-1])
                for layer in out.cache.layers:
                    shape = (len(leads), layer.keys.shape[1], width, layer.keys.shape[3])
                    computed_keys.append(layer.keys.new_zeros(shape))
                    computed_values.append(layer.values.new_zeros(shape))
            logits[at, kept_from - first:wide - first] = out.logits
            for index, layer in enumerate(out.cache.layers):
                computed_keys[index][at, :, :wide] = layer.keys[:, :, length:]
                computed_values[index][at, :, :wide] = layer.values[:, :, length:]
        assert logits is not None
        spread = torch.tensor(stands_for, device=mask.device)
        for index, layer in enumerate(self._cache.layers):
            layer.extend(computed_keys[index].index_select(0, spread), computed_values[index].index_select(0, spread))
        self.shared_rows += len(stands_for) - len(leads)
        self.split_steps += len(passes) > 1
        spread_logits: torch.Tensor = logits.index_select(0, spread)
        return spread_logits

    def _took(self, row: _Row, logits: torch.Tensor, first: int, runs: dict[tuple[Any, ...], list[float]]) -> None:
        """After the forward pass (`logits`: one row per token fed from feeding[first] on, at least
        from `_logits_from(row)`): the forced run's logprobs (the second half of the batch-1 loop's
        iteration; computed once for the rows of a kind, `runs`), the row's new last logits and
        what its cache covers. The forced token at feeding[i] was predicted by the logits after
        feeding[i - 1] (after the row's previous last token for i = 0)."""
        start, count = row.forced_from, len(row.feeding)
        if start < count:
            if start == 0:
                assert row.last is not None and first == 0
                before = torch.cat([row.last.unsqueeze(0), logits[:count - 1]])
            else:
                before = logits[start - 1 - first:count - 1 - first]
            run = row.feeding[start:]
            key = (tuple(row.covered), tuple(row.feeding), start, row.call.temperature)
            if key not in runs:  # log-softmax at the run's tokens only: the scores less log-sum-exp
                scaled = self.owner._scaled(before, row.call)
                picked = scaled.gather(1, torch.tensor(run, device=scaled.device).unsqueeze(1)).squeeze(1)
                runs[key] = (picked - torch.logsumexp(scaled, -1)).tolist()
            row.logprobs += runs[key]
            self.owner._note_logprobs(row.call, before, run)
            row.ids += run
            row.chosen += [0] * len(run)
        row.covered += row.feeding
        row.last = logits[count - 1 - first]
        row.feeding = []

    # -- leaving ------------------------------------------------------------------------------

    def _leave(self, indices: list[int]) -> None:
        """The rows at `indices` out of the batch: each result handed to its caller, then a finished
        turn's cache kept for its episode's next turn (which joins through this thread, so after
        it: the callers go back to their task apps meanwhile); the padding no row needs any
        longer cut."""
        assert self._mask is not None
        for index in indices:
            row = self.rows[index]
            if row.error is None:
                row.result = _Turn(row.ids, row.logprobs, row.chosen, time.perf_counter() - row.started,
                                   row.entropy)
            row.done.set()
        for index in indices:
            if self.rows[index].error is None:
                self._keep(self.rows[index], index)
        gone = set(indices)
        staying = [i for i in range(len(self.rows)) if i not in gone]
        if not staying:
            self._reset_batch()
            return
        self.rows = [self.rows[i] for i in staying]
        select = torch.tensor(staying, device=self._mask.device)
        mask = self._mask[select]
        first = int(mask.any(0).nonzero()[0])  # columns before it are padding in every row left
        self._mask = mask[:, first:]
        for layer in self._cache.layers:
            layer.keys = layer.keys.index_select(0, select)[:, :, first:]
            layer.values = layer.values.index_select(0, select)[:, :, first:]

    def _keep(self, row: _Row, index: int) -> None:
        """The row's cache, without padding or holes, kept for its episode's next turn (gathered:
        a copy of its own, which the store keeps as it is)."""
        assert self._mask is not None
        where = self._mask[index].nonzero().squeeze(1)
        self.kept.store(row.episode, row.covered, [(layer.keys[index].index_select(1, where).unsqueeze(0),
                                                layer.values[index].index_select(1, where).unsqueeze(0))
                                               for layer in self._cache.layers], copied=True)

    def _reset_batch(self) -> None:
        self.rows, self._cache, self._mask = [], None, None


def _logits_from(row: _Row) -> int:
    """The first column of the row's feed whose logits the step needs: the one before its forced
    run (which predicts the run's first token), else its last. A prompt's new tokens before it need
    none: on a press turn's second prompt, 27 of the 47 tokens fed, whose logits (576 x 49,152
    multiply-adds a token for SmolLM2-135M) are a fifth of the pass's compute."""
    start, count = row.forced_from, len(row.feeding)
    return max(start - 1, 0) if start < count else count - 1
