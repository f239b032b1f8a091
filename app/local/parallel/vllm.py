"""vLLM generation for the `lm` policy (GPUs only; not run on this project's machines).

Written to TRL 1.16's interfaces: `trl vllm-serve` (trl/scripts/vllm_serve.py, which now runs
vLLM's own `vllm serve` with the flags TRL needs), GRPOConfig's vllm_* fields,
trl/generation/vllm_client.py's VLLMClient (generate, update_model_params, reset_prefix_cache) for
server mode, and trl/generation/vllm_generation.py's VLLMGeneration (the `llm` GRPOTrainer builds
with vllm_mode "colocate", its `sync_weights`, `extract_logprobs`) for colocate mode.
docs/scaling.md says what has run here (the command lines, the config fields, the adapters
against a fake server on loopback and a fake engine) and what has not (everything on a GPU).
"""

from __future__ import annotations

import importlib.util
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from urllib.parse import urlparse

from app.core.errors import ConfigError, UsageError
from app.local.parallel.accelerate import AccelerateSetup, cuda_available, refuse_without_gpu

VllmMode = Literal["off", "server", "colocate"]


@dataclass(frozen=True)
class VllmPlan:
    """How the ranks generate: "off" (the policy's own generate with xgrammar, CPU or GPU),
    "server" (a `trl vllm-serve` at server_url, on GPUs of its own) or "colocate" (vLLM inside
    each rank, sharing its GPU: gpu_memory_utilization is vLLM's share of it)."""

    mode: VllmMode = "off"
    server_url: str | None = None
    gpu_memory_utilization: float = 0.3
    tensor_parallel_size: int = 1
    server_timeout: float = 240.0

    def __post_init__(self) -> None:
        problems = []
        if self.mode not in ("off", "server", "colocate"):
            problems.append(f"vLLM mode {self.mode!r} is not off, server or colocate")
        if self.mode == "server" and not _http_url(self.server_url):
            problems.append(f"vLLM server mode needs the server's http(s) URL (got {self.server_url!r})")
        if self.mode != "server" and self.server_url is not None:
            problems.append(f"a vLLM server URL is given but the mode is {self.mode!r}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            problems.append(f"gpu_memory_utilization {self.gpu_memory_utilization} is not in (0, 1]")
        if self.tensor_parallel_size < 1:
            problems.append(f"tensor_parallel_size {self.tensor_parallel_size} is below 1")
        if problems:
            raise ConfigError("; ".join(problems), hint="e.g. VllmPlan('server', 'http://10.0.0.5:8000') or "
                              "VllmPlan('colocate', gpu_memory_utilization=0.3)")


def _http_url(url: str | None) -> bool:
    if not url:
        return False
    parsed = urlparse(url)
    return parsed.scheme in ("http", "https") and bool(parsed.hostname)


def vllm_serve_command(model: str, port: int = 8000, tp: int = 1, *, host: str = "127.0.0.1",
                       gpu_memory_utilization: float = 0.9, max_model_len: int | None = None,
                       dtype: str = "auto", trl: str = "trl") -> list[str]:
    """`trl vllm-serve …`: the generation server a user starts on GPUs of their own (server mode).
    TRL 1.16 runs vLLM's `vllm serve` from it with VLLM_SERVER_DEV_MODE=1 and NCCL weight transfer
    (and deprecates the wrapper for v2). host 127.0.0.1 keeps it on this machine; the trainer on
    another machine needs host 0.0.0.0 and a trusted network (the server has no authentication)."""
    if tp < 1 or not 0 < port < 65536:
        raise ValueError(f"tp must be at least 1 and port a TCP port (got {tp}, {port})")
    command = [trl, "vllm-serve", "--model", model, "--host", host, "--port", str(port),
               "--tensor_parallel_size", str(tp), "--gpu_memory_utilization", str(gpu_memory_utilization),
               "--dtype", dtype]
    if max_model_len is not None:
        command += ["--max_model_len", str(max_model_len)]
    return command


def grpo_vllm_kwargs(plan: VllmPlan, setup: AccelerateSetup | None) -> dict[str, Any]:
    """The GRPOConfig fields for a plan and an accelerate setup (checked against GRPOConfig's
    fields in a test): bf16 on GPUs, use_cpu on CPU, and vLLM's settings when it generates."""
    on_cpu = setup is None or setup.on_cpu
    fp16 = not on_cpu and setup is not None and setup.mixed_precision == "fp16"
    kwargs: dict[str, Any] = {"use_cpu": on_cpu, "bf16": not on_cpu and not fp16, "fp16": fp16,
                              "use_vllm": plan.mode != "off"}
    if plan.mode == "server":
        kwargs.update(vllm_mode="server", vllm_server_base_url=plan.server_url,
                      vllm_server_timeout=plan.server_timeout)
    elif plan.mode == "colocate":
        # Sleep mode off: TRL would put the engine to sleep after its own generate, which the policy
        # never calls (its turns go to the engine directly, ColocatedVllm), so it would stay asleep.
        kwargs.update(vllm_mode="colocate", vllm_gpu_memory_utilization=plan.gpu_memory_utilization,
                      vllm_tensor_parallel_size=plan.tensor_parallel_size, vllm_enable_sleep_mode=False)
    return kwargs


def vllm_installed() -> bool:
    return importlib.util.find_spec("vllm") is not None


def refuse_colocated(plan: VllmPlan, *, has_cuda: Callable[[], bool] = cuda_available,
                     has_vllm: Callable[[], bool] = vllm_installed) -> None:
    """Colocated vLLM on this machine: a CUDA GPU, vLLM installed (TRL builds its engine in this
    process) and one GPU per engine (a turn is one rank's, never a tensor-parallel collective).
    Raises NoGpuError, UsageError (no vllm) or ConfigError (tensor parallelism): one sentence with its
    fix each (the backend's start: exit 2; a job's start: its failure)."""
    refuse_without_gpu(None, plan, has_cuda=has_cuda)
    if not has_vllm():
        raise UsageError("colocated vLLM generation was asked, but the vllm package is not installed in this "
                         "Python (TRL builds vLLM's engine inside the backend's process).",
                         hint="pip install '.[gpu]' (vLLM, with the CUDA build of torch), or leave --vllm-colocate "
                              "out (the model's own forward passes generate)")
    if plan.tensor_parallel_size != 1:
        raise ConfigError(f"colocated vLLM generates each turn on its rank's GPU: tensor_parallel_size must be 1 "
                          f"(got {plan.tensor_parallel_size})",
                          hint="a model larger than one GPU generates through a vLLM server (--vllm-server URL)")


class VllmClientLike(Protocol):
    """The part of trl.generation.vllm_client.VLLMClient (TRL 1.16) the adapter uses."""

    def generate(self, prompts: list[list[int]], *, n: int = ..., temperature: float = ..., top_p: float = ...,
                 max_tokens: int = ..., logprobs: int | None = ...,
                 generation_kwargs: dict[str, Any] | None = ...) -> Mapping[str, Any]: ...

    def update_model_params(self, model: Any) -> None: ...

    def reset_prefix_cache(self) -> None: ...


@dataclass(frozen=True)
class GeneratedTurn:
    """One turn's generation: the ids vLLM saw, the ids it sampled and each one's logprob."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    seconds: float


class VllmGenerator:
    """One chat turn (its prompt already rendered and tokenized by the policy, the episode's
    joined sequence) → one VLLMClient.generate call; the weights pushed after each GRPO step."""

    def __init__(self, client: VllmClientLike, *, temperature: float = 1.0, top_p: float = 1.0,
                 max_tokens: int = 256, plan: VllmPlan | None = None) -> None:
        self.client = client
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.plan = plan  # None: a client made by hand (the trainer then owns no vLLM connection)
        self.weight_syncs = 0

    def describe(self) -> str:
        """Where generation runs, for the policy's first event (no user:password of the URL)."""
        if self.plan is not None and self.plan.mode == "colocate":
            return f"colocated vLLM ({self.plan.gpu_memory_utilization:.0%} of the GPU's memory)"
        raw = self.plan.server_url if self.plan is not None else getattr(self.client, "base_url", None)
        url = urlparse(str(raw or ""))
        if not url.hostname:
            return "vLLM server"
        return f"vLLM server at {url.scheme}://{url.hostname}" + (f":{url.port}" if url.port else "")

    def trainer_kwargs(self) -> dict[str, Any]:
        """GRPOConfig's vLLM fields for this generator's plan: the trainer then holds the weight
        push's NCCL connection to the server (on the main process) and gathers ZeRO-3/FSDP shards
        and merges LoRA for it (sync_through_trainer)."""
        if self.plan is None:
            return {}
        kwargs = grpo_vllm_kwargs(self.plan, None)
        return {key: kwargs[key] for key in kwargs if key.startswith("vllm_") or key == "use_vllm"}

    def after_step(self, trainer: Any) -> None:
        """Called by the policy in the training thread after each optimizer step, before the
        step's logs release the next rollouts: every rank at the same point (the sync is a
        collective under ZeRO-3/FSDP)."""
        self.sync_through_trainer(trainer)

    @classmethod
    def connect(cls, plan: VllmPlan, *, has_cuda: Callable[[], bool] = cuda_available,
                has_vllm: Callable[[], bool] = vllm_installed, start: Callable[[], None] | None = None,
                **sampling: Any) -> VllmGenerator:
        """A generator on the plan's server, or on the trainer's colocated engine (`start` builds the
        trainer, which builds the engine: ColocatedVllm). Refused without a GPU (the weight sync is
        NCCL, the engine CUDA's) or without vLLM installed (the `gpu` extra)."""
        if plan.mode == "colocate":
            refuse_colocated(plan, has_cuda=has_cuda, has_vllm=has_vllm)
            if start is None:
                raise ConfigError("colocated vLLM needs the policy's trainer to start its engine (start=)")
            return cls(ColocatedVllm(start), plan=plan, **sampling)
        if plan.mode != "server":
            raise ConfigError(f"VllmGenerator.connect needs a vLLM plan, server or colocate (got mode {plan.mode!r})",
                              hint="mode off generates with the model's own forward passes")
        refuse_without_gpu(None, plan, has_cuda=has_cuda)
        from trl.generation.vllm_client import VLLMClient

        return cls(VLLMClient(base_url=plan.server_url, connection_timeout=plan.server_timeout), plan=plan,
                   **sampling)

    def turn(self, prompt_ids: Sequence[int], *, seed: int | None = None, grammar: str | None = None,
             max_tokens: int | None = None, greedy: bool = False) -> GeneratedTurn:
        """Sample one completion of `prompt_ids`. `grammar`: an EBNF grammar (str() of the policy's
        xgrammar Grammar) sent as vLLM's structured_outputs; `seed` makes the sample reproducible;
        `greedy`: temperature 0 (an evaluation's turn)."""
        extra: dict[str, Any] = {}
        if seed is not None:
            extra["seed"] = seed
        if grammar is not None:
            extra["structured_outputs"] = {"grammar": grammar}
        started = time.perf_counter()
        temperature = 0.0 if greedy else self.temperature
        out = self.client.generate(prompts=[list(prompt_ids)], n=1, temperature=temperature, top_p=self.top_p,
                                   max_tokens=max_tokens or self.max_tokens, logprobs=0,
                                   generation_kwargs=extra or None)
        seconds = time.perf_counter() - started
        completion = [int(t) for t in out["completion_ids"][0]]
        logprobs = _sampled_logprobs(completion, out.get("logprobs"), out.get("logprob_token_ids"))
        return GeneratedTurn([int(t) for t in out["prompt_ids"][0]], completion, logprobs, seconds)

    def sync_weights(self, model: Any) -> None:
        """After each optimizer step, before the next acting: push the weights, drop cached prefixes.
        (TRL's own sync runs when rollout_func is called, after the acting: one step late here.)
        On the main process only; under ZeRO-3/FSDP/LoRA use sync_through_trainer (gathers, merges)."""
        self.client.update_model_params(model)
        self.client.reset_prefix_cache()
        self.weight_syncs += 1

    def sync_through_trainer(self, trainer: Any) -> None:
        """The same through GRPOTrainer (use_vllm): its sync gathers ZeRO-3/FSDP shards and merges a
        LoRA adapter. A collective: every rank calls it. TRL's own sync for this step is then skipped."""
        from app.local.policies.trl_compat import mark_weights_synced

        trainer.vllm_generation.sync_weights()  # a colocated engine's: under its lock (ColocatedVllm.attach)
        mark_weights_synced(trainer)
        self.weight_syncs += 1


class ColocatedVllm:
    """VllmClientLike over the vLLM engine GRPOTrainer builds with vllm_mode "colocate" (TRL's
    VLLMGeneration.llm, in this process, on this rank's GPU). The trainer, and with it the engine,
    is built when the first turn asks (`start`: the policy's); `attach` (a trainer hook) takes the
    engine and puts its weight sync under the same lock as generation: vLLM's offline engine
    serves one caller at a time, so turns in flight take turns here (a server batches them)."""

    def __init__(self, start: Callable[[], None]) -> None:
        self.start = start
        self.lock = threading.Lock()
        self.engine: Any = None  # trl.generation.vllm_generation.VLLMGeneration, once the trainer exists

    def attach(self, trainer: Any) -> None:
        engine = trainer.vllm_generation
        sync = engine.sync_weights

        def sync_under_lock() -> None:  # TRL's own sync (its first rollout_func) and after_step's
            with self.lock:
                sync()

        engine.sync_weights = sync_under_lock
        self.engine = engine

    def generate(self, prompts: list[list[int]], *, n: int = 1, temperature: float = 1.0, top_p: float = 1.0,
                 max_tokens: int = 16, logprobs: int | None = 0,
                 generation_kwargs: dict[str, Any] | None = None) -> Mapping[str, Any]:
        """One call of the engine, answered as VLLMClient.generate answers (TRL's extract_logprobs)."""
        from trl.generation.vllm_generation import extract_logprobs
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        if self.engine is None:
            self.start()
        if self.engine is None:
            raise RuntimeError("the trainer started without a colocated vLLM engine (is use_vllm set?)")
        extra = dict(generation_kwargs or {})
        structured = extra.pop("structured_outputs", None)
        params = SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens, logprobs=logprobs,
                                structured_outputs=StructuredOutputsParams(**structured) if structured else None,
                                **extra)
        with self.lock:
            outputs = self.engine.llm.generate([{"prompt_token_ids": list(p)} for p in prompts],
                                               sampling_params=params, use_tqdm=False)
        sampled, ranked_ids = extract_logprobs(outputs)
        return {"prompt_ids": [list(o.prompt_token_ids) for o in outputs],
                "completion_ids": [list(c.token_ids) for o in outputs for c in o.outputs],
                "logprobs": sampled, "logprob_token_ids": ranked_ids}

    def update_model_params(self, model: Any) -> None:
        raise NotImplementedError("a colocated engine's weights are synced through the trainer (sync_through_trainer)")

    def reset_prefix_cache(self) -> None:
        with self.lock:
            self.engine.llm.reset_prefix_cache()


def _sampled_logprobs(completion: list[int], logprobs: Any, token_ids: Any) -> list[float]:
    """Each sampled token's logprob out of VLLMClient's (sequence, position, rank) lists."""
    if not logprobs or not token_ids or logprobs[0] is None:
        raise ValueError("the vLLM server returned no logprobs; GRPO needs them (is it TRL's vllm-serve?)")
    out = []
    for position, token in enumerate(completion):
        ranked_ids, ranked = token_ids[0][position], logprobs[0][position]
        value = ranked[ranked_ids.index(token)] if token in ranked_ids else None
        if value is None or math.isnan(value):
            raise ValueError(f"the vLLM server returned no logprob for the token at position {position}")
        out.append(float(value))
    return out
