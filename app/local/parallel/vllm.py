"""vLLM generation for the data-parallel `lm` policy (GPUs only; not run on this project's machines).

Written to TRL 1.16's interfaces: `trl vllm-serve` (trl/scripts/vllm_serve.py, which now runs
vLLM's own `vllm serve` with the flags TRL needs), GRPOConfig's vllm_* fields, and
trl/generation/vllm_client.py's VLLMClient (generate, update_model_params, reset_prefix_cache).
docs/scaling.md says what has run here (the command lines, the config fields, the adapter
against a fake server on loopback) and what has not (everything on a GPU).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol
from urllib.parse import urlparse

from app.core.errors import ConfigError
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
        kwargs.update(vllm_mode="colocate", vllm_gpu_memory_utilization=plan.gpu_memory_utilization,
                      vllm_tensor_parallel_size=plan.tensor_parallel_size)
    return kwargs


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
                **sampling: Any) -> VllmGenerator:
        """A generator on the plan's server: refused without a GPU (the weight sync is NCCL) or
        without vLLM installed (TRL's client needs it; the `gpu` extra)."""
        if plan.mode != "server":
            raise ConfigError(f"VllmGenerator.connect needs a vLLM server plan (got mode {plan.mode!r})",
                              hint="colocated vLLM generates through the trainer (grpo_vllm_kwargs)")
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

        trainer.vllm_generation.sync_weights()
        mark_weights_synced(trainer)
        self.weight_syncs += 1


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
