"""RL config validation (docs/wire-contract.md#config-validation): every problem at once, each with its line number.

The SDK stops at the first problem, often with a traceback; here a ValidationReport lists them
all (`Problem`s with location, line, message and hint), and ConfigValidationError carries them
when a caller needs an exception. No Textual import: the headless CLI uses this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from app.core.config.kind import infer_config_type, lower_text
from app.core.config.known_keys import closest_name, unknown_key_problems
from app.core.config.models import ModelNotMadeYet, check_rl_model, experimental_allowed, template_path_problem
from app.core.config.schema import RLConfig
from app.core.config.toml_source import TOML_LOCATION, TomlLineIndex, TomlSyntaxError, parse_toml_text, read_config_text
from app.core.config.trainable import size_problems
from app.core.errors import ConfigError

__all__ = [
    "FIELD_REQUIRED",
    "ConfigValidationError",
    "Problem",
    "ValidationReport",
    "config_stamp",
    "revalidate",
    "validate_rl_file",
    "validate_rl_mapping",
    "validate_rl_text",
]


# ---------------------------------------------------------------------------------------
# Validation (docs/wire-contract.md#config-validation), reporting every problem at once
# ---------------------------------------------------------------------------------------

FIELD_REQUIRED = "field required"


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a config. location is "section.key", "section" or "<toml>"."""

    location: str
    message: str
    line: int | None = None
    column: int | None = None
    hint: str | None = None
    # A step to take before the config can run (a model folder not made yet), not a mistake in
    # the file: the picker shows it as a next step, not an error; it still stops a launch.
    next_step: bool = False

    def render(self) -> str:
        if self.line is not None and self.column is not None:
            where = f"[line {self.line}, column {self.column}] "
        elif self.line is not None:
            where = f"[line {self.line}] "
        else:
            where = ""
        hint = f" ({'next step' if self.next_step else 'hint'}: {self.hint})" if self.hint else ""
        return f"  - {where}{self.location}: {self.message}{hint}"


@dataclass
class ValidationReport:
    path: Path | None
    problems: list[Problem]
    config: RLConfig | None
    raw: dict[str, Any] | None
    # What was read, once (validate_rl_file): the text, the file's (mtime_ns, size) taken
    # before the read, and the --allow-experimental it was judged under. The payload is built
    # from these; the file is read again only when its stamp changed.
    text: str | None = None
    stamp: tuple[int, int] | None = None
    allow_experimental: bool | None = None

    @property
    def ok(self) -> bool:
        return not self.problems and self.config is not None

    @property
    def steps_only(self) -> bool:
        """Nothing is wrong in the file: what stops it are steps to take first (next_step)."""
        return bool(self.problems) and all(problem.next_step for problem in self.problems)

    def render(self) -> str:
        """One problem per line; empty when the config is valid."""
        return "\n".join(problem.render() for problem in self.problems)

    def raise_if_invalid(self) -> RLConfig:
        """The validated config, or ConfigValidationError listing every problem."""
        if not self.ok or self.config is None:
            raise ConfigValidationError(self)
        return self.config


class ConfigValidationError(ConfigError):
    """An RL config has problems; `.problems` lists every one of them."""

    def __init__(self, report: ValidationReport) -> None:
        where = f"Config {report.path}" if report.path else "Config"
        count = len(report.problems)
        if report.steps_only:
            noun = "step" if count == 1 else "steps"
            message = f"{where} is not ready yet ({count} {noun} first):\n{report.render()}"
            hint = "take the step listed above and try again"
        else:
            noun = "problem" if count == 1 else "problems"
            message = f"{where} is invalid ({count} {noun}):\n{report.render()}"
            hint = "fix the problems listed above and try again"
        super().__init__(message, hint=hint)
        self.report = report
        self.problems = list(report.problems)


class _ProblemList:
    """Collects problems, skipping a pydantic error that repeats one we already explained."""

    def __init__(self, index: TomlLineIndex | None) -> None:
        self.problems: list[Problem] = []
        self._index = index

    def add(self, location: str, message: str, hint: str | None = None, *, next_step: bool = False) -> None:
        line = self._index.line_for(location) if self._index and location != TOML_LOCATION else None
        self.problems.append(Problem(location, message, line=line, hint=hint, next_step=next_step))

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
        elif lower_text(value) != wanted:
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
    # them all the way (see app.core.config.payload), and check both sections when both are given.
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


def _check_sizes(data: Mapping[str, Any], problems: _ProblemList) -> None:
    """The bounds every backend enforces too (app.core.config.trainable): refused here first."""
    for problem in size_problems(data):
        if not problems.covers(problem.location):
            problems.add(problem.location, problem.message)


def _check_judge(data: Mapping[str, Any], problems: _ProblemList) -> None:
    """[judge], or [verifier] as SDK 0.4.6 renamed it (docs/compatibility.md): one of them,
    with provider and model in its options."""
    if _table(data, "judge") is not None and _table(data, "verifier") is not None:
        problems.add("verifier", "[judge] and [verifier] are the same section (renamed in SDK 0.4.6)",
                     hint="keep one of them; synth-tui sends it under the name the backend expects")
    services = _table(data, "services") or {}
    if services.get("judge_url") is not None and services.get("verifier_url") is not None:
        problems.add("services.verifier_url", "services.judge_url and services.verifier_url are the same setting",
                     hint="keep one of them (verifier_url is its name from SDK 0.4.6)")
    for name in ("judge", "verifier"):
        section = _table(data, name)
        if section is None:
            continue
        options = section.get("options")
        if not isinstance(options, Mapping):
            problems.add(
                f"{name}.options",
                f"[{name}.options] section is required when [{name}] is present",
                hint=f"add [{name}.options] with provider and model, or remove [{name}]",
            )
            continue
        for key in ("provider", "model"):
            if not options.get(key):
                problems.add(f"{name}.options.{key}", FIELD_REQUIRED)


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
                boolean = error.get("type") in ("bool_type", "bool_parsing")
                problems.add(location, _pydantic_message(error),
                             hint="write true or false: a TOML boolean, not a string or a number" if boolean else None)
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
    """The allow-list of docs/wire-contract.md#models for every model id the config names."""
    for section, key, fine_tuned_ok in _MODEL_KEYS:
        table = _table(data, section)
        value = table.get(key) if table is not None else None
        location = f"{section}.{key}"
        if not isinstance(value, str) or not value.strip() or problems.covers(location):
            continue
        try:
            check_rl_model(value, allow_experimental=allow_experimental, env=env, allow_fine_tuned=fine_tuned_ok)
        except ConfigError as exc:
            problems.add(location, exc.message, hint=exc.hint, next_step=isinstance(exc, ModelNotMadeYet))


def _check_chat_templates(data: Mapping[str, Any], problems: _ProblemList) -> None:
    """[model] chat_template (or [policy]'s): a name the backend looks up among TRL's templates,
    or the path of a .jinja file, which must exist (read from where the backend runs)."""
    for section in ("model", "policy"):
        table = _table(data, section)
        if table is None or "chat_template" not in table:
            continue
        value, location = table["chat_template"], f"{section}.chat_template"
        if not isinstance(value, str) or not value.strip():
            problems.add(location, f"must be the name of a template TRL ships or the path of a .jinja file "
                                   f"(got {value!r})", hint='e.g. chat_template = "qwen2_5"')
        elif (problem := template_path_problem(value.strip())) is not None:
            problems.add(location, problem, hint='a name instead (e.g. "qwen2_5", a template TRL ships), or the '
                                                 "path of a .jinja file; a relative path is read from where the "
                                                 "backend runs")


TRAINER_MODES = ("full", "lora")
TRAINER_MODE_CUTOFF = 0.6  # "lroa" and "ful" are misspellings; "ppo" (the hosted docs') is not


def _check_trainer_modes(data: Mapping[str, Any], problems: _ProblemList) -> None:
    """[model] / [policy] trainer_mode that misspells "full" or "lora" (a lost setting, as a
    misspelt key is: app/core/config/known_keys.py). Another word is the backend's to judge:
    the hosted docs show "ppo"; the embedded backend's model check names what its lm policy knows."""
    for section in ("model", "policy"):
        table = _table(data, section)
        value = table.get("trainer_mode") if table is not None else None
        location = f"{section}.trainer_mode"
        if not isinstance(value, str) or value.strip().lower() in TRAINER_MODES or problems.covers(location):
            continue
        if close := closest_name(value.strip().lower(), TRAINER_MODES, TRAINER_MODE_CUTOFF):
            problems.add(location, f'must be "full" (every weight) or "lora" (an adapter), not {value!r}',
                         hint=f'did you mean "{close}"?')


def _check_known_keys(data: Mapping[str, Any], problems: _ProblemList) -> None:
    """Sections and keys the schema does not know, as the embedded backend refuses them
    (app.core.config.known_keys): a misspelt name is a lost setting. Not for a config of
    another kind, which _check_kind already names."""
    if infer_config_type(data) in ("sft", "prompt_learning"):
        return
    for problem in unknown_key_problems(data):
        problems.add(problem.location, problem.message)


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
    _check_known_keys(data, problems)
    _check_algorithm(data, problems)
    _check_model_sections(data, problems)
    _check_compute_and_topology(data, problems)
    _check_rollout(data, problems)
    _check_optional_sections(data, problems)
    _check_sizes(data, problems)
    _check_judge(data, problems)
    _check_chat_templates(data, problems)
    _check_trainer_modes(data, problems)
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
    strict: bool = False,
) -> ValidationReport:
    """Validate a config file, read once; the report keeps the text and the file's stamp.
    Never raises for content problems; a missing or unreadable file is a Problem, or with
    ``strict`` the ConfigError itself."""
    path = Path(path)
    stamp = config_stamp(path)  # before reading, so a change during the read is noticed later
    try:
        text = read_config_text(path)
    except ConfigError as exc:
        if strict:
            raise
        problem = Problem(TOML_LOCATION, exc.message, hint=exc.hint)
        return ValidationReport(path=path, problems=[problem], config=None, raw=None,
                                allow_experimental=allow_experimental)
    return revalidate(text, path, stamp, allow_experimental=allow_experimental, env=env)


def revalidate(text: str, path: Path, stamp: tuple[int, int] | None, *, allow_experimental: bool | None,
               env: Mapping[str, str] | None) -> ValidationReport:
    """Validate text already read from ``path`` (nothing is read), as validate_rl_file does."""
    report = validate_rl_text(text, path, allow_experimental=allow_experimental, env=env)
    report.text, report.stamp, report.allow_experimental = text, stamp, allow_experimental
    return report


def config_stamp(path: Path) -> tuple[int, int] | None:
    """(mtime_ns, size), to notice a change on disk; None when the file cannot be stat'ed."""
    try:
        info = Path(path).stat()
    except (OSError, ValueError):
        return None
    return info.st_mtime_ns, info.st_size
