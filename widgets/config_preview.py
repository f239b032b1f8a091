"""The config picker's preview: the verdict, the key facts, and the TOML itself."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.content import Content
from textual.css.query import NoMatches
from textual.widgets import Static

from app.core.invocation import as_run
from app.core.redact import printable
from app.core.text import counted
from widgets.compat.textual_compat import is_being_removed
from widgets.hollow import Hollow

if TYPE_CHECKING:  # the schema's modules come with the first config, after the first frame (docs/performance.md)
    from app.core.config.picker import ConfigEntry
    from app.core.config.validation import Problem

# Pygments themes that sit well on Textual's dark and light surfaces.
DARK_SYNTAX_THEME = "monokai"
LIGHT_SYNTAX_THEME = "friendly"
FLASH_SECONDS = 1.2


def problem_where(problem: Problem) -> str:
    if problem.line is not None and problem.column is not None:
        return f"line {problem.line} col {problem.column}"
    if problem.line is not None:
        return f"line {problem.line}"
    return ""


def problem_text(problem: Problem) -> Content:
    """``compute.gpu_count  field required``, then the hint on its own line."""
    from app.core.config.toml_source import TOML_LOCATION  # tomllib: not before the first frame

    location = "TOML" if problem.location == TOML_LOCATION else problem.location
    parts: list[tuple[str, str] | str] = [(location, "bold"), "  ", problem.message]
    if problem.hint:
        # A command it names (`synth-tui tiny-model …`) is named as it was run (app/core/invocation.py).
        hint = as_run(problem.hint)
        parts += ["\n", (f"{'next step' if problem.next_step else 'hint'}: {hint}", "$text-muted")]
    return Content.assemble(*parts)


def by_line(problems: list[Problem]) -> list[Problem]:
    """In file order, so reading the list is reading the file; problems without a line last."""
    return sorted(problems, key=lambda p: (p.line is None, p.line or 0, p.column or 0))


def verdict_heading(entry: ConfigEntry) -> Content:
    if entry.ok:
        return Content.assemble(("✓ valid RL config", "bold $text-success"), ("  · enter chooses it", "$text-muted"))
    count = entry.problem_count
    if entry.steps_only:
        return Content.assemble(
            (f"→ {counted(count, 'step')} before it can run", "bold $text-warning"),
            ("  · nothing is wrong in the file; this preview reloads when it changes", "$text-muted"),
        )
    return Content.assemble(
        (f"✗ {counted(count, 'problem')}", "bold $text-error"),
        ("  · fix them in the file; this preview reloads when it changes", "$text-muted"),
    )


class LabelledRow(Horizontal):
    """A short label in a fixed-width column and its text beside it, wrapping under itself."""

    def __init__(self, label: str, body: Content | str, *, classes: str) -> None:
        super().__init__(classes=f"labelled-row {classes}")
        self.label = label
        self.body = body

    def compose(self) -> ComposeResult:
        yield Static(self.label, classes="row-label", markup=False)
        yield Static(self.body, classes="row-body", markup=False)


class ConfigPreview(Hollow, VerticalScroll):
    """Shows one :class:`ConfigEntry`; redraws the TOML when the app switches dark/light. Its
    parts are its children: its own rows are its border, drawn once (widgets/hollow.py)."""

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.entry: ConfigEntry | None = None
        self.built = False

    # No compose: the preview is empty until a config is shown, which comes after discovery, after
    # the picker's first frame. Its parts (empty, they draw nothing) are mounted after that frame,
    # or when first needed, so the first frame styles, lays out and draws five widgets fewer
    # (docs/performance.md#first-paint).
    def build(self) -> bool:
        """Mount the preview's parts, once; whether they are there (they can be queried as soon
        as this returns). A preview being removed (its screen closed as it opened) gets none,
        and shows nothing."""
        if not self.built:
            if is_being_removed(self) or not self.is_attached:
                return False
            self.built = True
            self.mount(Vertical(Static(id="verdict-heading"), Vertical(id="verdict-problems"), id="preview-verdict"),
                       Vertical(id="preview-facts"), Static(id="preview-source"))
        return True

    def on_mount(self) -> None:
        self.watch(self.app, "theme", lambda _theme: self._show_source(), init=False)
        self.call_after_refresh(self.build)  # the result is for show(): nothing to do here

    def show(self, entry: ConfigEntry | None) -> None:
        if entry is self.entry and entry is not None:
            return  # entries are immutable: a re-read file arrives as a new entry
        if not self.build():
            return
        try:
            heading = self.query_one("#verdict-heading", Static)
            problems = self.query_one("#verdict-problems")
            facts = self.query_one("#preview-facts")
        except NoMatches:  # its parts already pruned: its screen closes (the app ends) as the search answers
            return
        self.entry = entry
        problems.remove_children()
        facts.remove_children()
        if entry is None:
            self.border_title = "Preview"
            heading.update("")
            self.query_one("#preview-source", Static).update("")
            return
        self.border_title = entry.label
        heading.update(verdict_heading(entry))
        problems.mount_all(
            LabelledRow(problem_where(p), problem_text(p), classes="problem") for p in by_line(entry.report.problems)
        )
        facts.mount_all(self._fact_rows(entry))
        self._show_source()

    @staticmethod
    def _fact_rows(entry: ConfigEntry) -> list[Static | LabelledRow]:
        config = entry.report.config
        if config is None:
            return [Static(Content.styled("Key facts appear once the config is valid.", "$text-muted"))]
        from app.core.config.facts import config_facts

        return [LabelledRow(name, value, classes="fact") for name, value in config_facts(config).items()]

    def flash(self) -> None:
        """Draw the eye to the verdict when the user tried to choose an invalid config."""
        if not self.build():
            return
        verdict = self.query_one("#preview-verdict")
        verdict.add_class("-flash")
        self.scroll_home(animate=False)
        self.set_timer(FLASH_SECONDS, lambda: verdict.remove_class("-flash"))

    def _show_source(self) -> None:
        if not self.build():
            return
        source = self.query_one("#preview-source", Static)
        entry = self.entry
        if entry is None or entry.text is None:
            source.update(Content.styled("(the file cannot be read)", "$text-muted") if entry else "")
            return
        from rich.syntax import Syntax  # with Pygments: not needed before the first config is shown

        problem_lines = {p.line for p in entry.report.problems if p.line is not None}
        dark = self.app.current_theme.dark
        source.update(
            Syntax(
                printable(entry.text),  # a control character in the file must not reach the terminal
                "toml",
                theme=DARK_SYNTAX_THEME if dark else LIGHT_SYNTAX_THEME,
                line_numbers=True,
                word_wrap=True,
                highlight_lines=problem_lines,
                # Blend with the pane instead of painting the theme's own background block.
                background_color=self.app.theme_variables.get("surface"),
            )
        )
