"""How a path is shown to the user: short, and the same on every machine where it can be.

No file system calls and no Textual import: the screens, the widgets and app.core use it.
"""

from __future__ import annotations

from pathlib import Path


def display_path(path: Path, cwd: Path) -> str:
    """Relative to ``cwd`` when under it ("configs/a.toml"), else absolute: a file from
    elsewhere should look like it. Pure string work, no file system calls, so it is safe on
    the UI thread."""
    path, cwd = Path(path), Path(cwd)
    try:
        relative = path.relative_to(cwd)
    except ValueError:
        return str(path)
    return str(relative) if relative.parts else "."


def home_relative(path: Path) -> str:
    """``~/project`` for a path under the home folder; otherwise the path unchanged. Used
    where the working directory itself is named, so it reads short."""
    path = Path(path)
    try:
        relative = path.relative_to(Path.home())
    except (ValueError, RuntimeError):
        return str(path)
    return "~" if not relative.parts else f"~/{relative}"
