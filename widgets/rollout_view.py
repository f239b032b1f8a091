"""One rollout, turn by turn: what the policy saw, what it chose, what the task app applied, the
reward; the words of an observation that changed since the turn before are marked, so a walk
towards the goal (or in circles) reads at a glance (docs/product.md#rollout-inspector)."""

from __future__ import annotations

import difflib
import re
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from app.core.redact import printable
from app.core.text import counted
from widgets.rollout_image import RolloutImage

if TYPE_CHECKING:
    from app.core.runs.rollouts import Rollout, RolloutSummary, RolloutTurn

# Images drawn a turn; the rest are counted in the turn's note.
MAX_IMAGES_A_TURN = 4
_WORDS = re.compile(r"\S+|\s+")
# An observation is the task app's words: shown whole up to this, then cut with a note.
MAX_OBSERVATION_CHARS = 4_000


def changed_words(previous: str | None, current: str) -> Content:
    """``current`` with the words that differ from ``previous`` in bold and the accent colour;
    nothing is marked on the first turn."""
    text = printable(current)
    if len(text) > MAX_OBSERVATION_CHARS:
        text = text[:MAX_OBSERVATION_CHARS] + f"… ({len(current) - MAX_OBSERVATION_CHARS:,} more characters)"
    if previous is None:
        return Content(text)
    before = _WORDS.findall(printable(previous)[:MAX_OBSERVATION_CHARS])
    after = _WORDS.findall(text)
    parts: list[tuple[str, str] | str] = []
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, _, _, start, end in matcher.get_opcodes():
        chunk = "".join(after[start:end])
        if tag == "equal" or not chunk.strip():
            parts.append(chunk)
        else:
            parts.append((chunk, "bold $accent"))
    return Content.assemble(*parts)


def shown_reward(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def summary_line(summary: RolloutSummary) -> str:
    seed = "?" if summary.seed is None else str(summary.seed)
    return (f"{summary.phase} step {summary.step} · seed {seed} · reward {summary.reward:.3f} · "
            f"{counted(summary.turns, 'turn')}")


def turn_heading(turn: RolloutTurn) -> Content:
    parts: list[tuple[str, str] | str] = [(f"turn {turn.index}", "bold")]
    if turn.reward is not None:
        parts += ["  reward ", (shown_reward(turn.reward), "$success" if turn.reward > 0 else "$text-muted")]
    if turn.done:
        parts += ["  ", ("done", "bold $success")]
    return Content.assemble(*parts)


def turn_body(turn: RolloutTurn, previous: RolloutTurn | None) -> Content:
    lines: list[Content] = [changed_words(previous.observation if previous else None, turn.observation)]
    if len(turn.images) > MAX_IMAGES_A_TURN:
        more = len(turn.images) - MAX_IMAGES_A_TURN
        lines.append(Content.styled(f"[{counted(more, 'more image')} in this observation]",
                                    "$text-muted"))
    if turn.images_omitted:
        count = turn.images_omitted
        lines.append(Content.styled(f"[{counted(count, 'image')} not kept by the backend: too large, "
                                    "too many, or holding a key]", "$text-muted"))
    lines.append(Content.assemble(("→ ", "$accent"), (printable(turn.action) or "(no tool call)", "bold")))
    if turn.applied:
        lines.append(Content.assemble(("  applied: ", "$text-muted"), printable(turn.applied)))
    return Content("\n").join(lines)


class RolloutView(VerticalScroll):
    """A rollout's turns, one block each; ``show(None)`` says what to do instead."""


    def __init__(self, *, placeholder: str = "", id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.rollout: Rollout | None = None
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        yield Static(Content.styled(self.placeholder, "$text-muted"), classes="rollout-empty")

    def show(self, rollout: Rollout | None, *, waiting: str | None = None) -> None:
        """Draw ``rollout`` (None: the placeholder, or ``waiting`` while it is read)."""
        if rollout is not None and rollout is self.rollout:
            return
        self.rollout = rollout
        self.remove_children()
        if rollout is None:
            self.border_title = None
            self.mount(Static(Content.styled(waiting or self.placeholder, "$text-muted"), classes="rollout-empty"))
            return
        self.border_title = summary_line(rollout.summary)
        blocks: list[Static] = []
        previous: RolloutTurn | None = None
        for turn in rollout.turns:
            blocks.append(Static(turn_heading(turn), classes="turn-heading"))
            blocks.extend(RolloutImage(source) for source in turn.images[:MAX_IMAGES_A_TURN])
            blocks.append(Static(turn_body(turn, previous), classes="turn-body"))
            previous = turn
        if rollout.turns_cut:
            blocks.append(Static(Content.styled(f"… and {rollout.turns_cut} more turns the backend did not keep.",
                                                "$text-muted"), classes="turn-heading"))
        if not blocks:
            blocks.append(Static(Content.styled("The backend kept no turns of this rollout.", "$text-muted")))
        self.mount_all(blocks)
        self.scroll_home(animate=False)
