"""The `lm` policy's acting: one chat request to one answer, through the model or a vLLM server.

A chat request's messages and tools are rendered with the ACTING template: the model's own chat
template when it is prefix-preserving, else TRL's training variant of it
(trl.chat_template_utils), so what the model acts on is exactly what training sees. Each episode
(one correlation id) is ONE token sequence (`EpisodeSequence`): turn k+1's prompt is turn k's
prompt, turn k's completion and the tokens the template adds after it (the task app's tool
results or user message and the next generation prompt). When the task app's history does not
extend that text (it edited the history), the episode's sequence starts again from a fresh render
and the restart is counted. A `tool_choice` that requires a call constrains generation with
xgrammar to the template's tool-call scaffold with arguments that match the tool's JSON schema.

`Acting` is a part of app/local/policies/lm/policy.py's LmPolicy (which sets the attributes
declared here); torch and xgrammar are imported at module level: it is imported only when an
`lm` job starts, through policy.py (and grpo_thread.py) or by app/local/parallel/worker.py (for
`EpisodeSequence` and `TurnMemo`). docs/embedded-policy.md#the-lm-policy.
"""

from __future__ import annotations

import json
import math
import random
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import xgrammar as xgr

from app.local.parallel.vllm import VllmGenerator
from app.local.policies.base import (
    Act,
    ActCancelled,
    ActOptions,
    PolicyCannotAct,
    PolicySettings,
    acts_greedily,
    plays_evaluation,
)
from app.local.policies.lm.chat_templates import CHAT_KWARGS, ToolCallScaffold, history_message, where_texts_part
from app.local.policies.lm.model import LoadedModel

MAX_EPISODES_KEPT = 4096  # sequences of episodes in flight (an abandoned one is dropped oldest first)
MAX_TOP_LOGPROBS = 20  # OpenAI's bound on top_logprobs
# A rendered prompt longer than this many times (its token bound x the longest token's characters)
# is refused before it is tokenised: it cannot fit (the margin covers a normaliser's changes).
PROMPT_CHARS_MARGIN = 2
_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


@dataclass
class EpisodeSequence:
    """One episode's joined sequence: every token, which are the model's (mask 1), their
    logprobs (0.0 on the task app's), and where the first prompt ends."""

    ids: list[int]
    mask: list[int]
    logprobs: list[float]
    prompt_len: int
    text: str


@dataclass
class TurnMemo:
    """What one answer leaves for `update`: its sequence, where its completion ends, its tokens
    (`sampled` of them chosen by the model, the rest forced by the grammar), the generation's
    seconds, and the sum over the sampled tokens of the entropy of the distribution each was
    drawn from (NaN when unknown: a vLLM server's turn). docs/embedded-policy.md#metrics."""

    sequence: EpisodeSequence
    end: int
    tokens: int
    seconds: float
    sampled: int
    entropy_sum: float


@dataclass
class _Call:
    """One chat request's sampling (the job's [policy] values where the request says none), its
    cancel flag, and the logprobs it collects when asked (OpenAI's `logprobs.content`)."""

    temperature: float
    top_p: float
    max_tokens: int
    logprobs: bool = False
    top_logprobs: int = 0
    cancel: Any = None  # a threading.Event, set when the caller went away
    content: list[dict[str, Any]] = field(default_factory=list)

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise ActCancelled("the caller went away; generation stopped")


@dataclass(frozen=True)
class _Turn:
    """One generated completion: its ids, each one's logprob, whether the model chose it (1) or
    the grammar forced it (0), the generation's seconds, and the entropy summed over the chosen
    positions (NaN when unknown)."""

    ids: list[int]
    logprobs: list[float]
    chosen: list[int]
    seconds: float
    entropy_sum: float


def sampling_entropy(row: torch.Tensor, top_p: float = 1.0) -> float:
    """The entropy (nats) of the distribution a token is drawn from: softmax of `row` (logits
    at the sampling temperature, -inf where the grammar forbids a token), kept to the nucleus
    `top_p` and renormalized. A choice among k allowed tokens reads at most ln k."""
    probs = _nucleus(torch.softmax(row.float(), -1), top_p)
    probs = probs / probs.sum()
    kept = probs[probs > 0]
    return max(float(-(kept * kept.log()).sum()), 0.0)


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """`probs` with what falls outside the top_p nucleus set to 0 (not renormalized)."""
    if top_p >= 1.0:
        return probs
    ordered, order = torch.sort(probs, descending=True)
    keep = torch.cumsum(ordered, -1) - ordered < top_p
    return torch.zeros_like(probs).scatter(0, order[keep], ordered[keep])


class Acting:
    """LmPolicy's `act` and what it takes: rendering, the episodes' sequences, the tool-call
    grammar, sampling (own forward passes or the vLLM server), the answer's message."""

    settings: PolicySettings
    tokenizer: Any
    model: Any
    loaded: LoadedModel
    base: str
    template: str | None
    lock: threading.Lock
    generator: VllmGenerator | None
    temperature: float
    top_p: float
    max_tokens: int
    eos_ids: list[int]
    scaffold: ToolCallScaffold
    episodes: OrderedDict[str, EpisodeSequence]
    restarts: int
    first_restart: dict[str, Any] | None  # where the first restart's texts parted (a warning event)
    unfinished_calls: int
    _info: Any
    _compiler: Any
    _grammars: dict[str, tuple[Any, str]]
    _max_token_chars: int | None = None

    def act(self, messages: Sequence[dict[str, Any]], tools: Sequence[Any] | None, tool_choice: Any,
            correlation_id: str, rng: random.Random, options: ActOptions | None = None) -> Act:
        call = self._call(options or ActOptions())
        tool_list = [t for t in (tools or []) if isinstance(t, dict)]
        required = _required_tools(tool_list, tool_choice)
        offered = tool_list if tool_choice != "none" else []
        text = self._render(messages, offered)
        bound, why = self._prompt_bound(call)
        if len(text) > PROMPT_CHARS_MARGIN * self._token_chars() * bound:  # cannot fit: never tokenised
            raise PolicyCannotAct(f"the prompt is {len(text):,} characters, more than {bound:,} tokens could hold "
                                  f"(a token of this model holds at most {self._token_chars()} characters); "
                                  f"this job's prompts are bounded at {bound:,} tokens ({why})")
        # An evaluation's turn, or a request's temperature 0, takes the most probable token
        # (None: no generator, argmax).
        greedy = acts_greedily(correlation_id) or call.temperature <= 0.0
        seed = None if greedy else rng.getrandbits(63)
        with self.lock:  # one generation at a time on the model (and one compile per tool set)
            grammar = self._grammar(required) if required else None
            sequence = self._sequence_for(correlation_id, text)
            prompt = list(sequence.ids)
            if len(prompt) > bound:
                raise PolicyCannotAct(f"the prompt is {len(prompt):,} tokens; this job's prompts are bounded at "
                                      f"{bound:,} tokens ({why})")
            turn = self._own_turn(prompt, grammar, seed, call) if self.generator is None else None
        if turn is None:  # a vLLM server serves turns side by side: not under the model's lock
            turn = self._vllm_turn(prompt, grammar, seed, call)
        call.check_cancel()  # the caller went away: the episode keeps nothing of this turn
        with self.lock:
            sequence.ids += turn.ids
            sequence.mask += turn.chosen
            sequence.logprobs += turn.logprobs
            answer = self.tokenizer.decode(turn.ids, skip_special_tokens=False)
            sequence.text += answer
            memo = TurnMemo(sequence, len(sequence.ids), len(turn.ids), turn.seconds, sum(turn.chosen),
                            turn.entropy_sum)
        call_id = f"call_{secrets.token_hex(8)}"
        message = self._message(answer, call_id, offered)
        if required and not message.get("tool_calls"):
            self.unfinished_calls += 1
        cut = len(turn.ids) >= call.max_tokens and (not turn.ids or turn.ids[-1] not in self.eos_ids)
        return Act(message, call_id, memo, prompt_tokens=len(prompt), completion_tokens=len(turn.ids),
                   finish_reason="length" if cut else None,
                   logprobs={"content": call.content} if call.logprobs else None)

    def _call(self, options: ActOptions) -> _Call:
        """The request's sampling within the job's bounds, or PolicyCannotAct saying why: max_tokens
        is honoured up to the job's (a larger one is the job's: finish_reason "length" says when it
        cut; the SDK's task apps ask for 512 whatever the job); a vLLM server samples at the job's
        temperature and top_p and gives no top logprobs (docs/wire-contract.md#the-chat-answer)."""
        for name, asked, job in (("temperature", options.temperature, self.temperature),
                                 ("top_p", options.top_p, self.top_p)):
            if self.generator is not None and asked is not None and asked != job:
                raise PolicyCannotAct(f"{name} {asked:g} cannot be honoured: a job generating through a vLLM server "
                                      f"samples at its [policy] {name} {job:g} (send {job:g} or leave it out)")
        if options.top_logprobs > MAX_TOP_LOGPROBS or (options.top_logprobs and self.generator is not None):
            raise PolicyCannotAct(f"top_logprobs must be 0 to {MAX_TOP_LOGPROBS}, and 0 with a vLLM server")
        return _Call(temperature=self.temperature if options.temperature is None else options.temperature,
                     top_p=self.top_p if options.top_p is None else options.top_p,
                     max_tokens=min(options.max_tokens or self.max_tokens, self.max_tokens),
                     logprobs=options.logprobs or options.top_logprobs > 0, top_logprobs=options.top_logprobs,
                     cancel=options.cancel)

    def _prompt_bound(self, call: _Call) -> tuple[int, str]:
        """How many tokens a prompt may have, and why: the model's context less the turn's
        max_tokens, and [policy] max_prompt_tokens when set (issue 41: an unbounded prompt held
        the model for minutes)."""
        bounds: list[tuple[int, str]] = []
        context = getattr(getattr(self.model, "config", None), "max_position_embeddings", None)
        if isinstance(context, int) and context > 0:
            bounds.append((max(context - call.max_tokens, 1), f"the model's context of {context:,} tokens "
                                                               f"less max_tokens {call.max_tokens:,}"))
        configured = self.settings.options.get("max_prompt_tokens")
        if isinstance(configured, int) and configured > 0:
            bounds.append((configured, "[policy] max_prompt_tokens"))
        return min(bounds) if bounds else (1 << 62, "no bound")

    def _token_chars(self) -> int:
        """The most characters one token of this tokenizer stands for (its longest vocabulary entry:
        a byte-level or sentencepiece entry is at least as long as the text it decodes to)."""
        if self._max_token_chars is None:
            self._max_token_chars = max((len(t) for t in self.tokenizer.get_vocab()), default=1) or 1
        return self._max_token_chars

    def _render(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        clean = [history_message(m) for m in messages]
        try:
            text = self.tokenizer.apply_chat_template(clean, tools=tools or None, tokenize=False,
                                                      add_generation_prompt=True, chat_template=self.template,
                                                      **CHAT_KWARGS)
        except Exception as exc:  # noqa: BLE001 - a template error is the request's problem
            raise PolicyCannotAct(f"the chat template of {self.base} cannot render this request "
                                  f"({type(exc).__name__}: {str(exc)[:200]})") from None
        return str(text)

    def _sequence_for(self, correlation_id: str, text: str) -> EpisodeSequence:
        """The episode's sequence extended by what the template added since its last answer,
        or a fresh one (a restart, counted, when the history does not extend it)."""
        sequence = self.episodes.get(correlation_id)
        if sequence is not None and text.startswith(sequence.text):
            added = self._encode(text[len(sequence.text):])
            sequence.ids += added
            sequence.mask += [0] * len(added)
            sequence.logprobs += [0.0] * len(added)
            sequence.text = text
            self.episodes.move_to_end(correlation_id)
            return sequence
        if sequence is not None:
            # a step's episode_restarts counts its own training episodes, not an evaluation's
            self.restarts += not plays_evaluation(correlation_id)
            if self.first_restart is None:
                self.first_restart = where_texts_part(sequence.text, text)
        ids = self._encode(text)
        sequence = EpisodeSequence(ids, [0] * len(ids), [0.0] * len(ids), len(ids), text)
        self.episodes[correlation_id] = sequence
        while len(self.episodes) > MAX_EPISODES_KEPT:
            self.episodes.popitem(last=False)
        return sequence

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _grammar(self, tools: list[dict[str, Any]]) -> tuple[Any, str]:
        """The grammar of one call of any of `tools`, compiled and as EBNF (what a vLLM server
        takes): the template's scaffold around {"name": NAME, "arguments": <the tool's schema>}
        (cached per tool set)."""
        key = json.dumps(tools, sort_keys=True)
        if key not in self._grammars:
            alternatives = []
            for tool in tools:
                function = tool["function"]
                schema = function.get("parameters") or {"type": "object"}
                head = self.scaffold.head(function["name"])
                try:
                    arguments = xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False,
                                                             separators=(", ", ": "))
                except Exception as exc:  # noqa: BLE001 - xgrammar's refusal, as a sentence
                    raise PolicyCannotAct(f"the parameters schema of tool {function['name']!r} cannot be "
                                          f"compiled to a grammar ({str(exc)[:200]})") from None
                alternatives.append(xgr.Grammar.concat(_literal(head), arguments, _literal(self.scaffold.after)))
            grammar = alternatives[0] if len(alternatives) == 1 else xgr.Grammar.union(*alternatives)
            self._grammars[key] = (self._compiler.compile_grammar(grammar), str(grammar))
        return self._grammars[key]

    def _own_turn(self, prompt: list[int], grammar: tuple[Any, str] | None, seed: int | None,
                  call: _Call) -> _Turn:
        started = time.perf_counter()
        ids, logprobs, chosen, entropy = self._generate(prompt, grammar[0] if grammar else None,
                                                        None if seed is None else torch.Generator().manual_seed(seed),
                                                        call)
        return _Turn(ids, logprobs, chosen, time.perf_counter() - started, entropy)

    def _vllm_turn(self, prompt: list[int], grammar: tuple[Any, str] | None, seed: int | None,
                   call: _Call) -> _Turn:
        """One turn from the vLLM server: its sampled ids and their logprobs, the tool-call grammar
        sent as EBNF. vLLM does not say which tokens the grammar forced: a token is taken as
        forced where the grammar allowed it alone (replayed here with xgrammar). Nor does it return
        the distributions: the turn's entropy is unknown (NaN)."""
        assert self.generator is not None
        try:
            turn = self.generator.turn(prompt, seed=seed, grammar=grammar[1] if grammar else None,
                                       max_tokens=call.max_tokens, greedy=seed is None)
        except Exception as exc:  # noqa: BLE001 - the server's failure, as the turn's problem
            raise PolicyCannotAct(f"the vLLM server did not generate this turn ({type(exc).__name__}: "
                                  f"{str(exc)[:200]})") from None
        chosen = self._chosen(grammar[0], turn.completion_ids) if grammar else [1] * len(turn.completion_ids)
        if call.logprobs:  # at the job's sampling temperature: what the server gave
            pairs = zip(turn.completion_ids, turn.logprobs, strict=False)
            call.content = [self._logprob_entry(token, logprob, []) for token, logprob in pairs]
        return _Turn(turn.completion_ids, turn.logprobs, chosen, turn.seconds, math.nan)

    def _chosen(self, grammar: Any, ids: list[int]) -> list[int]:
        """1 where the grammar allowed more than one token, 0 where it allowed only the one taken."""
        matcher = xgr.GrammarMatcher(grammar)
        bitmask = xgr.allocate_token_bitmask(1, self._info.vocab_size)
        chosen = []
        for token in ids:
            if matcher.is_terminated():
                chosen.append(1)
                continue
            matcher.fill_next_token_bitmask(bitmask)
            allowed = torch.zeros(1, self._info.vocab_size)
            xgr.apply_token_bitmask_inplace(allowed, bitmask)
            chosen.append(int(torch.isfinite(allowed).sum() > 1))
            if not matcher.accept_token(token):  # not the grammar's (cannot be, from a server that applied it)
                chosen[-1] = 1
                break
        return chosen + [1] * (len(ids) - len(chosen))

    def _generate(self, prompt: list[int], grammar: Any, generator: torch.Generator | None,
                  call: _Call) -> tuple[list[int], list[float], list[int], float]:
        """Sample a completion (ending with an end-of-turn token unless max_tokens cut it),
        each token's log-probability under the unconstrained model at the sampling temperature
        (what GRPO's loss computes), whether the model chose it (1) or the grammar forced
        it (0: the scaffold, fed in one forward pass; a forced token's probability under the
        constrained policy is 1, so it carries no gradient and is masked out of the loss), and
        the sum over the chosen tokens of the entropy they were drawn with (`sampling_entropy`)."""
        model = self.model
        was_training = model.training
        model.eval()  # no dropout while acting; the trainer's mode is put back after
        try:
            with torch.no_grad():
                return self._sample_completion(prompt, grammar, generator, call)
        finally:
            model.train(was_training)

    def _sample_completion(self, prompt: list[int], grammar: Any, generator: torch.Generator | None,
                           call: _Call) -> tuple[list[int], list[float], list[int], float]:
        model = self.model
        device = self.loaded.device
        matcher = xgr.GrammarMatcher(grammar) if grammar is not None else None
        bitmask = xgr.allocate_token_bitmask(1, self._info.vocab_size) if matcher is not None else None
        out = model(input_ids=torch.tensor([prompt], device=device), use_cache=True)
        cache, last = out.past_key_values, out.logits[0, -1]
        ids: list[int] = []
        logprobs: list[float] = []
        chosen: list[int] = []
        entropy = 0.0
        while len(ids) < call.max_tokens:
            call.check_cancel()  # between tokens: a caller that went away stops the generation
            forced = self._forced(matcher, call.max_tokens - len(ids))
            if forced:
                out = model(input_ids=torch.tensor([forced], device=device), past_key_values=cache, use_cache=True)
                before = torch.cat([last.unsqueeze(0), out.logits[0, :-1]])
                scores = torch.log_softmax(self._scaled(before, call), -1)
                logprobs += [float(scores[pos, token]) for pos, token in enumerate(forced)]
                self._note_logprobs(call, before, forced)
                ids += forced
                chosen += [0] * len(forced)
                cache, last = out.past_key_values, out.logits[0, -1]
                continue
            row = self._scaled(last, call)
            drawn_from = row
            choice = 1
            if matcher is not None and bitmask is not None:
                matcher.fill_next_token_bitmask(bitmask)
                masked = row.clone().unsqueeze(0)
                xgr.apply_token_bitmask_inplace(masked, bitmask.to(masked.device))
                choice = int(torch.isfinite(masked[0]).sum() > 1)  # one allowed token: forced
                drawn_from = masked[0]
                token = self._sample(drawn_from, generator, call)
                if not matcher.accept_token(token):
                    break  # cannot happen for a token the mask allowed; stop rather than loop
            else:
                token = self._sample(row, generator, call)
            if choice and call.temperature > 0.0 and generator is not None:  # greedy: no spread, entropy 0
                entropy += sampling_entropy(drawn_from, call.top_p)
            logprobs.append(float(torch.log_softmax(row, -1)[token]))
            self._note_logprobs(call, last.unsqueeze(0), [token])
            ids.append(token)
            chosen.append(choice)
            if token in self.eos_ids or len(ids) >= call.max_tokens:
                break
            out = model(input_ids=torch.tensor([[token]], device=device), past_key_values=cache, use_cache=True)
            cache, last = out.past_key_values, out.logits[0, -1]
        return ids, logprobs, chosen, entropy

    def _forced(self, matcher: Any, room: int) -> list[int]:
        """The tokens of the text the grammar forces next (accepted by the matcher), if any."""
        if matcher is None:
            return []
        jump = matcher.find_jump_forward_string()
        if not jump:
            return []
        forced = []
        for token in self._encode(jump)[:room]:
            if not matcher.accept_token(token):
                break
            forced.append(token)
        return forced

    def _scaled(self, logits: torch.Tensor, call: _Call) -> torch.Tensor:
        return logits.float() / max(call.temperature, 1e-6)

    def _sample(self, row: torch.Tensor, generator: torch.Generator | None, call: _Call) -> int:
        if call.temperature <= 0.0 or generator is None:  # greedy (None: an evaluation's turn)
            return int(torch.argmax(row))
        probs = _nucleus(torch.softmax(row, -1), call.top_p)
        return int(torch.multinomial(probs.cpu(), 1, generator=generator))

    def _note_logprobs(self, call: _Call, logits: torch.Tensor, tokens: list[int]) -> None:
        """OpenAI's logprobs entries of `tokens` (row i of `logits` chose tokens[i]), when the
        request asked: the model's own log-probabilities (temperature 1, before the tool-call
        grammar's mask), with the `top_logprobs` most probable tokens."""
        if not call.logprobs:
            return
        scores = torch.log_softmax(logits.float(), -1)
        for row, token in zip(scores, tokens, strict=True):
            tops = []
            if call.top_logprobs:
                values, indices = torch.topk(row, call.top_logprobs)
                tops = [self._logprob_entry(int(i), float(v)) for v, i in zip(values, indices, strict=True)]
            call.content.append(self._logprob_entry(token, float(row[token]), tops))

    def _logprob_entry(self, token: int, logprob: float, tops: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        text = self.tokenizer.decode([token], skip_special_tokens=False)
        entry: dict[str, Any] = {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}
        if tops is not None:
            entry["top_logprobs"] = tops
        return entry

    def _message(self, answer: str, call_id: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
        """The assistant message of an answer: its tool call (the first well-formed one, in the
        template's scaffold, else Qwen's `<tool_call>` form) and any text before it; the text alone
        when it holds none. `arguments` is the JSON text as generated (OpenAI's wire format)."""
        text = answer
        for eos in {self.tokenizer.decode([i], skip_special_tokens=False) for i in self.eos_ids}:
            text = text.removesuffix(eos)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if not tools:
            return message
        found = _scaffold_call(text, self.scaffold) or _hermes_call(text)
        if found is not None:
            start, name, raw = found
            message["tool_calls"] = [{"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}]
            message["content"] = text[:start].strip() or None
        return message


def _literal(text: str) -> Any:
    return xgr.Grammar.from_ebnf(f"root ::= {json.dumps(text)}")


def _scaffold_call(text: str, scaffold: ToolCallScaffold) -> tuple[int, str, str] | None:
    """(where it starts, the tool's name, its arguments' JSON text) of the first call written in
    the template's scaffold, or None."""
    decoder = json.JSONDecoder()
    start = text.find(scaffold.before)
    while start >= 0:
        named = start + len(scaffold.before)
        middle = text.find(scaffold.middle, named)
        if middle > named and "\n" not in text[named:middle]:
            at = middle + len(scaffold.middle)
            try:
                arguments, end = decoder.raw_decode(text, at)
            except ValueError:
                arguments, end = None, at
            if isinstance(arguments, dict) and text[end:].lstrip().startswith(scaffold.after.strip()):
                return start, text[named:middle], text[at:end]
        start = text.find(scaffold.before, start + 1)
    return None


def _hermes_call(text: str) -> tuple[int, str, str] | None:
    """The first `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Qwen's form, which a
    model may write unconstrained whatever its template)."""
    for match in _TOOL_CALL.finditer(text):
        try:
            call = json.loads(match.group(1))
        except ValueError:
            continue
        if isinstance(call, dict) and isinstance(call.get("name"), str):
            arguments = call.get("arguments", {})
            return match.start(), call["name"], json.dumps(arguments if isinstance(arguments, dict) else {})
    return None


def _required_tools(tools: list[dict[str, Any]], tool_choice: Any) -> list[dict[str, Any]]:
    """The tools a call must be one of: the named one, or all for "required"; [] otherwise."""
    named = [t for t in tools if isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)]
    if tool_choice == "required":
        if not named:
            raise PolicyCannotAct('tool_choice is "required" but the request offers no tools')
        return named
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        chosen = [t for t in named if t["function"]["name"] == name]
        if not chosen:
            raise PolicyCannotAct(f"tool_choice names tool {name!r}, which the request does not offer")
        return chosen
    return []
