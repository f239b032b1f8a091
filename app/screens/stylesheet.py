"""styles.tcss, the one stylesheet, and how the app takes it in two parts: a config picker that is
the first screen is drawn with the part above the first-frame line, and the later steps' rules
(two thirds of the file) are parsed after its first frame (docs/performance.md#first-paint)."""

from __future__ import annotations

from pathlib import Path

from textual.app import App

# styles.tcss's line between what the config picker draws (and its dialogs) and the later steps' rules.
FIRST_FRAME_LINE = "/* ======================== the first frame:"
LATER_RULES = "after the first frame"  # where Textual says the later part came from (its read_from)


def stylesheet_path() -> Path:
    """``styles.tcss`` sits at the repo root in a checkout and inside ``app/`` in a wheel."""
    installed = Path(__file__).resolve().parents[1] / "styles.tcss"
    return installed if installed.exists() else Path(__file__).resolve().parents[2] / "styles.tcss"


def stylesheet_parts(css: str) -> tuple[str, str]:
    """styles.tcss as (its part above the first-frame line, the rest). The rest keeps its line
    numbers (blank lines in place of the first part), so a CSS error names its line in the file."""
    at = css.find(FIRST_FRAME_LINE)
    if at < 0:
        return css, ""
    first = css[:at]
    return first, "\n" * first.count("\n") + css[at:]


def add_styles(app: App[int], *, first_part_only: bool) -> str | None:
    """styles.tcss into `app`'s stylesheet, as Textual's CSS_PATH would add it; with
    `first_part_only` (the picker comes first), only the part above the first-frame line, each
    widget of the first frame styled against a third of the rules. Returns the later part still to
    add (add_later_styles), or None when everything is in."""
    path = str(stylesheet_path())
    first, later = stylesheet_parts(Path(path).read_text(encoding="utf-8"))
    app.stylesheet.add_source(first, read_from=(path, ""))
    if not later or first_part_only:
        return later or None
    app.stylesheet.add_source(later, read_from=(path, LATER_RULES))
    return None


def add_later_styles(app: App[int], later: str) -> None:
    """The later steps' rules; the screens already built are styled again, so a later rule that
    matches one of their widgets applies as if parsed at start."""
    app.stylesheet.add_source(later, read_from=(str(stylesheet_path()), LATER_RULES))
    for screen in app.screen_stack:
        app.stylesheet.update(screen)
