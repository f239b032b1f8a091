"""The config picker's list: one line per RL config, with its verdict and where it came from."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from textual import events
from textual.binding import Binding
from textual.content import Content
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from app.core.text import counted, shorten_middle

if TYPE_CHECKING:
    from app.core.config.picker import ConfigEntry


def entry_prompt(entry: ConfigEntry, width: int = 0) -> Content:
    """The config's line; its path cut in the middle (the file name kept) to fit ``width``
    columns with its marks, when it is known (0: the width is not known yet)."""
    # A config that only needs a step first (a model folder to make) is not marked broken.
    if entry.ok:
        mark = ("✓ ", "$text-success")
    else:
        mark = ("→ ", "$text-warning") if entry.steps_only else ("✗ ", "$text-error")
    parts: list[tuple[str, str] | str] = [mark, entry.label]
    if entry.last_used:
        parts.append(("  ★ last used", "$text-accent"))
    if entry.explicit:
        parts.append(("  --config", "$text-primary"))
    if not entry.ok:
        count = entry.problem_count
        parts.append((f"  {counted(count, 'step')} first", "$text-warning") if entry.steps_only
                     else (f"  {counted(count, 'problem')}", "$text-error"))
    if width:
        marks = sum(len(part[0]) for part in parts if isinstance(part, tuple))
        parts[1] = shorten_middle(entry.label, width - marks)
    return Content.assemble(*parts)


class ConfigList(OptionList):
    """The configs that pass the filter. A click highlights (and so previews) a config; a
    click on the highlighted one, or enter, chooses it. OptionList would choose on the first
    click, which makes previewing with the mouse impossible."""

    # OptionList hides its enter binding; here it is the main action, so the footer shows it.
    BINDINGS = [Binding("enter", "select", "Choose", id="picker.list_choose")]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.entries: list[ConfigEntry] = []

    def show(self, entries: Sequence[ConfigEntry], *, keep: Path | None = None) -> None:
        """List ``entries``, keeping ``keep`` highlighted when it is still listed."""
        self.entries = list(entries)
        width = self._label_room()
        self.set_options(Option(entry_prompt(entry, width), id=str(entry.path)) for entry in self.entries)
        paths = [entry.path for entry in self.entries]
        if not paths:
            self.highlighted = None
        else:
            self.highlighted = paths.index(keep) if keep in paths else 0

    def on_resize(self, event: events.Resize) -> None:
        """A smaller terminal rewraps the rows; OptionList keeps its scroll, which can leave the
        highlighted config out of view (issue 37: tmux at 40x12). Scroll back to it once the
        rows are laid out again. Each path is cut again to the new width."""
        width = self._label_room()
        for index, entry in enumerate(self.entries):
            self.replace_option_prompt_at_index(index, entry_prompt(entry, width))
        self.call_after_refresh(self.scroll_to_highlight)

    def _label_room(self) -> int:
        """The columns an option's text has (its padding left out), 0 before the first layout."""
        width = self.scrollable_content_region.width
        padding = self.get_component_styles("option-list--option").padding.width
        return max(width - padding, 0) if width else 0

    @property
    def highlighted_entry(self) -> ConfigEntry | None:
        index = self.highlighted
        if index is None or not 0 <= index < len(self.entries):
            return None
        return self.entries[index]

    async def on_click(self, event: events.Click) -> None:
        # prevent_default: OptionList's own click handler (which selects at once) must not run.
        event.prevent_default()
        clicked = event.style.meta.get("option")
        if clicked is None:
            return
        if clicked == self.highlighted:
            self.action_select()
        else:
            self.highlighted = clicked
