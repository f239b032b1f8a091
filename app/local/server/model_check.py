"""The embedded backend's model check (`POST /api/rl/verify_model`): can a job of this backend
train the model a config names, as the config names it? docs/wire-contract.md#model-verification.

The client's verification step asks it before a job is sent (the hosted service has no such
route: there the hosted list applies, app/core/config/models.py). It answers in seconds, without
loading the weights: where the model is (a folder, a .gguf file, the Hugging Face cache), its
size and parameter count (from the weight files' headers), its config and tokenizer, the chat
template it would act with, and whether that template renders a two-turn tool-calling
conversation (chat_templates.render_problem). A model that only a download would bring is not
downloaded here. What the backend's `--trainer` makes of the answer: `lm` trains the model, so
every problem stops the launch; `auto` trains the stand-in instead when the model cannot be had
(a warning); `tabular` never loads it.

The check runs in a daemon thread of its own (ModelChecks), bounded by MODEL_CHECK_TIMEOUT_S
(the client's own budget is 30 s): a check that outlasts its bound goes on, and its answer is
kept for the next request of the same check; a backend that stops answers a waiting request
at once (503) and never waits for the thread (issue 37: Ctrl+C during a check hung the process
while asyncio's executor joined its thread).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.core.config.models import is_hub_id
from app.core.text import size_words
from app.local import policies
from app.local.policies.lm.gguf_header import GgufHeader, NotGguf, read_gguf_header
from app.local.policies.lm.model import (
    TRAINER_MODES,
    ModelNotDownloaded,
    ModelUnavailable,
    gguf_of,
    learning_rate_warning,
    parameter_count,
    resolve,
    weight_files,
    weights_bytes,
)
from app.local.server.model_checks import ModelChecks, check_key, wait_for_check

MODEL_CHECK_TIMEOUT_S = 20.0


@dataclass
class Finding:
    message: str
    fix: str | None = None


@dataclass
class ModelReport:
    """The route's answer (docs/wire-contract.md#model-verification)."""

    model: str
    trains: str  # "lm" or "tabular": what a job of this backend would train
    problems: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    path: str | None = None  # where the model is, on the backend's machine
    source: str | None = None  # "folder", "gguf" or "cache"
    bytes: int | None = None
    parameters: int | None = None
    architecture: str | None = None
    template: str | None = None  # the template it acts with, in words
    seconds: float = 0.0
    finished: bool = True  # False: no answer within the bound; the warning says so, `ok` says nothing

    def answer(self) -> dict[str, Any]:
        return {"ok": not self.problems, **asdict(self)}


def check_model(model: str, chat_template: str | None, learning_rate: float | None,
                policy_kind: str, trainer_mode: str | None = None) -> ModelReport:
    """What a job of a backend with this `--trainer` would make of the model (blocking)."""
    started = time.monotonic()
    report = ModelReport(model=model, trains="lm" if policy_kind == "lm" else "tabular")
    if policy_kind != "tabular":  # the stand-in never loads the model: nothing to check (trains says so)
        _check_lm(report, chat_template, learning_rate, falls_back=policy_kind == "auto")
    if report.trains == "lm" and trainer_mode is not None and trainer_mode.strip().lower() not in TRAINER_MODES:
        report.problems.append(Finding(
            f'[model] trainer_mode {trainer_mode.strip()[:40]!r} is not one the lm policy knows: "full" trains every '
            'weight, "lora" an adapter', 'set [model] trainer_mode = "full" or "lora"'))
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _check_lm(report: ModelReport, chat_template: str | None, learning_rate: float | None,
              *, falls_back: bool) -> None:
    """The lm policy's view; with `auto`, a model that cannot be had is the stand-in's warning."""
    missing = policies.trainer_extra_missing()
    try:
        if missing:
            raise ModelUnavailable(missing)
        path = resolve(report.model, download=False)  # a download would outlast the check's bound
    except ModelNotDownloaded as exc:
        report.trains = "lm"
        report.warnings.append(Finding(f"{exc}; its size, config and template are checked as it loads",
                                       f"`hf download {report.model}` where the backend runs, to have them checked "
                                       "now"))
        return
    except ModelUnavailable as exc:
        if falls_back:
            report.warnings.append(Finding(f"the tabular stand-in trains in its place: {exc}",
                                           "make the model available here, or start the backend with --trainer "
                                           "lm to have this refused"))
        else:
            report.problems.append(Finding(str(exc), _resolve_fix(report.model)))
        return
    report.trains = "lm"
    header = _describe(report, path)
    if not report.problems:
        _check_tokenizer(report, path, chat_template, header)
    if learning_rate is not None and (warning := learning_rate_warning(learning_rate, report.parameters)):
        report.warnings.append(Finding(warning, "e.g. learning_rate = 5e-5 in [training]"))


def _resolve_fix(model: str) -> str:
    """A path gets a path's fix; only a Hugging Face id is something `hf download` can fetch."""
    if is_hub_id(model.strip()):  # the message names the `hf download` command: said once
        return ("fetch the id into the backend's Hugging Face cache where it runs, or point [model] base at a folder "
                "in Hugging Face format or a .gguf file there")
    return _WHOLE_MODEL_FIX


_WHOLE_MODEL_FIX = ("point [model] base at a whole model where the backend runs: a folder in Hugging Face format "
                    "(config.json, the weights and the tokenizer files, as `hf download ID --local-dir DIR` saves "
                    "it) or a .gguf file")
_GGUF_FIX = ("fetch the .gguf file again (it may be cut short or not a GGUF model; README: Train a language model "
             "fetches SmolLM2-135M's), or point [model] base at a folder in Hugging Face format")


def _describe(report: ModelReport, path: Path) -> GgufHeader | None:
    """Where the model is, its size and parameters; a .gguf file's header, read once here, also
    answers its architecture and template (_check_tokenizer)."""
    folder, gguf_file = gguf_of(path)
    report.path = str(path)
    report.source = "gguf" if gguf_file else (
        "folder" if Path(report.model.strip()).expanduser().exists() else "cache")
    report.bytes = weights_bytes(path)
    if gguf_file is None:
        report.parameters = parameter_count(path)
        return None
    try:
        header = read_gguf_header(folder / gguf_file)
    except NotGguf as exc:
        report.problems.append(Finding(f"{path} is not a GGUF model this backend can read ({exc})", _GGUF_FIX))
        return None
    report.parameters = header.parameters or None
    return header


def _check_tokenizer(report: ModelReport, path: Path, chat_template: str | None, header: GgufHeader | None) -> None:
    """The config and tokenizer load (a .gguf file: its header names them), and the template
    they act with renders a tool call."""
    from app.local.policies.lm.chat_templates import judge_template, stand_in_tokenizer
    from app.local.policies.lm.model import load_tokenizer

    try:
        if header is not None:  # the render needs the template and the special tokens, not the vocabulary
            report.architecture = _gguf_architecture(header)
            tokenizer = stand_in_tokenizer(header.chat_template, header.special_tokens)
        else:
            report.architecture = _architecture(path)
            tokenizer = load_tokenizer(path)
    except ModelUnavailable as exc:
        report.problems.append(Finding(str(exc), _GGUF_FIX if gguf_of(path)[1] else _WHOLE_MODEL_FIX))
        return
    verdict = judge_template(tokenizer, report.model, chat_template)
    if verdict.how is not None:
        report.template = f"{chat_template}: {verdict.how}" if chat_template else verdict.how
    if verdict.problem is not None:
        report.problems.append(Finding(verdict.problem, verdict.fix))


def _gguf_architecture(header: GgufHeader) -> str:
    """The file's architecture, when transformers can load it (its GGUF architectures, under
    llama.cpp's names or transformers' own: modeling_gguf_pytorch_utils.load_gguf_checkpoint)."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    name = header.architecture
    renamed = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2",
               "t5encoder": "t5"}.get(name, name)
    if name not in GGUF_SUPPORTED_ARCHITECTURES and renamed not in GGUF_SUPPORTED_ARCHITECTURES:
        raise ModelUnavailable(f"the GGUF architecture {name[:60]!r} is not one transformers can load (it loads "
                               f"{', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))[:300]})")
    return name


def _architecture(path: Path) -> str | None:
    from transformers import AutoConfig

    try:
        config = AutoConfig.from_pretrained(path)
    except (OSError, ValueError, KeyError) as exc:
        raise ModelUnavailable(f"the config of {path} could not be loaded ({type(exc).__name__}: "
                               f"{str(exc)[:300]})") from None
    names = getattr(config, "architectures", None) or [getattr(config, "model_type", None)]
    return str(names[0]) if names and names[0] else None


_DEFAULT_CHECKS = ModelChecks()  # a caller without a backend's own (tests, one process)


async def check_model_bounded(model: str, chat_template: str | None, learning_rate: float | None,
                              policy_kind: str, timeout: float = MODEL_CHECK_TIMEOUT_S, *,
                              trainer_mode: str | None = None, checks: ModelChecks | None = None,
                              stopping: asyncio.Event | None = None) -> dict[str, Any]:
    """check_model in a daemon thread, answered within `timeout` seconds whatever it meets:
    a check that did not finish is a warning (`finished` false), and goes on for the next
    request; BackendStopping when `stopping` is set first."""
    checks = checks if checks is not None else _DEFAULT_CHECKS
    key = check_key(model, chat_template, learning_rate, trainer_mode, policy_kind)
    future = checks.start(key, lambda: check_model(model, chat_template, learning_rate, policy_kind, trainer_mode),
                          keep=lambda report: report.path is not None)  # one not found may be fetched next
    report = await wait_for_check(future, timeout, stopping)
    if report is None:  # slow, not wrong: the job checks the model again as it loads it
        report = ModelReport(model=model, trains="lm", seconds=timeout, finished=False, warnings=[Finding(
            f"not finished within {timeout:g} s (reading {model}'s config, tokenizer and template); the job "
            "checks the model again as it loads it",
            "check again (r in the TUI, or run the command again): the check goes on here and answers at once "
            "when it has finished. The first check on a backend imports its training libraries (torch, "
            "transformers), and a model on a slow disk takes longer")])
    return report.answer()


def loading_words(path: Path) -> tuple[str, int | None]:
    """(`SmolLM2-135M-Instruct.Q4_1.gguf, 93 MB`, its bytes): what the loading event names, the
    weights of what `resolve` returned; (`its weights`, None) when they cannot be listed."""
    try:
        files = weight_files(path)
        size = sum(file.stat().st_size for file in files)
    except OSError:
        return "its weights", None
    what = files[0].name if len(files) == 1 else f"{len(files)} weight files"
    return f"{what}, {size_words(size)}", size
