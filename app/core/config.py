"""RL training configs: find them, recognise them, validate them, summarise them.

Follows the SDK's `train` command (contract 1.4, 1.5, 2.1, 2.2) and improves on it where the
SDK hurts users: every problem of a config is reported at once with its line number (the SDK
stops at the first, often with a traceback), and `[policy]`-only configs are accepted.
The payload builder and the model allow-list live in app.core.payload and app.core.models;
their public functions are re-exported here. No Textual import: the headless CLI uses this.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import tempfile
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from app.core.errors import ConfigError
from app.core.models import (
    check_rl_model,
    experimental_allowed,
    normalize_model_id,
)
from app.core.payload import build_rl_payload, resolve_task_url

__all__ = [
    "AlgorithmSection",
    "ComputeSection",
    "ConfigCandidate",
    "ConfigKind",
    "ConfigValidationError",
    "EvaluationSection",
    "JudgeOptions",
    "JudgeSection",
    "LoraSection",
    "ModelSection",
    "PolicySection",
    "Problem",
    "RLConfig",
    "RewardsSection",
    "RolloutSection",
    "ServicesSection",
    "TomlSyntaxError",
    "TopologySection",
    "TrainingSection",
    "ValidationReport",
    "WeightSyncSection",
    "build_rl_payload",
    "check_rl_model",
    "config_facts",
    "discover_configs",
    "experimental_allowed",
    "infer_config_type",
    "load_toml",
    "normalize_model_id",
    "parse_toml_text",
    "project_config_roots",
    "read_last_config",
    "resolve_task_url",
    "train_cli_state_path",
    "validate_rl_file",
    "validate_rl_mapping",
    "validate_rl_text",
    "write_last_config",
]

ConfigKind = Literal["rl", "sft", "prompt_learning", "unknown"]


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------


class TomlSyntaxError(ConfigError):
    """The file is not valid TOML. `.line`/`.column` are 1-based, as tomllib counts them."""

    def __init__(
        self,
        message: str,
        *,
        detail: str,
        line: int | None,
        column: int | None,
        path: Path | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message, hint)
        self.detail = detail
        self.line = line
        self.column = column
        self.path = path


class ConfigValidationError(ConfigError):
    """An RL config has problems; `.problems` lists every one of them."""

    def __init__(self, report: ValidationReport) -> None:
        where = f"Config {report.path}" if report.path else "Config"
        count = len(report.problems)
        noun = "problem" if count == 1 else "problems"
        message = f"{where} is invalid ({count} {noun}):\n{report.render()}"
        super().__init__(message, hint="fix the problems listed above and try again")
        self.report = report
        self.problems = list(report.problems)


# ---------------------------------------------------------------------------------------
# Loading TOML
# ---------------------------------------------------------------------------------------

_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_TOML_AT_END = re.compile(r"\s*\(at end of document\)\s*$")


def _toml_error_position(exc: tomllib.TOMLDecodeError, text: str) -> tuple[str, int, int]:
    """(message without position, line, column). Python 3.11 only has them in the text."""
    message = str(exc)
    line = getattr(exc, "lineno", None)
    column = getattr(exc, "colno", None)
    found = _TOML_POSITION.search(message)
    if found:
        message = message[: found.start()]
        line = line or int(found.group(1))
        column = column or int(found.group(2))
    elif _TOML_AT_END.search(message):
        message = _TOML_AT_END.sub("", message)
    if line is None or column is None:
        # tomllib reports "end of document" without numbers; compute them its way.
        line = text.count("\n") + 1
        column = len(text) - text.rfind("\n")
    return message, line, column


def parse_toml_text(text: str, path: Path | None = None) -> dict[str, Any]:
    """Parse TOML text; a syntax error becomes TomlSyntaxError with line and column."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        detail, line, column = _toml_error_position(exc, text)
        where = str(path) if path else "<config>"
        raise TomlSyntaxError(
            f"{where}: invalid TOML at line {line}, column {column}: {detail}",
            detail=detail,
            line=line,
            column=column,
            path=path,
            hint="fix the TOML syntax at that position",
        ) from None


def _read_config_text(path: Path) -> str:
    if not path.exists():
        raise ConfigError(
            f"Config not found: {path}",
            hint="check the path, or run without --config to pick from the discovered configs",
        )
    if path.is_dir():
        raise ConfigError(
            f"Config {path} is a directory, not a TOML file", hint="pass the path of a .toml file"
        )
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text", hint="TOML files must be UTF-8 encoded") from None
    except OSError as exc:
        raise ConfigError(
            f"Cannot read config {path}: {exc.strerror or exc}", hint="check the file's permissions"
        ) from None


def load_toml(path: Path) -> dict[str, Any]:
    """Read and parse a TOML file; every failure is a ConfigError, never a traceback."""
    path = Path(path)
    return parse_toml_text(_read_config_text(path), path)


# ---------------------------------------------------------------------------------------
# What kind of config is this (contract 1.4, first match wins)
# ---------------------------------------------------------------------------------------

_PROMPT_LEARNING_ALGORITHMS = frozenset({"mipro", "gepa"})
_RL_METHODS = frozenset({"policy_gradient", "ppo", "reinforce"})
_RL_VARIETIES = frozenset({"gspo", "grpo", "ppo"})
_SFT_METHODS = frozenset({"supervised_finetune", "sft"})


def _lower(value: object) -> str:
    return str(value or "").strip().lower()


def _infer_from_algorithm(algorithm: Mapping[str, Any]) -> ConfigKind | None:
    method, algo_type, variety = (_lower(algorithm.get(k)) for k in ("method", "type", "variety"))
    if method in _RL_METHODS or algo_type == "online" or variety in _RL_VARIETIES:
        return "rl"
    if method in _SFT_METHODS or algo_type == "offline" or variety == "fft":
        return "sft"
    return None


def infer_config_type(data: Mapping[str, Any]) -> ConfigKind:
    """The SDK's `_infer_config_type`. A top-level `type = "rl"` is deliberately not read."""
    if not isinstance(data, Mapping):
        return "unknown"
    prompt_learning = data.get("prompt_learning")
    if isinstance(prompt_learning, Mapping):
        if _lower(prompt_learning.get("algorithm")) in _PROMPT_LEARNING_ALGORITHMS:
            return "prompt_learning"
    algorithm = data.get("algorithm")
    if isinstance(algorithm, str) and _lower(algorithm) in _PROMPT_LEARNING_ALGORITHMS:
        return "prompt_learning"
    if isinstance(algorithm, Mapping):
        kind = _infer_from_algorithm(algorithm)
        if kind:
            return kind
    if data.get("job_type") == "rl":
        return "rl"
    services = data.get("services")
    if isinstance(services, Mapping) and ("task_url" in services or "environment" in services):
        return "rl"
    training = data.get("training")
    if isinstance(training, Mapping) and _lower(training.get("mode")).startswith("sft"):
        return "sft"
    hyperparameters = data.get("hyperparameters")
    if isinstance(hyperparameters, Mapping) and _lower(hyperparameters.get("train_kind")) in {"sft", "fft"}:
        return "sft"
    return "unknown"


# ---------------------------------------------------------------------------------------
# Discovery (contract 1.4)
# ---------------------------------------------------------------------------------------

# The SDK's skip list plus virtualenv/tooling folders that only ever hold other projects'
# TOML files. Any hidden directory (name starting with ".") below a search root is skipped
# as well; the root itself is never skipped, whatever its name.
# Differs from the SDK on purpose: the SDK tests the *absolute* path's parts, so working
# inside e.g. ~/build/project found nothing at all. We only test parts below the root.
SKIP_DIR_NAMES = frozenset(
    {".git", ".venv", "node_modules", "__pycache__", "dist", "build", "venv", "site-packages"}
)

_REPO_ROOT = Path(__file__).resolve().parents[2]
_BUNDLED_CONFIGS = Path(__file__).resolve().parents[1] / "bundled_configs"


@dataclass(frozen=True)
class ConfigCandidate:
    path: Path
    kind: ConfigKind
    last_used: bool = False


def _is_skipped_dir(name: str) -> bool:
    return name in SKIP_DIR_NAMES or name.startswith(".")


def iter_toml_files(root: Path) -> Iterator[Path]:
    """Every *.toml below root, pruning skipped directories instead of walking into them."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(name for name in dirnames if not _is_skipped_dir(name))
        for name in sorted(filenames):
            if name.endswith(".toml"):
                yield Path(dirpath) / name


def project_config_roots() -> list[Path]:
    """The project's own configs: <checkout>/configs, else the wheel's app/bundled_configs."""
    checkout_configs = _REPO_ROOT / "configs"
    if (_REPO_ROOT / "pyproject.toml").is_file() and checkout_configs.is_dir():
        return [checkout_configs]
    return [_BUNDLED_CONFIGS] if _BUNDLED_CONFIGS.is_dir() else []


def _kind_of_file(path: Path) -> ConfigKind:
    """Unreadable or unparsable files count as unknown, so discovery skips them."""
    try:
        return infer_config_type(load_toml(path))
    except (ConfigError, ValueError, RecursionError):
        return "unknown"


def _resolved(path: Path) -> Path | None:
    try:
        return Path(path).expanduser().resolve()
    except (OSError, RuntimeError):
        return None


def _last_used_first(candidates: list[ConfigCandidate], last_config: Path | None) -> list[ConfigCandidate]:
    wanted = _resolved(last_config) if last_config else None
    for index, candidate in enumerate(candidates):
        if wanted is not None and candidate.path == wanted:
            marked = dataclasses.replace(candidate, last_used=True)
            return [marked, *candidates[:index], *candidates[index + 1 :]]
    return candidates


def discover_configs(
    cwd: Path,
    *,
    extra_roots: Sequence[Path] | None = None,
    kind: str | None = "rl",
    last_config: Path | None = None,
) -> list[ConfigCandidate]:
    """Configs below cwd and the project's configs folder, of the requested kind.

    Sorted by (path depth, path) as in the SDK; the last-used config first and marked.
    `kind=None` (or "auto") keeps every recognised kind.
    """
    roots = [Path(cwd), *(project_config_roots() if extra_roots is None else extra_roots)]
    wanted_kind = None if kind in (None, "auto") else kind
    seen: set[Path] = set()
    candidates: list[ConfigCandidate] = []
    for root in roots:
        if not Path(root).is_dir():
            continue
        for path in iter_toml_files(Path(root)):
            resolved = _resolved(path)
            if resolved is None or resolved in seen:
                continue
            seen.add(resolved)
            found_kind = _kind_of_file(resolved)
            if found_kind == "unknown" or (wanted_kind and found_kind != wanted_kind):
                continue
            candidates.append(ConfigCandidate(path=resolved, kind=found_kind))
    candidates.sort(key=lambda c: (len(c.path.parts), str(c.path)))
    return _last_used_first(candidates, last_config)


# ---------------------------------------------------------------------------------------
# The remembered last choice (contract 1.5): ~/.synth-ai/train_cli.json, key LAST_CONFIG
# ---------------------------------------------------------------------------------------

LAST_CONFIG_KEY = "LAST_CONFIG"


def train_cli_state_path() -> Path:
    """The SDK's own state file, so both tools agree on the last config."""
    home = os.environ.get("SYNTH_AI_HOME")
    base = Path(home).expanduser() if home else Path.home() / ".synth-ai"
    return base / "train_cli.json"


_MISSING = object()
_UNREADABLE = object()


def _read_state(path: Path) -> object:
    """The parsed JSON, _MISSING when there is no file, _UNREADABLE when it can't be used."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return _MISSING
    except (OSError, UnicodeDecodeError):
        return _UNREADABLE
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return _UNREADABLE


def read_last_config(state_path: Path | None = None) -> Path | None:
    """The remembered config, or None when unset, stale (file gone) or the state is corrupt."""
    state = _read_state(state_path or train_cli_state_path())
    if not isinstance(state, dict):
        return None
    raw = state.get(LAST_CONFIG_KEY)
    if not isinstance(raw, str) or not raw.strip():
        return None
    remembered = _resolved(Path(raw))
    return remembered if remembered is not None and remembered.is_file() else None


def _write_json_atomically(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=2)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise


def write_last_config(config_path: Path, state_path: Path | None = None) -> bool:
    """Remember config_path, keeping every other key. False (never an exception) on failure.

    A state file that is not a JSON object is left untouched rather than overwritten: it may
    hold something the user cares about. (The SDK silently replaces a non-object with {}.)
    """
    path = state_path or train_cli_state_path()
    state = _read_state(path)
    # Differs from the SDK on purpose: a corrupt or non-object file is not replaced.
    if state is _MISSING:
        state = {}
    if not isinstance(state, dict):
        return False
    resolved = _resolved(Path(config_path))
    if resolved is None:
        return False
    try:
        _write_json_atomically(path, {**state, LAST_CONFIG_KEY: str(resolved)})
    except OSError:
        return False
    return True


# ---------------------------------------------------------------------------------------
# Schema (contract 2.2). Every model allows extra keys, like the SDK's ExtraModel.
# ---------------------------------------------------------------------------------------


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow", protected_namespaces=())


class AlgorithmSection(_Section):
    type: str
    method: str
    variety: str


class ServicesSection(_Section):
    # Differs from the SDK on purpose: the SDK requires task_url here (and injects
    # "placeholder" when [services] is missing), although --task-url or TASK_APP_URL usually
    # supply it. resolve_task_url() decides; the payload builder forces the final value in.
    task_url: str | None = None
    judge_url: str | None = None


class TopologySection(_Section):
    type: str | None = None
    gpus_for_vllm: int | None = None
    gpus_for_training: int | None = None
    gpus_for_ref: int | None = None
    tensor_parallel: int | None = None
    reference_placement: str | None = None


class ComputeSection(_Section):
    gpu_type: str
    gpu_count: int
    nodes: int | None = None
    topology: TopologySection | None = None


class ModelSection(_Section):
    source: str | None = None
    base: str | None = None
    trainer_mode: str
    label: str

    @model_validator(mode="after")
    def _exactly_one_of_source_or_base(self) -> ModelSection:
        if bool(self.source) == bool(self.base):
            raise ValueError("set exactly one of [model].source or [model].base")
        return self


class PolicySection(_Section):
    model_name: str | None = None
    source: str | None = None
    trainer_mode: str
    label: str
    max_tokens: int = 512
    temperature: float = 0.7
    top_p: float = 0.95
    top_k: int | None = None
    repetition_penalty: float = 1.0
    stop_sequences: list[str] | None = None
    inference_url: str | None = None

    @model_validator(mode="after")
    def _exactly_one_of_model_name_or_source(self) -> PolicySection:
        if bool(self.model_name) == bool(self.source):
            raise ValueError("set exactly one of [policy].model_name or [policy].source")
        return self


class RolloutSection(_Section):
    env_name: str
    policy_name: str
    max_turns: int
    episodes_per_batch: int
    max_concurrent_rollouts: int
    batches_per_step: int | None = None
    ops: list[str] | None = None
    env_config: dict[str, Any] | None = None
    policy_config: dict[str, Any] | None = None


class WeightSyncSection(_Section):
    enable: bool | None = None
    targets: list[str] | None = None
    mode: str | None = None
    direct: bool | None = None
    verify_every_k: int | None = None


class LoraSection(_Section):
    r: int | None = None
    alpha: int | None = None
    dropout: float | None = None
    target_modules: list[str] | None = None


class RewardsSection(_Section):
    step_rewards_enabled: bool | None = None
    step_rewards_mode: str | None = None
    step_rewards_indicator_lambda: float | None = None
    step_rewards_beta: float | None = None
    step_rewards_strategy: str | None = None
    event_rewards_kind: str | None = None


class TrainingSection(_Section):
    num_epochs: int
    iterations_per_epoch: int
    max_turns: int
    batch_size: int
    group_size: int
    learning_rate: float
    gradient_accumulation_steps: int | None = None
    max_accumulated_minibatch: int | None = None
    log_interval: int | None = None
    weight_sync_interval: int | None = None
    # Flat reward fields (older configs; the nested [training.rewards] is newer).
    step_rewards_enabled: bool | None = None
    step_rewards_mode: str | None = None
    step_rewards_indicator_lambda: float | None = None
    step_rewards_beta: float | None = None
    step_rewards_strategy: str | None = None
    event_rewards_kind: str | None = None
    weight_sync: WeightSyncSection | None = None
    lora: LoraSection | None = None
    rewards: RewardsSection | None = None


class EvaluationSection(_Section):
    instances: int
    every_n_iters: int
    seeds: list[int]


class JudgeOptions(_Section):
    event: bool | None = None
    outcome: bool | None = None
    provider: str | None = None
    model: str | None = None
    rubric_id: str | None = None
    rubric_overrides: dict[str, Any] | None = None
    tracks: list[str] | None = None
    weights: dict[str, float] | None = None
    max_concurrency: int | None = None


class JudgeSection(_Section):
    type: str | None = None
    timeout_s: int | None = None
    enabled: bool | None = None
    reward_blend: dict[str, float] | None = None
    rubric: dict[str, Any] | None = None
    options: JudgeOptions | None = None


class RLConfig(_Section):
    algorithm: AlgorithmSection
    services: ServicesSection | None = None
    compute: ComputeSection | None = None
    topology: TopologySection | None = None
    vllm: dict[str, Any] | None = None
    reference: dict[str, Any] | None = None
    model: ModelSection | None = None
    policy: PolicySection | None = None
    lora: dict[str, Any] | None = None
    rollout: RolloutSection | None = None
    evaluation: EvaluationSection | None = None
    training: TrainingSection | None = None
    rubric: dict[str, Any] | None = None
    judge: JudgeSection | None = None
    tags: dict[str, Any] | None = None
    smoke: dict[str, Any] | None = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> RLConfig:
        return cls.model_validate(dict(data))

    def to_dict(self) -> dict[str, Any]:
        """The config as plain JSON-able data, without unset (None) values."""
        return self.model_dump(mode="json", exclude_none=True)


# ---------------------------------------------------------------------------------------
# Line numbers: tomllib gives none, so we scan the text for headers and `key =` lines.
# ---------------------------------------------------------------------------------------

_HEADER_LINE = re.compile(r"^\s*\[\[?(?P<name>[^\[\]]*)\]\]?\s*(?:#.*)?$")
_HEADER_NAME = re.compile(r"""^[\sA-Za-z0-9_\-."']+$""")
_KEY_LINE = re.compile(
    r"""^\s*(?P<key>(?:[A-Za-z0-9_\-]+|"[^"]*"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_\-]+|"[^"]*"|'[^']*'))*)\s*="""
)
_KEY_PART = re.compile(r""""([^"]*)"|'([^']*)'|([A-Za-z0-9_\-]+)""")
_STRING_LITERAL = re.compile(r""""(?:[^"\\]|\\.)*"|'[^']*'""")


def _split_dotted(name: str) -> list[str]:
    return [next(group for group in match.groups() if group is not None) for match in _KEY_PART.finditer(name)]


def _bracket_balance(value: str) -> int:
    """Open minus closed brackets/braces in a value, ignoring strings and comments."""
    code = _STRING_LITERAL.sub("", value).split("#", 1)[0]
    return code.count("[") + code.count("{") - code.count("]") - code.count("}")


def _opens_multiline_string(line: str) -> str | None:
    for delimiter in ('"""', "'''"):
        if line.count(delimiter) % 2 == 1:
            return delimiter
    return None


class TomlLineIndex:
    """Maps dotted locations ("training.batch_size", "compute.topology") to 1-based lines."""

    def __init__(self, text: str) -> None:
        # Explicit: a header or a key is written there. Implied: a parent of one, e.g.
        # "compute" from [compute.topology]; used only when nothing explicit exists.
        self._explicit: dict[str, int] = {}
        self._implied: dict[str, int] = {}
        self._scan(text)

    def _remember(self, parts: list[str], line: int) -> None:
        for depth in range(1, len(parts)):
            self._implied.setdefault(".".join(parts[:depth]), line)
        self._explicit.setdefault(".".join(parts), line)

    def _scan(self, text: str) -> None:
        table: list[str] = []
        open_brackets = 0
        in_string: str | None = None
        for number, line in enumerate(text.splitlines(), start=1):
            if in_string:
                if in_string in line:
                    in_string = None
                continue
            if open_brackets > 0:  # inside a multi-line array: no headers or keys here
                open_brackets += _bracket_balance(line)
                continue
            header = _HEADER_LINE.match(line)
            if header and _HEADER_NAME.match(header.group("name")):
                table = _split_dotted(header.group("name"))
                self._remember(table, number)
                continue
            key = _KEY_LINE.match(line)
            if key:
                value = line[key.end() :]
                self._remember([*table, *_split_dotted(key.group("key"))], number)
                open_brackets = max(0, _bracket_balance(value))
                in_string = _opens_multiline_string(value)

    def line_for(self, location: str) -> int | None:
        """The line of the location, else of its nearest parent (a missing key -> its section)."""
        parts = location.split(".")
        while parts:
            location_key = ".".join(parts)
            found = self._explicit.get(location_key, self._implied.get(location_key))
            if found is not None:
                return found
            parts.pop()
        return None


# ---------------------------------------------------------------------------------------
# Validation (contract 2.1), reporting every problem at once
# ---------------------------------------------------------------------------------------

TOML_LOCATION = "<toml>"
FIELD_REQUIRED = "field required"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a config. location is "section.key", "section" or "<toml>"."""

    location: str
    message: str
    line: int | None = None
    column: int | None = None
    hint: str | None = None

    def render(self) -> str:
        if self.line is not None and self.column is not None:
            where = f"[line {self.line}, column {self.column}] "
        elif self.line is not None:
            where = f"[line {self.line}] "
        else:
            where = ""
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"  - {where}{self.location}: {self.message}{hint}"


@dataclass
class ValidationReport:
    path: Path | None
    problems: list[Problem]
    config: RLConfig | None
    raw: dict[str, Any] | None

    @property
    def ok(self) -> bool:
        return not self.problems and self.config is not None

    def render(self) -> str:
        """One problem per line; empty when the config is valid."""
        return "\n".join(problem.render() for problem in self.problems)

    def raise_if_invalid(self) -> RLConfig:
        """The validated config, or ConfigValidationError listing every problem."""
        if not self.ok or self.config is None:
            raise ConfigValidationError(self)
        return self.config


class _ProblemList:
    """Collects problems, skipping a pydantic error that repeats one we already explained."""

    def __init__(self, index: TomlLineIndex | None) -> None:
        self.problems: list[Problem] = []
        self._index = index

    def add(self, location: str, message: str, hint: str | None = None) -> None:
        line = self._index.line_for(location) if self._index and location != TOML_LOCATION else None
        self.problems.append(Problem(location, message, line=line, hint=hint))

    def covers(self, location: str) -> bool:
        """True when a problem sits at this location or below it."""
        return any(p.location == location or p.location.startswith(location + ".") for p in self.problems)


def _table(data: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    value = data.get(name)
    return value if isinstance(value, Mapping) else None


def _require_keys(section: str, table: Mapping[str, Any], keys: Sequence[str], problems: _ProblemList) -> None:
    """SDK rule: required keys must be present and (for gpu/env names) not empty."""
    for key in keys:
        value = table.get(key)
        if key not in table:
            problems.add(f"{section}.{key}", FIELD_REQUIRED)
        elif value is None or value == "" or value == 0 or value == []:
            problems.add(f"{section}.{key}", f"must not be empty or zero (got {value!r})")


def _check_present_table(
    data: Mapping[str, Any], name: str, missing_message: str, problems: _ProblemList
) -> Mapping[str, Any] | None:
    """The table if usable; otherwise a problem (missing, empty or not a table) and None."""
    value = data.get(name)
    if value is None or value == {}:
        problems.add(name, missing_message)
        return None
    if not isinstance(value, Mapping):
        problems.add(name, f"must be a table ([{name}]), got {type(value).__name__}")
        return None
    return value


def _check_algorithm(data: Mapping[str, Any], problems: _ProblemList) -> None:
    algorithm = _check_present_table(
        data,
        "algorithm",
        'missing section; add [algorithm] with type = "online", method = "policy_gradient", variety = "gspo"',
        problems,
    )
    if algorithm is None:
        return
    expected = {"type": "online", "method": "policy_gradient", "variety": "gspo"}
    for key, wanted in expected.items():
        value = algorithm.get(key)
        if key not in algorithm:
            problems.add(f"algorithm.{key}", f"{FIELD_REQUIRED} (the only supported value is {wanted!r})")
        elif _lower(value) != wanted:
            problems.add(
                f"algorithm.{key}",
                f"unsupported {key} {value!r}; the only supported RL algorithm is "
                "type='online', method='policy_gradient', variety='gspo'",
            )


def _check_model_choice(section: str, table: Mapping[str, Any], keys: tuple[str, str], problems: _ProblemList) -> None:
    """Exactly one of the two model keys ([model] base/source, [policy] model_name/source)."""
    first, second = keys
    has_first, has_second = bool(table.get(first)), bool(table.get(second))
    if has_first and has_second:
        problems.add(section, f"set exactly one of [{section}].{first} or [{section}].{second}, not both")
    elif not has_first and not has_second:
        message = f"[{section}].{first} or [{section}].{second} must be specified"
        if section == "policy" and "model" in table:
            message += " (found 'model'; the key is named model_name)"
        problems.add(f"{section}.{first}", message, hint="e.g. Qwen/Qwen3-4B, or a checkpoint id as source")


def _check_model_sections(data: Mapping[str, Any], problems: _ProblemList) -> None:
    if "model" not in data and "policy" not in data:
        problems.add(
            "model",
            "missing section; add [model] with base (e.g. \"Qwen/Qwen3-4B\"), trainer_mode and label, "
            "or [policy] with model_name, trainer_mode and label",
        )
        return
    # Differs from the SDK on purpose: the SDK validates [policy] but its payload builder only
    # reads [model], so [policy]-only configs passed validation and then failed. We accept
    # them all the way (see app.core.payload), and check both sections when both are given.
    for section, keys in (("policy", ("model_name", "source")), ("model", ("base", "source"))):
        if section not in data:
            continue
        table = _check_present_table(data, section, f"[{section}] must not be empty", problems)
        if table is None:
            continue
        _check_model_choice(section, table, keys, problems)
        _require_keys(section, table, ("trainer_mode", "label"), problems)


def _check_compute_and_topology(data: Mapping[str, Any], problems: _ProblemList) -> None:
    compute = _check_present_table(
        data, "compute", 'missing section; add [compute] with gpu_type (e.g. "H100") and gpu_count', problems
    )
    if compute is not None:
        _require_keys("compute", compute, ("gpu_type", "gpu_count"), problems)
    topology = data.get("topology") or (compute.get("topology") if compute is not None else None)
    if not topology:
        problems.add(
            "topology",
            "a non-empty [topology] or [compute.topology] table is required "
            "(type, gpus_for_vllm, gpus_for_training, gpus_for_ref, tensor_parallel)",
        )


def _check_rollout(data: Mapping[str, Any], problems: _ProblemList) -> None:
    rollout = _check_present_table(
        data,
        "rollout",
        "missing section; add [rollout] with env_name, policy_name, max_turns, "
        "episodes_per_batch and max_concurrent_rollouts",
        problems,
    )
    if rollout is not None:
        _require_keys("rollout", rollout, ("env_name", "policy_name"), problems)


_TRAINING_REQUIRED = ("num_epochs", "iterations_per_epoch", "max_turns", "batch_size", "group_size", "learning_rate")
_EVALUATION_REQUIRED = ("instances", "every_n_iters", "seeds")


def _check_optional_sections(data: Mapping[str, Any], problems: _ProblemList) -> None:
    """[training] and [evaluation] are optional, but complete when present."""
    for section, keys in (("training", _TRAINING_REQUIRED), ("evaluation", _EVALUATION_REQUIRED)):
        table = _table(data, section)
        if table is None:
            continue
        for key in keys:
            if key not in table:
                problems.add(f"{section}.{key}", FIELD_REQUIRED)


def _check_judge(data: Mapping[str, Any], problems: _ProblemList) -> None:
    judge = _table(data, "judge")
    if judge is None:
        return
    options = judge.get("options")
    if not isinstance(options, Mapping):
        problems.add(
            "judge.options",
            "[judge.options] section is required when [judge] is present",
            hint="add [judge.options] with provider and model, or remove [judge]",
        )
        return
    for key in ("provider", "model"):
        if not options.get(key):
            problems.add(f"judge.options.{key}", FIELD_REQUIRED)


def _pydantic_message(error: Mapping[str, Any]) -> str:
    if error.get("type") == "missing":
        return FIELD_REQUIRED
    message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
    value = error.get("input")
    if error.get("type") != "value_error" and isinstance(value, (str, int, float, bool)):
        message += f" (got {value!r})"
    return message


def _check_schema(data: Mapping[str, Any], problems: _ProblemList) -> RLConfig | None:
    """Types and required keys per the pydantic schema; repeats of our own checks are dropped."""
    try:
        return RLConfig.from_mapping(data)
    except ValidationError as exc:
        for error in exc.errors():
            location = ".".join(str(part) for part in error["loc"]) or TOML_LOCATION
            if not problems.covers(location):
                problems.add(location, _pydantic_message(error))
        return None


# (section, key, may it be a fine-tuned id?) -- base ids only in `base` and `model_name`.
_MODEL_KEYS = (
    ("model", "base", False),
    ("model", "source", True),
    ("policy", "model_name", False),
    ("policy", "source", True),
)


def _check_models(
    data: Mapping[str, Any], problems: _ProblemList, allow_experimental: bool, env: Mapping[str, str] | None
) -> None:
    """The allow-list of contract 2.3 for every model id the config names."""
    for section, key, fine_tuned_ok in _MODEL_KEYS:
        table = _table(data, section)
        value = table.get(key) if table is not None else None
        location = f"{section}.{key}"
        if not isinstance(value, str) or not value.strip() or problems.covers(location):
            continue
        try:
            check_rl_model(value, allow_experimental=allow_experimental, env=env, allow_fine_tuned=fine_tuned_ok)
        except ConfigError as exc:
            problems.add(location, exc.message, hint=exc.hint)


def _check_kind(data: Mapping[str, Any], problems: _ProblemList) -> None:
    """Say plainly when the file is some other kind of config, or relies on `type = "rl"`."""
    kind = infer_config_type(data)
    other_kinds = {"sft": "an SFT", "prompt_learning": "a prompt-learning"}
    if kind in other_kinds:
        problems.add(TOML_LOCATION, f"this looks like {other_kinds[kind]} config, not an RL config")
    elif kind == "unknown" and "type" in data:
        problems.add(
            "type",
            'a top-level type = "rl" does not mark a config as RL; the [algorithm] table does',
        )


def validate_rl_mapping(
    data: Mapping[str, Any],
    *,
    source_text: str | None = None,
    path: Path | None = None,
    allow_experimental: bool | None = None,
    env: Mapping[str, str] | None = None,
) -> ValidationReport:
    """Every problem of an RL config at once, with line numbers when source_text is given.

    # Differs from the SDK on purpose: the SDK raises on the first problem (often as a
    # traceback); we collect them all so the user fixes the file in one pass.
    """
    if not isinstance(data, Mapping):
        problem = Problem(TOML_LOCATION, "the config must be a TOML table")
        return ValidationReport(path=path, problems=[problem], config=None, raw=None)
    problems = _ProblemList(TomlLineIndex(source_text) if source_text is not None else None)
    _check_kind(data, problems)
    _check_algorithm(data, problems)
    _check_model_sections(data, problems)
    _check_compute_and_topology(data, problems)
    _check_rollout(data, problems)
    _check_optional_sections(data, problems)
    _check_judge(data, problems)
    config = _check_schema(data, problems)
    _check_models(data, problems, experimental_allowed(allow_experimental, env), env)
    return ValidationReport(path=path, problems=problems.problems, config=config, raw=dict(data))


def validate_rl_text(
    text: str,
    path: Path | None = None,
    *,
    allow_experimental: bool | None = None,
    env: Mapping[str, str] | None = None,
) -> ValidationReport:
    """Parse and validate; a TOML syntax error is one Problem with its line and column."""
    try:
        data = parse_toml_text(text, path)
    except TomlSyntaxError as exc:
        problem = Problem(TOML_LOCATION, f"invalid TOML: {exc.detail}", line=exc.line, column=exc.column)
        return ValidationReport(path=path, problems=[problem], config=None, raw=None)
    return validate_rl_mapping(data, source_text=text, path=path, allow_experimental=allow_experimental, env=env)


def validate_rl_file(
    path: Path,
    *,
    allow_experimental: bool | None = None,
    env: Mapping[str, str] | None = None,
) -> ValidationReport:
    """Validate a config file. Never raises for content problems; a missing file is a Problem."""
    path = Path(path)
    try:
        text = _read_config_text(path)
    except ConfigError as exc:
        problem = Problem(TOML_LOCATION, exc.message, hint=exc.hint)
        return ValidationReport(path=path, problems=[problem], config=None, raw=None)
    return validate_rl_text(text, path, allow_experimental=allow_experimental, env=env)


# ---------------------------------------------------------------------------------------
# Key facts for the picker's preview pane
# ---------------------------------------------------------------------------------------


def _model_fact(config: RLConfig) -> str | None:
    choices: list[tuple[Any, str, str]] = [
        (config.model, "base", "[model].base"),
        (config.model, "source", "[model].source"),
        (config.policy, "model_name", "[policy].model_name"),
        (config.policy, "source", "[policy].source"),
    ]
    for section, attribute, label in choices:
        value = getattr(section, attribute, None) if section is not None else None
        if value:
            return f"{normalize_model_id(value)} ({label})"
    return None


def _trainer_fact(config: RLConfig) -> str | None:
    section: ModelSection | PolicySection | None = config.model or config.policy
    if section is None:
        return None
    return f"{section.trainer_mode}, label {section.label}"


def _topology_fact(config: RLConfig) -> str | None:
    topology = config.topology or (config.compute.topology if config.compute else None)
    if topology is None:
        return None
    parts = [
        f"{label} {value}"
        for label, value in (
            ("vllm", topology.gpus_for_vllm),
            ("training", topology.gpus_for_training),
            ("ref", topology.gpus_for_ref),
            ("tp", topology.tensor_parallel),
        )
        if value is not None
    ]
    name = topology.type or "topology"
    return f"{name}: {', '.join(parts)}" if parts else name


def _training_fact(training: TrainingSection) -> str:
    return (
        f"epochs {training.num_epochs} x {training.iterations_per_epoch} iters, "
        f"batch {training.batch_size}, group {training.group_size}, lr {training.learning_rate:g}"
    )


def _task_url_fact(config: RLConfig) -> str:
    url = config.services.task_url if config.services else None
    if not url or not url.strip() or url.strip().lower() == "placeholder":
        return "(not set: pass --task-url or set TASK_APP_URL)"
    return url.strip()


def config_facts(config: RLConfig) -> dict[str, str]:
    """Ordered, short key facts (model, algorithm, task URL, compute, sizes) for a preview."""
    algorithm = config.algorithm
    candidates: list[tuple[str, Callable[[], str | None]]] = [
        ("model", lambda: _model_fact(config)),
        ("trainer", lambda: _trainer_fact(config)),
        ("algorithm", lambda: f"{algorithm.type}/{algorithm.method}/{algorithm.variety}"),
        ("task URL", lambda: _task_url_fact(config)),
        ("compute", lambda: f"{config.compute.gpu_type} x {config.compute.gpu_count}" if config.compute else None),
        ("topology", lambda: _topology_fact(config)),
        ("training", lambda: _training_fact(config.training) if config.training else None),
        (
            "rollout",
            lambda: (
                f"{config.rollout.env_name} / {config.rollout.policy_name}, max_turns {config.rollout.max_turns}"
                if config.rollout
                else None
            ),
        ),
        (
            "evaluation",
            lambda: (
                f"{len(config.evaluation.seeds)} seeds every {config.evaluation.every_n_iters} iters"
                if config.evaluation
                else None
            ),
        ),
    ]
    facts: dict[str, str] = {}
    for name, compute_fact in candidates:
        value = compute_fact()
        if value:
            facts[name] = value
    return facts
