"""The config picker's file work: one config read and validated for the list and the preview,
every config the picker lists, and why a typed path cannot be opened as a config.

Everything here reads files, so the picker screen calls it from thread workers and only
arranges what it gets back. No Textual import.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from app.core.config.discovery import bundled_config_label
from app.core.config.toml_source import parse_toml_text, read_config_text
from app.core.env.discovery import resolved_user_path
from app.core.errors import ConfigError
from app.core.launch.session import LaunchSession
from app.core.text import display_path

if TYPE_CHECKING:  # the schema (pydantic) is imported by the first validation, in a worker
    from app.core.config.validation import ValidationReport

__all__ = ["ConfigEntry", "config_path_problem", "disk_stamp", "find_config_entries", "load_config_entry"]


@dataclass(frozen=True)
class ConfigEntry:
    """One config as the picker shows it. Built in a worker (it needs file I/O); the UI
    only reads it."""

    path: Path
    label: str  # the path as shown: relative to the working directory when under it
    report: ValidationReport
    text: str | None  # the file's text for the preview; None when it cannot be read
    disk_stamp: tuple[int, int] | None  # (mtime_ns, size): to notice a change on disk
    last_used: bool = False
    explicit: bool = False  # named with --config

    @property
    def ok(self) -> bool:
        return self.report.ok

    @property
    def problem_count(self) -> int:
        return len(self.report.problems)

    @property
    def steps_only(self) -> bool:
        """Nothing is wrong in the file; it needs a step first (a model folder to make)."""
        return self.report.steps_only

    def matches(self, query: str) -> bool:
        """Every word of the filter appears in the path, in any order, ignoring case."""
        label = self.label.lower()
        return all(word in label for word in query.lower().split())


def disk_stamp(path: Path) -> tuple[int, int] | None:
    """(mtime_ns, size), to notice a change on disk; None when the file cannot be stat'ed."""
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size


def load_config_entry(
    session: LaunchSession, path: Path, *, last_used: bool = False, explicit: bool = False
) -> ConfigEntry:
    """Read one config (once), validate it and keep its text for the preview. Blocking: call
    from a worker."""
    report = session.validate(path)  # its stamp is taken before the read: a change during it shows later
    return ConfigEntry(
        path=path,
        label=bundled_config_label(path) or display_path(path, session.options.cwd.resolve()),
        report=report,
        text=report.text,
        disk_stamp=report.stamp if report.text is not None else disk_stamp(path),
        last_used=last_used,
        explicit=explicit,
    )


def find_config_entries(session: LaunchSession, opened: Sequence[Path] = ()) -> list[ConfigEntry]:
    """``--config`` paths first, then the discovered configs (last used first), then the files
    the user opened by path. Blocking: call from a worker."""
    explicit = [resolved_user_path(p) for p in session.options.config_paths]
    discovered = session.discover_configs()
    last_used = {c.path for c in discovered if c.last_used}
    ordered = list(dict.fromkeys([*explicit, *(c.path for c in discovered), *opened]))
    return [
        load_config_entry(session, path, last_used=path in last_used, explicit=path in explicit)
        for path in ordered
    ]


def config_path_problem(path: Path, cwd: Path) -> str | None:
    """Why ``path`` cannot be opened as a config, or None. A .toml with a syntax error is
    accepted: the preview shows where the error is."""
    shown = display_path(path, cwd)
    if not path.exists():
        return f"No file at {shown}"
    if path.is_dir():
        return f"{shown} is a folder; type the path of a .toml file"
    try:
        text = read_config_text(path)
    except ConfigError as exc:
        return exc.message.replace(str(path), shown)
    if path.suffix.lower() != ".toml":
        try:
            parse_toml_text(text, path)
        except ConfigError:
            return f"{shown} is not a TOML file"
    return None
