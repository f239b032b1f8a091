"""RL training configs: find them, recognise them, validate them, summarise them.

Follows the SDK's `train` command (docs/wire-contract.md#configs) and improves on it where the
SDK hurts users: every problem of a config is reported at once with its line number (the SDK
stops at the first, often with a traceback), and `[policy]`-only configs are accepted.

This module is the public face of the config code: it re-exports the parts, so callers import
from here:

- app.core.config.discovery: finding configs, and the remembered last choice;
- app.core.config.toml_source: reading and parsing TOML, with line and column on errors;
- app.core.config.kind: what kind of config a parsed TOML is;
- app.core.config.schema: the pydantic section models and RLConfig;
- app.core.config.validation: Problem, ValidationReport and the checks;
- app.core.config.facts: the key facts for the picker's preview;
- app.core.config.payload and app.core.config.models: the payload builder and the model allow-list.

No Textual import: the headless CLI uses this.
"""

from __future__ import annotations

from app.core.config.discovery import (
    ConfigCandidate,
    discover_configs,
    project_config_roots,
    read_last_config,
    train_cli_state_path,
    write_last_config,
)
from app.core.config.facts import config_facts
from app.core.config.kind import ConfigKind, infer_config_type
from app.core.config.models import (
    check_rl_model,
    experimental_allowed,
    normalize_model_id,
)
from app.core.config.payload import build_rl_payload, resolve_task_url
from app.core.config.schema import (
    AlgorithmSection,
    ComputeSection,
    EvaluationSection,
    JudgeOptions,
    JudgeSection,
    LoraSection,
    ModelSection,
    PolicySection,
    RewardsSection,
    RLConfig,
    RolloutSection,
    ServicesSection,
    TopologySection,
    TrainingSection,
    WeightSyncSection,
)
from app.core.config.toml_source import TomlSyntaxError, load_toml, parse_toml_text
from app.core.config.validation import (
    ConfigValidationError,
    Problem,
    ValidationReport,
    validate_rl_file,
    validate_rl_mapping,
    validate_rl_text,
)

# One name, one home: toml_source and validation export their own names (TomlLineIndex,
# TOML_LOCATION, FIELD_REQUIRED); what is listed here is this facade's.
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
