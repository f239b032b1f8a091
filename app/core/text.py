"""How counts and paths read on screen, the same in every front end.

``counted(1, "job")`` is "1 job", ``counted(2, "job")`` "2 jobs", so no header reads "1 jobs";
a path is shown short, and the same on every machine where it can be. No file system calls
and no Textual import: the screens, the widgets, the headless runs and app.core use it.
"""

from __future__ import annotations

from pathlib import Path


def plural(count: int, noun: str, many: str | None = None) -> str:
    """The noun as it reads after ``count``: ``many`` (default: noun + "s") unless count is 1."""
    return noun if count == 1 else (many or f"{noun}s")


def counted(count: int, noun: str, many: str | None = None) -> str:
    """``count`` and the noun in the matching number, with thousands separated: "1 job", "0 jobs",
    "1,200 jobs"; ``many`` for an irregular plural ("1 entry", "2 entries")."""
    return f"{count:,} {plural(count, noun, many)}"


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


def shorten_middle(path: str, width: int) -> str:
    """``path`` in at most ``width`` characters, cut in the middle and the file name kept whole
    (two long paths that differ only at the end must still look different). When even the file
    name does not fit, the path is left whole, to wrap: a cut name would say less."""
    name = path.rsplit("/", 1)[-1]
    if len(path) <= width or len(name) + 2 > width:
        return path
    tail = max(len(name) + 1, (width - 1) // 2)  # the name and its slash, or half the room
    return path[:width - 1 - tail] + "…" + path[-tail:]


def home_relative(path: Path) -> str:
    """``~/project`` for a path under the home folder; otherwise the path unchanged. Used
    where the working directory itself is named, so it reads short."""
    path = Path(path)
    try:
        relative = path.relative_to(Path.home())
    except (ValueError, RuntimeError):
        return str(path)
    return "~" if not relative.parts else f"~/{relative}"


def cut_at_line(text: str, limit: int, whole_at: str) -> str:
    """``text`` whole when it has at most ``limit`` characters; else its lines that fit (a JSON
    printed with indent=2 is cut between two of its values, not mid-key), then a line saying
    how much is left and where the whole is: "… (1,234 more characters: WHOLE_AT)". A first line
    longer than ``limit`` is cut at ``limit``; the marker says so just the same."""
    if len(text) <= limit:
        return text
    end = text.rfind("\n", 0, limit + 1)
    kept = text[:end] if end > 0 else text[:limit]
    return f"{kept}\n… ({counted(len(text) - len(kept), 'more character')}: {whole_at})"


def size_words(size: int) -> str:
    """A size in bytes as a person reads it, in decimal units (1 kB = 1,000 bytes, 1 MB = 10^6,
    1 GB = 10^9), the one unit every message about a model's size uses: "98 MB" for the
    98,362,432 bytes of SmolLM2-135M-Instruct.Q4_1.gguf (93.8 MiB), "1.2 GB", "130 kB"."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            value = size / scale
            return f"{value:.1f} {unit}" if value < 10 else f"{value:,.0f} {unit}"
    return counted(size, "byte")
