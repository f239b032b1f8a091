"""The command palette's commands of a screen, made from its key bindings: a binding with a
tooltip is a command. The tooltip's first line is the command's name in the palette, the rest
its help (the footer shows the whole tooltip on hover); the key comes from the binding, so
nothing is typed twice (docs/product.md#keys).

    Binding("c", "cancel_job", "Cancel", id="dashboard.cancel",
            tooltip="Cancel job\\nCancel the job on the backend (asks first)")

is "Cancel job" in the palette, with "Cancel the job on the backend (asks first) (c)" under it.
A binding the screen's ``check_action`` turns off (False) is left out."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import NamedTuple

from textual.actions import parse
from textual.binding import Binding
from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.screen import Screen


class PaletteCommand(NamedTuple):
    """One command of the palette. A named tuple, not a dataclass: this module is imported before
    the first frame, and a dataclass's making costs about five times as much (docs/performance.md)."""

    title: str
    help: str
    action: str  # the binding's action, run on the screen ("step(-1)" takes its parameters)


def palette_tooltip(title: str, help_text: str) -> str:
    """A binding's tooltip that makes it a palette command."""
    return f"{title}\n{help_text}"


def screen_bindings(screen: Screen) -> Iterator[Binding]:
    """The screen's own bindings (its classes' BINDINGS, most derived first), once each."""
    seen: set[str] = set()
    for cls in type(screen).__mro__:
        for binding in Binding.make_bindings(cls.__dict__.get("BINDINGS", ())):
            key = binding.id or f"{binding.key}:{binding.action}"
            if key not in seen:
                seen.add(key)
                yield binding


def palette_commands(screen: Screen) -> list[PaletteCommand]:
    commands: list[PaletteCommand] = []
    actions: set[str] = set()
    for binding in screen_bindings(screen):
        if not binding.tooltip or binding.action in actions:
            continue
        namespace, name, parameters = parse(binding.action)
        if not namespace and screen.check_action(name, parameters) is False:
            continue
        actions.add(binding.action)
        title, _, help_text = binding.tooltip.partition("\n")
        key = screen.app.get_key_display(binding)
        commands.append(PaletteCommand(title, f"{help_text} ({key})" if help_text else f"({key})", binding.action))
    return commands


class ScreenCommands(Provider):
    """The palette's provider of the screen's commands (SynthTuiApp.COMMANDS)."""

    def _commands(self) -> list[PaletteCommand]:
        return palette_commands(self.screen)

    def _run(self, command: PaletteCommand) -> partial:
        return partial(self.screen.run_action, command.action)

    async def discover(self) -> Hits:
        for command in self._commands():
            yield DiscoveryHit(command.title, self._run(command), help=command.help)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for command in self._commands():
            if (score := matcher.match(command.title)) > 0:
                yield Hit(score, matcher.highlight(command.title), self._run(command), help=command.help)
