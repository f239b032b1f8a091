"""A table of the keys a train run needs: name, masked value, where it comes from, warnings.

Only ``ResolvedKey.display`` (the SDK's mask for secrets, URLs in full) ever reaches a cell,
so a full secret cannot be drawn by this table, whatever the caller passes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.color import Color, ColorParseError
from textual.widgets import DataTable

from app.core.env.resolve import ResolvedKey, source_of_flag_key
from app.core.redact import printable
from widgets.cells import cell

# What a key this run can do without is still used for, when it is set (the line under the table).
OPTIONAL_USES = {
    "TASK_APP_URL": "When set, verification checks this task app and the job trains on it (it comes before the "
                    "config's [services].task_url; --task-url comes before both).",
}
NOT_SAVED = "not saved yet"


def source_label(key: ResolvedKey, *, edited: bool = False) -> str:
    if edited and key.source == "file":
        return NOT_SAVED  # in the .env in memory only: ctrl+s writes it
    if key.source == "alias":
        return f"alias {key.origin}"
    if key.source == "flag":
        return source_of_flag_key(key)
    if key.source == "modal":
        return "Modal"
    return key.source  # preview, shell, file or missing


def describe(key: ResolvedKey, file_label: str, *, edited: bool = False) -> str:
    """One sentence about where a key's value comes from, for the line under the table.
    ``edited``: set in this screen and not saved yet (its value is not in the file on disk)."""
    if key.source == "missing":
        if key.required:
            return f"{key.name} is required and has no value: press enter to set it in {file_label}."
        return f"{key.name} has no value."
    where = {
        "shell": "your shell's environment",
        "file": file_label,
        "alias": f"its alias {key.origin}",
        "flag": f"the {key.origin} flag",
        "modal": f"{key.origin} (read for this session; not in {file_label} unless you save it there)",
        "preview": f"the payload preview's Task URL override (this session only; enter replaces it, "
                   f"and what you enter goes into {file_label})",
    }[key.source]
    if edited and key.source == "file":
        text = f"{key.name} = {key.display}, set here and {NOT_SAVED}: ctrl+s writes it to {file_label}."
    else:
        text = f"{key.name} = {key.display}, from {where}."
    if key.shell_overrides_file:
        text += f" {file_label} sets another value, which is not used while the shell's is set."
    if not key.required:
        text += " " + OPTIONAL_USES.get(key.name, "Not one of the keys the train run needs.")
    return text


class MaskedEnvTable(DataTable):
    """One row per key, keyed by the key's name. A click moves the cursor to a row; a click on
    the selected row (or enter) asks to edit it (DataTable.RowSelected). Home and End move the
    cursor to the first and last key (DataTable binds them to the horizontal scroll)."""

    BINDINGS = [
        Binding("home", "scroll_top", "First key", id="env_table.first", show=False),
        Binding("end", "scroll_bottom", "Last key", id="env_table.last", show=False),
    ]
    COLUMNS = ("Key", "Value", "Source", "Note")

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self._shown: tuple[list[ResolvedKey], frozenset[str]] = ([], frozenset())

    def on_mount(self) -> None:
        for column in self.COLUMNS:
            self.add_column(column, key=column.lower())
        # Cells are Rich text coloured from the theme; redraw them when the theme changes.
        self.watch(self.app, "theme", lambda _theme: self.show(*self._shown), init=False)

    def show(self, resolved: Sequence[ResolvedKey], edited: Iterable[str] = ()) -> None:
        """Replace the rows, keeping the cursor on the same key when it is still there."""
        edited = frozenset(edited)
        self._shown = (list(resolved), edited)
        keep = self.selected_key
        self.clear()
        for key in resolved:
            self.add_row(*self._cells(key, key.name in edited), key=key.name)
        names = [key.name for key in resolved]
        if keep in names:
            self.move_cursor(row=names.index(keep), animate=False)

    def select_key(self, name: str) -> None:
        names = [str(row.key.value) for row in self.ordered_rows]
        if name in names:
            self.move_cursor(row=names.index(name), animate=False)

    @property
    def selected_key(self) -> str | None:
        if not self.row_count:
            return None
        row = self.ordered_rows[self.cursor_row] if 0 <= self.cursor_row < self.row_count else None
        return str(row.key.value) if row is not None else None

    # -- cells -------------------------------------------------------------------------------

    def _cells(self, key: ResolvedKey, edited: bool) -> tuple[Text, Text, Text, Text]:
        name = Text(key.name, style=Style(bold=key.required))
        value = Text(printable(key.display), style=self._style("foreground-muted") if not key.value else "")
        source = Text(source_label(key, edited=edited),
                      style=self._style("text-error") if key.source == "missing" else "")
        return cell(name), cell(value), cell(source), cell(self._note(key, edited))

    def _note(self, key: ResolvedKey, edited: bool) -> Text:
        note = Text()
        parts: list[tuple[str, Style | str]] = []
        if key.required and not key.value:
            parts.append(("required — missing", self._style("text-error")))
        if key.shell_overrides_file:
            parts.append(("⚠ shell overrides file", self._style("text-warning")))
        if edited:
            parts.append(("● edited, not saved", self._style("text-accent")))
        for index, (text, style) in enumerate(parts):
            if index:
                note.append(" · ", style=self._style("foreground-muted"))
            note.append(text, style=style)
        return note

    def _style(self, variable: str) -> Style:
        """A theme colour as a Rich style (Rich text cannot read $variables itself)."""
        try:
            color = Color.parse(self.app.theme_variables.get(variable, ""))
        except ColorParseError:
            return Style()
        return Style(color=color.rich_color)
