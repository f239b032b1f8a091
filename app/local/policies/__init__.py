"""The policies the embedded backend can train, behind one seam (base.Policy).

`tabular` is the stand-in (tabular/policy.py); `lm` trains the language model the config names
(lm/policy.py, which needs the trainer extra). The trainer and the chat endpoint reach a policy only
through `make_policy`, `create` and `load` here and the methods of base.Policy.
docs/embedded-policy.md.
"""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from typing import Literal

from app.local.policies.base import Parallel, Policy, PolicySettings, read_manifest
from app.local.policies.lm.model import TRAINER_EXTRA_HINT, ModelNotDownloaded, ModelUnavailable, resolve
from app.local.policies.tabular.policy import TabularPolicy

DEFAULT_POLICY = "tabular"
POLICY_KINDS = ("auto", "lm", "tabular")
KINDS = ("lm", "tabular")
TRAINER_MODULES = ("torch", "transformers", "trl", "peft", "accelerate", "xgrammar", "datasets")


def trainer_extra_missing() -> str | None:
    """Which of the trainer extra's packages are not installed (None when all are)."""
    missing = [name for name in TRAINER_MODULES if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return f"the trainer extra is not installed (missing {', '.join(missing)}; {TRAINER_EXTRA_HINT})"


def lm_unavailable(settings: PolicySettings) -> str | None:
    """Why the `lm` policy cannot train `settings.model` here, or None when it can."""
    missing = trainer_extra_missing()
    if missing:
        return missing
    try:
        resolve(settings.model)
    except ModelUnavailable as exc:
        return str(exc)
    return None


DOWNLOAD: Literal["download"] = "download"


def lm_footprint(settings: PolicySettings) -> Path | Literal["download"] | None:
    """The folder or .gguf file the `lm` policy will load for `settings.model`; DOWNLOAD when
    it will download it first (SYNTH_TUI_MODEL_DOWNLOAD=1); None when it will not load one (the
    trainer extra missing, the model not here: the stand-in trains, or the load fails saying why)."""
    if trainer_extra_missing():
        return None
    try:
        return resolve(settings.model, download=False)
    except ModelNotDownloaded:
        return DOWNLOAD
    except ModelUnavailable:
        return None


ONE_PROCESS = Parallel()
# One language model is built or loaded at a time in this process: TRL's and transformers' first
# imports and a model's load are not safe from two threads at once (a lazy import seen half made,
# a tensor copied off the meta device), and a chat call to a finished job loads one while a job
# may be loading its own (docs/hardening.md, issue 41).
BUILDING = threading.RLock()


def _lm(settings: PolicySettings, parallel: Parallel = ONE_PROCESS, stop: threading.Event | None = None) -> Policy:
    missing = trainer_extra_missing()
    if missing:
        raise ModelUnavailable(f"the lm policy cannot train {settings.model}: {missing}")
    if parallel.processes > 1:  # N rank processes (app/local/parallel/policy.py); this process imports no torch for it
        from app.local.parallel.policy import DistributedLmPolicy

        return DistributedLmPolicy(settings, parallel, stop)
    from app.local.parallel.launch import vllm_plan

    with BUILDING:
        from app.local.policies.lm.policy import LmPolicy  # torch and friends: only now

        return LmPolicy(settings, vllm=vllm_plan(parallel.vllm_server, parallel.vllm_colocate))


def make_policy(choice: str, settings: PolicySettings, parallel: Parallel = ONE_PROCESS,
                stop: threading.Event | None = None) -> tuple[Policy, str | None]:
    """The policy a job trains (blocking: `lm` loads the model) and, for `auto` falling back
    to the stand-in, a warning that says why and how to train the real model. `lm` that
    cannot load raises ModelUnavailable with a sentence: never a silent fallback. `stop` set
    (the job ended first) ends a data-parallel policy's wait for its ranks."""
    if choice == "tabular":
        return TabularPolicy(settings=settings), None
    if choice == "lm":
        return _lm(settings, parallel, stop), None
    if choice != "auto":
        raise ValueError(f"unknown policy kind {choice!r}; choose one of {', '.join(POLICY_KINDS)}")
    why = lm_unavailable(settings)
    if why is None:
        return _lm(settings, parallel, stop), None
    return TabularPolicy(settings=settings), (
        f"The language model is not trained: {why}. The tabular stand-in trains in its place. To train "
        f"{settings.model} itself: {TRAINER_EXTRA_HINT}, and point [model] base at a local model folder "
        "(or an id in the Hugging Face cache); then start the backend with --trainer lm")


def create(kind: str, settings: PolicySettings, parallel: Parallel = ONE_PROCESS,
           stop: threading.Event | None = None) -> Policy:
    if kind == "lm":
        return _lm(settings, parallel, stop)
    if kind == "tabular":
        return TabularPolicy(settings=settings)
    raise ValueError(f"unknown policy {kind!r}; known: {', '.join(KINDS)}")


def load(folder: Path, settings: PolicySettings, parallel: Parallel = ONE_PROCESS,
         stop: threading.Event | None = None) -> Policy:
    """The policy saved in `folder` (its manifest names the kind)."""
    with BUILDING:
        policy = create(read_manifest(folder)["kind"], settings, parallel, stop)
        policy.load(folder)
    return policy
