"""Which sections and keys an RL config may hold: one rule for every checker (docs/wire-contract.md#config-schema).

A misspelt name (``[trainig]``, ``group_sise``) is not an extra setting but a lost one: the
SDK's schema allows any key, so the config used to pass `--dry-run` and the backend refused it
(or trained without it). `--dry-run`, the picker and the preview (through
app.core.config.validation) and the embedded backend (app.local.server.bodies, on a job's
`data.config`) call :func:`unknown_key_problems`, so the client names such a key before it
sends anything, in the words the backend would use.

The names are read from the schema (app.core.config.schema): a section is a pydantic model
whose fields are its keys; a field typed as a plain table (``[vllm]``, ``env_config``) holds
anything. A key the schema does not declare is unknown, so a new setting is declared there.
No Textual import.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import BaseModel

from app.core.config.schema import RLConfig

__all__ = ["KeyProblem", "closest_name", "known_keys", "unknown_key_problems"]

# Top-level keys that are not sections: the SDK's own error hint suggests `type = "rl"`
# (app.core.config.validation says what it does and does not mean).
TOP_LEVEL_VALUES = frozenset({"type"})
# How alike (difflib's ratio, or one edit apart) an unknown name and a known one must be to call
# it a misspelling:
# "trainig" and "training" are 0.93 alike, "group_sise" and "group_size" 0.9. A section is a
# closed list, so an unknown one is always named (with the closest, when one is this close); a
# key within a section is named only when it misspells a known one, since the hosted service
# reads keys the SDK's schema does not declare (configs/rl/crafter_qwen4b.toml, the SDK's own
# example, has rollout.task_app_origin_rewards_only).
SECTION_CUTOFF = 0.6
MIN_EDITED = 4  # or one edit apart, in names of at least this many letters
KEY_CUTOFF = 0.8
MAX_NAMED = 20  # a config of a thousand unknown keys is answered with twenty
MAX_LISTED = 12  # the known names listed when nothing is close to a wrong one


@dataclass(frozen=True)
class KeyProblem:
    location: str  # "section", "section.key" or "section.table.key"
    message: str


def _section_model(annotation: Any) -> type[BaseModel] | None:
    """The section model a field holds (``TrainingSection | None`` → TrainingSection), or None
    for a value or a free table."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        models = [arg for arg in typing.get_args(annotation) if isinstance(arg, type) and issubclass(arg, BaseModel)]
        return models[0] if len(models) == 1 else None
    return None


@cache
def known_keys(model: type[BaseModel] = RLConfig) -> Mapping[str, type[BaseModel] | None]:
    """A section's keys, each with the section model it holds (None: a value or a free table)."""
    return {name: _section_model(field.annotation) for name, field in model.model_fields.items()}


def _one_edit_apart(first: str, second: str) -> bool:
    """One letter added, dropped, changed or two swapped ("lroa" for "lora"), which difflib's
    ratio undervalues in a short name."""
    if abs(len(first) - len(second)) > 1 or first == second:
        return False
    pairs = zip(first, second, strict=False)
    start = next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(first), len(second)))
    a, b = first[start:], second[start:]
    return a[1:] == b[1:] or a[1:] == b or a == b[1:] or (a[:2] == b[1::-1] and a[2:] == b[2:])


def closest_name(name: str, known: Mapping[str, Any] | tuple[str, ...], cutoff: float) -> str | None:
    """The known name `name` misspells (difflib's ratio at least `cutoff`, or one edit apart), or None."""
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=cutoff)
    if close:
        return close[0]
    return next((key for key in sorted(known) if len(key) >= MIN_EDITED and _one_edit_apart(name, key)), None)


def _shown(key: str, table: bool, where: str) -> str:
    return (f"[{where}.{key}]" if where else f"[{key}]") if table else key


def _known_list(known: Mapping[str, Any], table: bool, where: str) -> str:
    names = sorted(known)
    listed = ", ".join(_shown(key, table, where) for key in names[:MAX_LISTED])
    more = f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else ""
    return f"the known ones are {listed}{more}"


def _unknown_section(key: str, where: str) -> KeyProblem:
    """A top-level name the schema does not know: always a problem (the sections are a closed list)."""
    known = known_keys(RLConfig)
    close = closest_name(key, known, SECTION_CUTOFF)
    words = f"did you mean {_shown(close, True, where)}?" if close else _known_list(known, True, where)
    return KeyProblem(key, f"unknown section; {words}")


def _walk(table: Mapping[str, Any], model: type[BaseModel], where: str) -> Iterator[KeyProblem]:
    known = known_keys(model)
    for name, value in table.items():
        key = str(name)
        location = f"{where}.{key}" if where else key
        if not where and key not in known and key not in TOP_LEVEL_VALUES:
            yield _unknown_section(key, where)
        elif key not in known:
            close = closest_name(key, known, KEY_CUTOFF)
            if close is not None:  # a key like no known one may be a setting of another backend
                is_table = isinstance(value, Mapping)
                what = "section" if is_table else "key"
                yield KeyProblem(location, f"unknown {what}; did you mean {_shown(close, is_table, where)}?")
        elif (inner := known[key]) is not None and isinstance(value, Mapping):
            yield from _walk(value, inner, location)


def unknown_key_problems(config: Any) -> list[KeyProblem]:
    """Every section of an RL config (the TOML as a table) that the schema does not know, and
    every key that misspells a known one, each with the name it was probably meant to be; at
    most MAX_NAMED."""
    if not isinstance(config, Mapping):
        return []
    problems = []
    for problem in _walk(config, RLConfig, ""):
        problems.append(problem)
        if len(problems) == MAX_NAMED:
            break
    return problems
