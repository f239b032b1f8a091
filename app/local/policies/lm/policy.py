"""The `lm` policy: the language model `[model] base` names, acting and trained with TRL.

LmPolicy is the seam (base.Policy): it reads [policy]/[model] options, loads the model (LoRA
wrapped unless `trainer_mode = "full"`), sets up the tool-call grammar compiler, and describes
itself. The rest are its parts, each a module of this package:
- acting.py (`Acting`: `act`): the acting template, one joined token sequence per episode,
  xgrammar-constrained tool calls, own forward passes or a vLLM server;
- batching.py (`Batcher`): the generation loop of own forward passes, concurrent episodes' turns
  decoded together, each episode's KV cache kept across its turns;
- grpo_thread.py (`GrpoThread`: `update`, `close`): TRL's GRPOTrainer in a thread of its own,
  fed each step's episodes through `rollout_func`;
- checkpoint.py (`Checkpoints`: `save`, `load`, `_restore`): the adapter or model, the
  manifest, the optimizer state (`regrouped` converts an older one to the trainer's groups).

docs/embedded-policy.md#the-lm-policy. torch and xgrammar are imported at module level here and
in acting.py, grpo_thread.py and checkpoint.py; transformers, trl, peft, datasets and
safetensors inside the functions that use them. This module is imported only when an `lm` job
starts: by `policies.make_policy` and by a data-parallel rank (app/local/parallel/worker.py),
never at start-up (tests/cli/test_first_paint_imports.py).
"""

from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from importlib.metadata import version
from pathlib import Path
from typing import Any, ClassVar

import torch
import xgrammar as xgr

from app.core.errors import SynthTuiError
from app.local.parallel.vllm import VllmGenerator, VllmPlan
from app.local.policies import heap
from app.local.policies.base import PolicyInfo, PolicySettings
from app.local.policies.lm.acting import Acting, EpisodeSequence
from app.local.policies.lm.batching import Batcher
from app.local.policies.lm.chat_templates import (
    HERMES_SCAFFOLD,
    ToolCallScaffold,
    acting_template,
    judge_template,
    tool_call_scaffold,
)
from app.local.policies.lm.checkpoint import Checkpoints, Resume
from app.local.policies.lm.grpo_thread import Training
from app.local.policies.lm.model import TRAINER_MODES, LoadedModel, ModelUnavailable, load, load_tokenizer, resolve
from app.local.policies.lm.objective import objective_from
from app.local.policies.lm.off_policy import off_policy_from

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
# LoRA dropout 0: RL practice (a dropped-out forward pass is not the policy that sampled, so the
# ratio and the logprobs would be another model's); [training.lora] dropout sets it.
LORA_DEFAULTS: dict[str, Any] = {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": "all-linear"}


def _option(options: dict[str, Any], key: str, default: Any) -> Any:
    value = options.get(key)
    return default if value is None else value


class LmPolicy(Acting, Checkpoints):
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
        if self.temperature <= 0.0:
            raise ModelUnavailable(
                f"[policy] temperature {self.temperature:g} is greedy decoding: every rollout of a group would be "
                "the same answer, so GRPO has nothing to compare and its logprobs are not the sampling "
                "distribution's. Set [policy] temperature = 1.0 (the model's own distribution) or another value "
                "above 0 for training")
        self.objective = objective_from(options)
        # [training] async_generation and its importance sampling (off_policy.py).
        self.off_policy = off_policy_from(options)
        self.top_p = float(_option(options, "top_p", DEFAULT_TOP_P))
        self.max_tokens = min(int(_option(options, "max_tokens", DEFAULT_MAX_TOKENS)), MAX_MAX_TOKENS)
        self.lora = {**LORA_DEFAULTS, **{k: v for k, v in dict(options.get("lora") or {}).items() if v is not None}}
        self.base = settings.model
        template = options.get("chat_template")  # [model] chat_template: replaces the model's own
        self.chat_template = str(template) if template else None
        heap.bound_the_heap()  # before the model's tensors are allocated (policies/heap.py)
        self.loaded = loaded or self._load(resolve(settings.model))
        self.tokenizer = self.loaded.tokenizer
        self.model = self.loaded.model
        if self.trainer_mode == "lora":
            self._wrap_lora()
        self.steps_done = 0
        self.lock = threading.Lock()  # one forward pass (batching.py) or training step at a time on the model
        self.sequences_lock = threading.Lock()  # the episodes' sequences (acting.py), apart from the model
        self.template, self.template_kind = acting_template(self.tokenizer, self.base,
                                                            "as written" if self.chat_template else "own")
        if self.chat_template:
            self.template_kind = f"[model] chat_template {self.chat_template!r}, {self.template_kind}"
        self.eos_ids = self._eos_ids()
        self.scaffold = self._scaffold()
        self._info = xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=self._vocab_size(),
                                                        stop_token_ids=self.eos_ids)
        self._compiler = xgr.GrammarCompiler(self._info)
        self._grammars: dict[str, tuple[Any, str]] = {}  # tool set -> (compiled grammar, its EBNF)
        self.episodes: OrderedDict[str, EpisodeSequence] = OrderedDict()
        self.restarts = 0  # episodes whose history stopped extending their sequence, since the job began
        self.restarts_reported = 0  # of which the step events counted so far (each step says its own)
        self.first_restart: dict[str, Any] | None = None
        self.restart_warned = False  # the warning at a job's first restart is given once
        self.unfinished_calls = 0
        self.weights_version = 0
        self.batcher = Batcher(self)  # the generation loop: its thread starts with the first turn
        self.training: Training | None = None
        # A resumed job's checkpoint: its optimizer state goes into the trainer's optimizer once the
        # trainer has prepared it (on_train_begin): optimizer.pt's content, or the engine's folder.
        self._resume: Resume | None = None
        self.main_process = True  # a data-parallel rank other than 0 writes its engine shards only
        # What a data-parallel rank changes (app/local/parallel/worker.py): GRPOConfig arguments (its
        # share of the batch, the collectives' timeout), calls made with the built trainer, and
        # main_process.
        self.grpo_overrides: dict[str, Any] = {}
        self.trainer_hooks: list[Any] = []
        self.zero_std_share: list[bool] | None = None  # a rank's, told by the backend (worker.py)
        self.step_learns: bool | None = None
        # Generation through a vLLM server (`--vllm-server`) or the trainer's colocated vLLM
        # (`--vllm-colocate`; docs/scaling.md), else our own forward passes.
        self.generator: VllmGenerator | None = None
        self._colocating = threading.Lock()  # one trainer start for the turns that ask at once
        if vllm is not None and vllm.mode != "off":
            self.generator = self._connect(vllm, connect)
        # Loading's temporary buffers (the checkpoint's tensors, the LoRA wrap) back to the system.
        heap.release_freed_memory()

    def _connect(self, plan: VllmPlan, connect: Any) -> VllmGenerator:
        """The vLLM generator; refused at the job's start, in a sentence with its fix, where the plan
        cannot run (no GPU, no vllm, a .gguf base for colocated vLLM: TRL's engine loads the model's
        folder in Hugging Face format)."""
        sampling = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}
        if plan.mode != "colocate":
            return connect(plan, **sampling)  # type: ignore[no-any-return]
        if self.loaded.gguf_file:
            raise ModelUnavailable(f"colocated vLLM loads {self.base} from its folder in Hugging Face format, and "
                                   f"this base is a .gguf file ({self.loaded.gguf_file}): point [model] base at the "
                                   "model's Hugging Face folder, or leave --vllm-colocate out")
        try:
            generator: VllmGenerator = connect(plan, start=self._start_colocated, **sampling)
        except SynthTuiError as exc:  # no GPU, no vllm: the job fails with the sentence and its fix
            raise ModelUnavailable(f"{exc.message} {exc.hint or ''}".strip()) from None
        attach = getattr(generator.client, "attach", None)
        if attach is not None:
            self.trainer_hooks.append(attach)  # the engine, once the trainer has built it
        return generator

    def _start_colocated(self) -> None:
        """The trainer now, at the first turn: TRL builds the colocated vLLM engine in GRPOTrainer's
        constructor. Returns once the training thread waits for its first batch (a resumed job's
        weights pushed to the engine by then: on_train_begin)."""
        with self._colocating:
            if self.training is None:
                self.training = self._start_training()
            self._wait_parked(self.training)
            if self.training.error is not None:
                raise RuntimeError(f"the trainer with colocated vLLM did not start: "
                                   f"{type(self.training.error).__name__}: {self.training.error}")

    # -- setup --------------------------------------------------------------------------

    def _wrap_lora(self) -> None:
        from peft import LoraConfig, get_peft_model

        config = LoraConfig(r=int(self.lora["r"]), lora_alpha=int(self.lora["alpha"]),
                            lora_dropout=float(self.lora["dropout"]), target_modules=self.lora["target_modules"],
                            task_type="CAUSAL_LM")
        torch.manual_seed(self.settings.seed)
        self.model = get_peft_model(self.model, config)

    def _scaffold(self) -> ToolCallScaffold:
        """The template's tool-call scaffold (what it renders back for a call: generating it keeps
        every turn of an episode in one sequence), else Qwen's, said in the policy event."""
        problem = "has no end-of-turn token"
        for eos in self.eos_ids if self.template else []:
            assert self.template is not None
            end_of_turn = self.tokenizer.decode([eos], skip_special_tokens=False)
            found = tool_call_scaffold(self.tokenizer, self.template, end_of_turn)
            if isinstance(found, ToolCallScaffold):
                return found
            problem = found
        self.template_kind += (f"; its tool-call form could not be learned (the template {problem}): calls are "
                               "generated in Qwen's <tool_call> form and multi-turn episodes may restart")
        return HERMES_SCAFFOLD

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

    def close(self) -> None:
        """The generation loop (turns in flight end as cancelled, the kept caches are freed), then
        the training thread (grpo_thread.py)."""
        self.batcher.close()
        super().close()

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
                **self.objective.describe(), **self.off_policy.describe(), "chat_template": self.template_kind,
                "versions": versions,
                "generation": self.generator.describe() if self.generator else "own forward passes (xgrammar)"}
        if self.trainer_mode == "lora":
            data["lora"] = self.lora
        if self.loaded.gguf_file:
            data["gguf_file"] = self.loaded.gguf_file
        lib = ", ".join(f"{k} {v}" for k, v in versions.items())
        goal = self.objective
        return PolicyInfo(kind=self.kind, label=label, stand_in=False, data=data, warnings=(
            () if self.resume_warning is None else (self.resume_warning,)), message=(
            f"The embedded backend trains {self.base} ({total:,} parameters, {trainable:,} trainable, "
            f"{self.trainer_mode}) on {self.loaded.device} in {self.loaded.dtype} with TRL's GRPOTrainer "
            f"(loss_type {goal.loss_type}, variety {goal.variety}, num_iterations {goal.num_iterations}); {lib}"))


def _version(name: str) -> str:
    try:
        return version(name)
    except Exception:  # noqa: BLE001 - a missing distribution is shown, not fatal
        return "unknown"
