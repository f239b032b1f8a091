"""Which value each key a run needs comes from: a flag, the shell, the .env, an alias, Modal,
or nowhere. docs/wire-contract.md#env-files (resolution, aliases).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from app.core.env.envfile import EnvFile
from app.core.env.keys import FLAG_NAMES, KEY_ALIASES, REQUIRED_KEYS, display_value

# "modal": fetched from Modal for this session (app/core/modal.py, docs/modal.md), never
# written to the .env unless the user saves it; ``origin`` says from where, e.g. "Modal secret NAME".
# "preview": the Task URL typed in the payload preview, for this session only (LaunchSession
# marks it; docs/product.md#payload-preview). It wins over --task-url, like a flag.
Source = Literal["flag", "preview", "shell", "file", "alias", "modal", "missing"]


@dataclass(frozen=True, repr=False)
class ResolvedKey:
    """Where one key's effective value comes from.

    ``origin``: the flag name (source "flag"), the env file path ("file"), the alias key name
    ("alias"), where in Modal it was read ("modal", e.g. "Modal secret NAME"), else None.
    ``shell_overrides_file``: the shell and the file both set the key to different values (so
    the file's value is not the one used).
    """

    name: str
    value: str | None
    source: Source
    origin: str | None
    required: bool
    shell_overrides_file: bool

    @property
    def display(self) -> str:
        return display_value(self.name, self.value)

    @property
    def where(self) -> str:
        """Where the value comes from, in words, for messages."""
        return {
            "flag": f"the {self.origin} flag" if str(self.origin).startswith("-") else f"the key {self.origin} made",
            "shell": "the shell environment",
            "file": str(self.origin),
            "alias": f"its alias {self.origin}",
            "modal": str(self.origin),
            "preview": "the payload preview's override",
        }.get(self.source, "nowhere")

    def __repr__(self) -> str:
        return (
            f"ResolvedKey(name={self.name!r}, value={self.display!r}, source={self.source!r}, "
            f"origin={self.origin!r}, required={self.required}, "
            f"shell_overrides_file={self.shell_overrides_file})"
        )

    __str__ = __repr__



def source_of_flag_key(key: ResolvedKey) -> str:
    """Where a key of source "flag" comes from, in a few words: "flag --task-url", or, for the
    key of a backend a command started, that command: "made by lab" (an origin not a flag)."""
    origin = str(key.origin)
    return f"flag {origin}" if origin.startswith("-") else f"made by {origin}"

def resolve_keys(
    env_file: EnvFile | None,
    *,
    shell: Mapping[str, str],
    flags: Mapping[str, str] | None = None,
) -> list[ResolvedKey]:
    """One entry per REQUIRED_KEYS key, then every other key of the file in file order.

    Precedence: flag > shell KEY > file KEY > shell alias > file alias. ``flags`` maps key
    names (e.g. "TASK_APP_URL") to the flag's value. Empty values count as missing.
    """
    file_values = env_file.values if env_file is not None else {}
    file_origin = str(env_file.path) if env_file is not None else None
    flags = flags or {}
    names = list(REQUIRED_KEYS) + [k for k in file_values if k not in REQUIRED_KEYS]
    return [
        _resolve_one(name, name in REQUIRED_KEYS, file_values, file_origin, shell, flags)
        for name in names
    ]


def _resolve_one(
    name: str,
    required: bool,
    file_values: Mapping[str, str | None],
    file_origin: str | None,
    shell: Mapping[str, str],
    flags: Mapping[str, str],
) -> ResolvedKey:
    shell_value = shell.get(name) or None
    file_value = file_values.get(name) or None
    overrides = bool(shell_value and file_value and shell_value != file_value)

    def make(value: str | None, source: Source, origin: str | None) -> ResolvedKey:
        return ResolvedKey(name, value, source, origin, required, overrides)

    if flags.get(name):
        return make(flags[name], "flag", FLAG_NAMES.get(name, "--" + name.lower().replace("_", "-")))
    # Shell before file: the SDK preloads file keys into the environment only when unset there.
    if shell_value:
        return make(shell_value, "shell", None)
    if file_value:
        return make(file_value, "file", file_origin)
    aliases = KEY_ALIASES.get(name, ())
    # Differs from the SDK on purpose: the SDK reads aliases from the file only; an alias
    # exported in the shell counts here too (after the file's own KEY, before the file's alias).
    for alias in aliases:
        if shell.get(alias):
            return make(shell[alias], "alias", alias)
    for alias in aliases:
        if file_values.get(alias):
            return make(file_values[alias], "alias", alias)
    return make(None, "missing", None)


def missing_required(resolved: Sequence[ResolvedKey], *, optional: Iterable[str] = ()) -> list[str]:
    """Names of required keys that have no value (``optional`` ones excepted)."""
    skip = set(optional)
    return [r.name for r in resolved if r.required and not r.value and r.name not in skip]


