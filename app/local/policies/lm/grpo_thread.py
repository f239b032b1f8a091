"""The `lm` policy's training: TRL's GRPOTrainer in a thread of its own, fed through `rollout_func`.

One GRPOTrainer per job, built on the first update (or on a resumed job's load under a vLLM
server), trains in a thread of its own; its `rollout_func` takes each step's scored episodes from
a queue that `update` fills (prompt = the episode's first prompt, completion = the rest of its
sequence, `env_mask` 0 on the task app's tokens), and `update` waits for that step's logs. The
training thread holds the policy's lock from `rollout_func` until the step's logs (on_log), so
acting and a step never share the model; between two steps it waits parked, in no collective.
With `[training] async_generation` it holds the lock per micro-batch and optimizer step instead,
so the next step's turns act in between (off_policy.py).

`GrpoThread` is a part of app/local/policies/lm/policy.py's LmPolicy (which sets the attributes
declared here); transformers, trl and datasets are imported inside the functions that use them.
docs/embedded-policy.md#grpotrainer-wiring.
"""

from __future__ import annotations

import functools
import math
import queue
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.local.parallel.vllm import VllmGenerator
from app.local.policies import heap
from app.local.policies.base import Episode, PolicySettings, UpdateStats, reward_spread
from app.local.policies.lm.acting import EpisodeSequence, TurnMemo
from app.local.policies.lm.memory import memory_arguments
from app.local.policies.lm.model import LoadedModel
from app.local.policies.lm.objective import Objective
from app.local.policies.lm.off_policy import OffPolicy, install_correction, lock_per_micro_batch

if TYPE_CHECKING:
    from app.local.policies.lm.checkpoint import Resume

STEP_TIMEOUT_S = 3600.0  # one GRPO step, once its episodes are handed over


class _Closed(Exception):
    """Raised inside the training thread's rollout_func to end train() (close())."""


@dataclass
class _Batch:
    samples: dict[str, list[Any]]
    stats: dict[str, float]
    learns: bool = True  # some group's scores differ: else the step leaves the weights as they are


@dataclass
class Training:
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
    learns: bool = True  # the batch being trained has a group whose scores differ (_guard_optimizer)
    # async_generation (off_policy.py): the lock per micro-batch. `entered`: the first micro-batch
    # began (the trainer's setup, done under the lock, is over); `locked[0]`: the thread holds it.
    entered: threading.Event = field(default_factory=threading.Event)
    locked: list[bool] = field(default_factory=lambda: [False])
    is_ratios: dict[str, float] = field(default_factory=dict)  # the last batch's importance ratios

    def release(self, lock: threading.Lock) -> None:
        if self.holding:
            self.holding = False
            lock.release()


class GrpoThread:
    """LmPolicy's `update` and `close`: the GRPOTrainer, its thread and the hand-off with it."""

    settings: PolicySettings
    model: Any
    tokenizer: Any
    loaded: LoadedModel
    lock: threading.Lock
    sequences_lock: threading.Lock
    generator: VllmGenerator | None
    training: Training | None
    steps_done: int
    kl_coef: float
    temperature: float
    max_tokens: int
    eos_ids: list[int]
    episodes: OrderedDict[str, EpisodeSequence]
    restarts: int
    restarts_reported: int
    first_restart: dict[str, Any] | None
    restart_warned: bool
    template_kind: str
    chat_template: str | None
    base: str
    unfinished_calls: int
    grpo_overrides: dict[str, Any]
    objective: Objective
    off_policy: OffPolicy
    # Set by a data-parallel rank (app/local/parallel/worker.py) from the whole step, which it does
    # not see: each of its episodes' group scored all alike, and whether any group of the step did not.
    zero_std_share: list[bool] | None
    step_learns: bool | None
    trainer_hooks: list[Any]
    _resume: Resume | None

    if TYPE_CHECKING:
        def _restore(self, trainer: Any) -> None: ...  # app/local/policies/lm/checkpoint.py
        def weights_changed(self) -> None: ...  # app/local/policies/lm/acting.py

    def update(self, groups: list[list[Episode]]) -> UpdateStats:
        if self.training is None:
            self.training = self._first_training()
        training = self.training
        training.is_ratios.clear()
        batch = self._batch(groups)
        started = time.perf_counter()
        training.batches.put(batch)
        for _ in range(self.objective.num_iterations):  # one optimizer step per pass over the batch
            logs = self._wait_for_logs(training)
        self.steps_done += 1
        with self.sequences_lock:  # the next step's turns may be adding theirs (async_generation)
            for group in groups:  # their sequences are learned from: forget them
                for episode in group:
                    for memo in episode.memos:
                        if isinstance(memo, TurnMemo):
                            for key in [k for k, v in self.episodes.items() if v is memo.sequence]:
                                del self.episodes[key]
        extra = {**batch.stats, "step_seconds": round(time.perf_counter() - started, 3), **training.is_ratios}
        # The step's activations and gradients, freed in the training thread's heap arena, back to
        # the system before the next rollouts allocate theirs in other threads' (policies/heap.py).
        heap.release_freed_memory(collect=False)
        # reward_std is the groups' (reward_spread), not TRL's: its reward_std is the whole batch's,
        # which the group advantages never divide by. frac_reward_zero_std is TRL's when it logs it
        # (the groups as its advantages formed them, from every rank's rewards).
        for ours, theirs in (("reward_mean", "reward"), ("kl", "kl"), ("clip_ratio", "clip_ratio/region_mean"),
                             ("grad_norm", "grad_norm"), ("learning_rate", "learning_rate"),
                             ("entropy_full_vocab", "entropy"), ("frac_reward_zero_std", "frac_reward_zero_std")):
            if theirs in logs and (ours != "kl" or self.kl_coef > 0):
                extra[ours] = float(logs[theirs])
        # The entropy over the tokens the model chose (docs/embedded-policy.md#metrics); TRL's, over
        # the whole vocabulary, when no turn measured it (a vLLM server's).
        entropy = extra.pop("sampled_entropy", math.nan)
        if not math.isfinite(entropy):
            entropy = float(logs.get("entropy", math.nan))
        return UpdateStats(loss=float(logs.get("loss", math.nan)), entropy=entropy, extra=extra,
                           events=self._restart_warning())

    def _restart_warning(self) -> list[dict[str, Any]]:
        """At the job's first restart, once: a warning naming the template and where the texts
        parted (the turns before a restart sit in the prompt, without loss)."""
        part = self.first_restart
        if part is None or self.restart_warned:
            return []
        self.restart_warned = True
        template = f"[model] chat_template {self.chat_template!r}" if self.chat_template else f"{self.base}'s own"
        return [{"type": "rl.train.policy.warning", "level": "warning", "message": (
            f"An episode restarted: the task app's history, rendered with the chat template ({template}; "
            f"{self.template_kind}), no longer extends the text the model generated, from character "
            f"{part['offset']} (generated {part['generated']!r}, rendered {part['rendered']!r}). The turns before "
            "a restart are trained as prompt, without loss; `episode_restarts` in each step event counts them"),
            "data": {"episode_restarts": self.restarts, "chat_template": template,
                     "acting_template": self.template_kind, **{f"part_{k}": v for k, v in part.items()}}}]

    def _batch(self, groups: list[list[Episode]]) -> _Batch:
        samples: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                                         "env_reward": []}
        tokens = sampled = measured = turns = 0
        seconds = entropy = 0.0
        zero_std = iter(self._zero_std(groups))
        for group in groups:
            for episode in group:
                alike = next(zero_std)
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
                # DAPO's dynamic sampling ([training] zero_std_filter): a group that scored all alike
                # carries no loss and leaves the loss's token count (docs/embedded-policy.md#the-objective).
                filtered = alike and self.objective.zero_std_filter
                samples["env_mask"].append([0] * (end - start) if filtered else sequence.mask[start:end])
                tokens += sum(m.tokens for m in memos)
                sampled += sum(m.sampled for m in memos)
                seconds += sum(m.seconds for m in memos)
                turns += len(memos)
                known = [m for m in memos if math.isfinite(m.entropy_sum)]
                measured += sum(m.sampled for m in known)
                entropy += sum(m.entropy_sum for m in known)
        restarts, self.restarts_reported = self.restarts - self.restarts_reported, self.restarts  # this step's
        # Tokens/s over the sampled tokens only: a forced scaffold costs one forward pass for many tokens.
        stats = {"completion_tokens": float(tokens), "sampled_tokens": float(sampled),
                 "forced_tokens": float(tokens - sampled), "model_turns": float(turns),
                 "generation_tokens_per_s": round(sampled / seconds, 2) if seconds > 0 else 0.0,
                 "generation_seconds": round(seconds, 3), "entropy_tokens": float(measured),
                 "sampled_entropy": entropy / measured if measured else math.nan,
                 **reward_spread(groups, bessel=True),  # TRL's advantages divide by the Bessel-corrected std
                 "episode_restarts": float(restarts), "unfinished_calls": float(self.unfinished_calls)}
        learns = self.step_learns if self.step_learns is not None else not all(self._zero_std(groups))
        return _Batch(samples, stats, learns=learns)

    def _zero_std(self, groups: list[list[Episode]]) -> list[bool]:
        """Per episode: its group scored all alike (no advantage; a rank is told, zero_std_share)."""
        if self.zero_std_share is not None:
            return list(self.zero_std_share)
        return [len({e.score for e in group}) <= 1 for group in groups for _ in group]

    def _wait_for_logs(self, training: Training) -> dict[str, float]:
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
        overrides = dict(self.grpo_overrides)
        # One process's share of the step (a data-parallel rank's is set by app/local/parallel/worker.py),
        # cut into micro-batches (app/local/policies/lm/memory.py).
        share = int(overrides.pop("per_device_train_batch_size", settings.batch_size * settings.group_size))
        output = Path(os.environ.get("TMPDIR", "/tmp")) / f"synth-tui-grpo-{secrets.token_hex(4)}"
        arguments: dict[str, Any] = dict(
            output_dir=str(output), max_steps=remaining * self.objective.num_iterations,
            **memory_arguments(settings.options, share), num_generations=settings.group_size,
            learning_rate=settings.learning_rate, lr_scheduler_type="constant", warmup_steps=0,
            optim="adamw_torch", adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, weight_decay=0.0,
            beta=self.kl_coef, seed=settings.seed, save_strategy="no", report_to="none", logging_steps=1,
            use_cpu=not cuda, bf16=cuda, temperature=max(self.temperature, 1e-6),
            **self.objective.grpo_arguments(), max_completion_length=self.max_tokens,
            scale_rewards="group", mask_truncated_completions=False, log_completions=False,
            shuffle_dataset=False, dataloader_num_workers=0, disable_tqdm=True)
        vllm = self.generator.trainer_kwargs() if self.generator is not None else {}
        return GRPOConfig(**{**arguments, **vllm, **overrides})

    def _first_training(self) -> Training:
        """The trainer, started. With async_generation the next step's turns act meanwhile: its
        setup (peft, accelerate, gradient checkpointing, a resumed optimizer state) changes the
        model, so it runs under the lock, up to its first micro-batch (off_policy.py)."""
        if not self.off_policy.generate_ahead:
            return self._start_training()
        with self.lock:
            training = self._start_training()
            deadline = time.monotonic() + STEP_TIMEOUT_S
            while not training.entered.wait(0.1) and training.thread.is_alive():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the GRPO trainer did not start within {STEP_TIMEOUT_S:.0f} s")
        return training

    def _start_training(self) -> Training:
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
        training_ref: list[Training] = []

        def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
            return self._next_batch(training_ref[0])

        def env_reward(prompts: list[Any], completions: list[Any], env_reward: list[float],
                       **kwargs: Any) -> list[float]:
            return [float(r) for r in env_reward]

        policy = self

        def on_train_begin(callback: Any, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            _guard_optimizer(training_ref[0], policy.lock if policy.off_policy.generate_ahead else None)
            resumed = policy._resume is not None
            policy._restore(training_ref[0].trainer)  # the model and the optimizer are prepared by now
            if resumed and policy.generator is not None:  # the server still has the base weights
                policy.generator.after_step(training_ref[0].trainer)

        def on_log(callback: Any, args: Any, state: Any, control: Any, logs: dict[str, float] | None = None,
                   **kwargs: Any) -> None:
            if logs and "loss" in logs:
                policy._step_logged(training_ref[0], state.global_step, logs)

        # Made with type(): mypy then checks this module the same with or without transformers.
        callback = type("StepLogs", (TrainerCallback,), {"on_log": on_log, "on_train_begin": on_train_begin})

        rewards: list[Any] = [env_reward]
        trainer = GRPOTrainer(model=self.model, reward_funcs=rewards, args=config, train_dataset=dataset,
                              processing_class=self.tokenizer, rollout_func=rollout_func, callbacks=[callback()])

        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)  # its logs go to the job's events, not to stdout

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
        training_ref.append(Training(trainer, thread))
        self._wrap_trainer(training_ref[0])
        for hook in self.trainer_hooks:
            hook(trainer)

        thread.start()
        return training_ref[0]

    def _wrap_trainer(self, training: Training) -> None:
        """async_generation's lock per micro-batch and importance sampling (off_policy.py); without
        it, the recorded logprobs as the old ones (`_generation_logprobs_as_old`)."""
        trainer, off_policy = training.trainer, self.off_policy
        if off_policy.generate_ahead:
            lock_per_micro_batch(trainer, self.lock, training.entered, training.locked)
        if off_policy.corrects and self.generator is None:  # a vLLM server's: TRL's own correction
            install_correction(trainer, off_policy.cap, training.is_ratios.update)
        else:
            _generation_logprobs_as_old(trainer)

    def _step_logged(self, training: Training, global_step: int, logs: dict[str, float]) -> None:
        """An optimizer step's logs (on_log). After the batch's last pass (num_iterations): the new
        weights to the vLLM server before the next rollouts, and the model back to acting."""
        self.weights_changed()  # the generation loop's kept KV caches are the old weights'
        if global_step % self.objective.num_iterations == 0:
            if self.generator is not None:
                self.generator.after_step(training.trainer)
            training.release(self.lock)
        training.logs.put(dict(logs))

    def _next_batch(self, training: Training) -> dict[str, list[Any]]:
        """GRPOTrainer's rollout_func: the samples update() hands over, holding the policy's
        lock until the step's logs arrive (on_log). With async_generation it is called inside a
        locked micro-batch (off_policy.py): the lock is let go while it waits."""
        held = training.locked[0]
        if held:
            self.lock.release()
        try:
            batch = self._take_batch(training)
        finally:
            if held:
                self.lock.acquire()
        if not held:
            self.lock.acquire()  # released when the step's logs arrive (on_log)
            training.holding = True
        training.learns = batch.learns
        training.parked.clear()
        return batch.samples

    @staticmethod
    def _take_batch(training: Training) -> _Batch:
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
            return batch

    def close(self) -> None:
        training, self.training = self.training, None
        if training is None:
            return
        training.closing.set()
        training.batches.put(None)
        training.thread.join(timeout=30.0)

    @staticmethod
    def _wait_parked(training: Training) -> None:
        """Until the training thread waits for its next batch (between two steps, in no collective)."""
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while not training.parked.wait(0.5):
            if not training.thread.is_alive():
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the GRPO step did not end within {STEP_TIMEOUT_S:.0f} s; nothing was saved")


def _guard_optimizer(training: Training, lock: threading.Lock | None) -> None:
    """A step whose every group scored all alike leaves the weights, and Adam's moments, as they
    are: its advantages are all 0, yet AdamW's momentum would still move the weights (the entropy
    fell over such steps while the job said nothing was learned). The trainer's optimizer step is
    skipped, and accelerate, told it was (`step_was_skipped`), skips the scheduler's too. With
    async_generation the step takes the policy's `lock` (the weights change: off_policy.py)."""
    optimizer = training.trainer.optimizer
    step = optimizer.step

    @functools.wraps(step)  # keeps the marks torch's LR scheduler left on it
    def step_when_learning(*args: Any, **kwargs: Any) -> Any:
        if not training.learns:
            optimizer._is_overflow = True  # accelerate's AcceleratedOptimizer.step_was_skipped
            return None
        optimizer._is_overflow = False
        if lock is None:
            return step(*args, **kwargs)
        with lock:
            return step(*args, **kwargs)

    optimizer.step = step_when_learning


def _generation_logprobs_as_old(trainer: Any) -> None:
    """With `num_iterations` > 1 the batch is trained on several times, and the ratio and its
    clipping compare the policy with the one that sampled: the old logprobs are then the ones
    recorded at generation (the model's own, at the sampling temperature: acting.py), not a
    forward pass of the trainer's. Under a vLLM server TRL's own importance-sampling correction
    (the trainer's forward pass against vLLM's logprobs) is left as it is."""
    if trainer.num_iterations <= 1 or getattr(trainer, "use_vllm", False):
        return
    generate = trainer._generate_and_score_completions

    def with_generation_logprobs(*args: Any, **kwargs: Any) -> dict[str, Any]:
        output: dict[str, Any] = generate(*args, **kwargs)
        sampled = output.get("sampling_per_token_logps")
        if sampled is not None:
            output["old_per_token_logps"] = sampled
        return output

    trainer._generate_and_score_completions = with_generation_logprobs
