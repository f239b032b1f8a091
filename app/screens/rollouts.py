"""The rollout inspector (docs/product.md#rollout-inspector): the episodes a job's backend kept,
best and worst of a step, one opened turn by turn, two of the same seed side by side.

What is listed and compared is chosen by ``app.core.runs.rollout_pick``; reading is
``app.core.runs.rollouts``; this module arranges it."""

from __future__ import annotations

from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.notifications import Notification, Notify
from textual.screen import Screen
from textual.widgets import DataTable, Static

from app.core.errors import SynthTuiError
from app.core.redact import redact
from app.core.runs.rollout_pick import compare_partner, nearest_step, next_phase, shifted_step, step_rollouts, steps_of
from app.core.runs.rollouts import Rollout, RolloutsNotServed, RolloutSummary, get_rollout, list_rollouts
from app.screens.base import FlowScreen
from app.screens.commands import palette_tooltip
from widgets.app_header import AppHeader
from widgets.cells import cell
from widgets.compat.textual_compat import withdraw_notification
from widgets.rollout_view import RolloutView, summary_line
from widgets.steady_footer import SteadyFooter
from widgets.table_keys import highlighted_key

if TYPE_CHECKING:
    from app.core.runs.jobs import JobContext

# Below this width the list takes the screen and enter opens a rollout on its own screen.
NARROW_BELOW = 120


class RolloutReader:
    """The rollouts of one job read so far, shared by the inspector's screens: a rollout is
    read once (they do not change once kept)."""

    def __init__(self, job_id: str, *, preset: tuple[list[RolloutSummary], list[Rollout]] | None = None) -> None:
        """``preset``: fixed summaries and rollouts, no backend (snapshots, README pictures)."""
        self.job_id = job_id
        self.preset = preset is not None
        self.summaries: list[RolloutSummary] = list(preset[0]) if preset else []
        self.rollouts: dict[str, Rollout] = {r.summary.rollout_id: r for r in preset[1]} if preset else {}

    async def read(self, screen: FlowScreen, rollout_id: str) -> Rollout:
        if rollout_id not in self.rollouts:
            if self.preset:
                raise SynthTuiError(f"Rollout {rollout_id} is not in this preset.")
            async with screen.session.client() as client:
                self.rollouts[rollout_id] = await get_rollout(client, self.job_id, rollout_id)
        return self.rollouts[rollout_id]


class RolloutsScreen(FlowScreen):
    TITLE = "Rollouts"
    BINDINGS = [
        Binding("enter", "open", "Open", id="rollouts.open", priority=True,
                tooltip=palette_tooltip("Open the rollout", "Show the selected rollout turn by turn")),
        # Pushed over a dashboard: q goes back, as esc does; near the front, so 80 columns show it.
        Binding("q,escape", "back", "Back", id="rollouts.back"),
        Binding("left_square_bracket", "step(-1)", "Earlier", id="rollouts.earlier", key_display="[",
                tooltip=palette_tooltip("Earlier step", "The rollouts of the step before")),
        Binding("right_square_bracket", "step(1)", "Later", id="rollouts.later", key_display="]",
                tooltip=palette_tooltip("Later step", "The rollouts of the step after")),
        Binding("t", "phase", "Phase", id="rollouts.phase",
                tooltip=palette_tooltip("Train or eval rollouts",
                                        "Show all, only training or only evaluation rollouts")),
        Binding("w", "worst_first", "Order", id="rollouts.order",
                tooltip=palette_tooltip("Worst first", "Sort by reward, lowest first, or back to highest first")),
        Binding("c", "compare", "Same seed", id="rollouts.compare",
                tooltip=palette_tooltip("Compare with the same seed",
                                        "The selected rollout beside one of the same seed at another step")),
        Binding("f5", "reload", "Reload", id="rollouts.reload",
                tooltip=palette_tooltip("Reload the rollouts", "Ask the backend again")),
    ]

    def __init__(self, job: JobContext, *, step: int | None = None, reader: RolloutReader | None = None) -> None:
        """``step``: the step shown first (None: the latest); ``reader``: one with a preset."""
        super().__init__()
        self.job = job
        self.reader = reader or RolloutReader(job.job_id)
        self.wanted_step = step
        self.step: int | None = None
        self.phase = "all"
        self.worst_first = False
        self.loads = 0  # completed reads of the list (tests wait on it)
        self.problem: str | None = None

    def compose(self) -> ComposeResult:
        yield AppHeader()
        yield Static("", id="rollouts-header", classes="flow-header")
        with Horizontal(id="rollouts-body"):
            yield DataTable(id="rollouts-table", cursor_type="row", zebra_stripes=True)
            yield RolloutView(placeholder="The highlighted rollout shows here.", id="rollouts-preview")
        yield SteadyFooter(compact=True)

    def on_mount(self) -> None:
        super().on_mount()
        table = self.query_one(DataTable)
        for label, key, width in (("Reward", "reward", 7), ("Phase", "phase", 5), ("Step", "step", 5),
                                  ("Seed", "seed", 6), ("Turns", "turns", 5), ("Rollout", "id", 26)):
            table.add_column(label, key=key, width=width)
        self._fit(self.size.width)
        # Reading the list can take seconds: the empty table says it is waiting, not empty.
        table.loading = not self.reader.preset
        self.action_reload()

    def on_resize(self, event: events.Resize) -> None:
        self._fit(event.size.width)

    def _fit(self, width: int) -> None:
        self.set_class(width < NARROW_BELOW, "-narrow")

    # -- reading ----------------------------------------------------------------------------

    def action_reload(self) -> None:
        self._load()

    @work(exclusive=True, group="rollouts-list", exit_on_error=False, name="Rollouts")
    async def _load(self) -> None:
        try:
            if not self.reader.preset:
                async with self.session.client() as client:
                    self.reader.summaries = await list_rollouts(client, self.job.job_id)
            self.problem = None
        except RolloutsNotServed as exc:
            self.problem = exc.message
            self.notify(f"{exc.message} {exc.hint or ''}".strip(), title="No rollouts here", severity="warning",
                        markup=False)
        except SynthTuiError as exc:
            self.problem = redact(exc.message, self.session.secret_values())
            self.notify(self.problem, title="Rollouts", severity="error", markup=False)
        finally:
            self.loads += 1
            self.query_one(DataTable).loading = False
        self.step = nearest_step(steps_of(self.reader.summaries, self.phase), self.step or self.wanted_step)
        self._show()

    # -- showing ----------------------------------------------------------------------------

    def shown(self) -> list[RolloutSummary]:
        return step_rollouts(self.reader.summaries, self.step, self.phase, worst_first=self.worst_first)

    def _show(self, *, keep_selection: bool = True) -> None:
        """List the rollouts; a new order, step or phase starts at the top (the best, or the
        worst with w), a reload keeps the highlighted one."""
        table = self.query_one(DataTable)
        keep = self.selected() if keep_selection else None
        table.clear()
        shown = self.shown()
        for summary in shown:
            style = "green" if summary.reward > 0 else ""
            table.add_row(Text(f"{summary.reward:.3f}", style=style, justify="right"), summary.phase,
                          str(summary.step), "?" if summary.seed is None else str(summary.seed),
                          str(summary.turns), cell(summary.rollout_id), key=summary.rollout_id)
        if keep is not None and any(s.rollout_id == keep.rollout_id for s in shown):
            table.move_cursor(row=table.get_row_index(keep.rollout_id))
        self._render_header(shown)
        self._preview()

    def _render_header(self, shown: list[RolloutSummary]) -> None:
        steps = steps_of(self.reader.summaries, self.phase)
        if self.problem:
            text = Text(self.problem, style="bold")
        elif not self.loads:
            text = Text(f"Reading the rollouts of job {self.job.job_id}…")
        elif not self.reader.summaries:
            text = Text(f"The backend kept no rollouts of job {self.job.job_id} yet: they are kept from its "
                        "first step on (f5 reads again).")
        else:
            where = f"step {self.step} of {steps[0]}–{steps[-1]} ([ ] move)" if steps else "no step"
            order = "worst first" if self.worst_first else "best first"
            text = Text.assemble((f"job {self.job.job_id}", "bold"), f"   {where}   {self.phase} (t changes)   ",
                                 f"{len(shown)} rollouts, {order}")
        self.query_one("#rollouts-header", Static).update(text)

    def selected(self) -> RolloutSummary | None:
        key = highlighted_key(self.query_one(DataTable))
        return next((s for s in self.reader.summaries if s.rollout_id == key), None) if key is not None else None

    @on(DataTable.RowHighlighted, "#rollouts-table")
    def _highlighted(self) -> None:
        withdraw_same_seed_notice(self)  # it spoke of the rollout highlighted before
        self._preview()

    def _preview(self) -> None:
        if self.has_class("-narrow"):
            return
        summary = self.selected()
        view = self.query_one(RolloutView)
        if summary is None:
            view.show(None)
        elif summary.rollout_id in self.reader.rollouts:
            view.show(self.reader.rollouts[summary.rollout_id])
        else:
            view.show(None, waiting=f"Reading {summary_line(summary)}…")
            self._read_preview(summary.rollout_id)

    @work(exclusive=True, group="rollouts-preview", exit_on_error=False, name="Rollout")
    async def _read_preview(self, rollout_id: str) -> None:
        rollout = await self.reader.read(self, rollout_id)
        chosen = self.selected()
        if chosen is not None and chosen.rollout_id == rollout_id:
            self.query_one(RolloutView).show(rollout)

    # -- keys -------------------------------------------------------------------------------

    def action_step(self, by: int) -> None:
        self.step = shifted_step(steps_of(self.reader.summaries, self.phase), self.step, by)
        self._show(keep_selection=False)

    def action_phase(self) -> None:
        self.phase = next_phase(self.phase)
        self.step = nearest_step(steps_of(self.reader.summaries, self.phase), self.step)
        self._show(keep_selection=False)

    def action_worst_first(self) -> None:
        self.worst_first = not self.worst_first
        self._show(keep_selection=False)

    def action_back(self) -> None:
        self.leave()

    @on(DataTable.RowSelected, "#rollouts-table")
    def _row_chosen(self) -> None:
        self.action_open()

    def action_open(self) -> None:
        summary = self.selected()
        if summary is not None:
            self._open(summary)

    @work(exclusive=True, group="rollouts-open", exit_on_error=False, name="Rollout")
    async def _open(self, summary: RolloutSummary) -> None:
        rollout = await self.reader.read(self, summary.rollout_id)
        self.app.push_screen(RolloutScreen(self.reader, rollout))

    def action_compare(self) -> None:
        summary = self.selected()
        if summary is not None:
            open_comparison(self, self.reader, summary)


# The "Same seed" warning each screen shows, taken down once it speaks of a rollout no longer
# chosen (the walk: it stayed up after another seed was chosen and compared).
_same_seed_notices: WeakKeyDictionary[Screen, Notification] = WeakKeyDictionary()


def withdraw_same_seed_notice(screen: Screen) -> None:
    if (notice := _same_seed_notices.pop(screen, None)) is not None:
        withdraw_notification(screen.app, notice)


def open_comparison(screen: FlowScreen, reader: RolloutReader, chosen: RolloutSummary) -> None:
    """``c``: ``chosen`` beside a rollout of the same seed at another step, or why not."""
    withdraw_same_seed_notice(screen)
    partner = compare_partner(chosen, reader.summaries)
    if partner is None:
        why = ("its seed is unknown" if chosen.seed is None
               else f"no other step kept a {chosen.phase} rollout of seed {chosen.seed}")
        notice = Notification(f"Nothing to compare it with: {why}.", "Same seed", "warning",
                              screen.app.NOTIFICATION_TIMEOUT, markup=False)
        _same_seed_notices[screen] = notice
        screen.app.post_message(Notify(notice))
        return
    screen.run_worker(_read_pair(screen, reader, chosen, partner), exclusive=True, group="rollouts-compare",
                      exit_on_error=False, name="Rollouts")


async def _read_pair(screen: FlowScreen, reader: RolloutReader, chosen: RolloutSummary,
                     partner: RolloutSummary) -> None:
    first, second = sorted((chosen, partner), key=lambda s: s.step)
    left = await reader.read(screen, first.rollout_id)
    right = await reader.read(screen, second.rollout_id)
    screen.app.push_screen(RolloutCompareScreen(left, right))


class RolloutScreen(FlowScreen):
    """One rollout, turn by turn, the whole screen."""

    TITLE = "Rollout"
    BINDINGS = [
        Binding("q,escape", "back", "Back", id="rollout.back"),
        Binding("c", "compare", "Same seed", id="rollout.compare"),
    ]

    def __init__(self, reader: RolloutReader, rollout: Rollout) -> None:
        super().__init__()
        self.reader = reader
        self.rollout = rollout

    def compose(self) -> ComposeResult:
        yield AppHeader()
        yield RolloutView(id="rollout-view")
        yield SteadyFooter(compact=True)

    def on_mount(self) -> None:
        super().on_mount()
        view = self.query_one(RolloutView)
        view.show(self.rollout)
        view.focus()

    def action_compare(self) -> None:
        open_comparison(self, self.reader, self.rollout.summary)

    def action_back(self) -> None:
        withdraw_same_seed_notice(self)  # about this rollout, which is left
        self.leave()


class RolloutCompareScreen(FlowScreen):
    """Two rollouts of one seed side by side, the earlier step on the left."""

    TITLE = "Same seed, two steps"
    BINDINGS = [Binding("q,escape", "back", "Back", id="rollout_compare.back")]

    def __init__(self, left: Rollout, right: Rollout) -> None:
        super().__init__()
        self.left = left
        self.right = right

    def compose(self) -> ComposeResult:
        yield AppHeader()
        with Horizontal(id="compare-pair"):
            yield RolloutView(id="compare-left")
            yield RolloutView(id="compare-right")
        yield SteadyFooter(compact=True)

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#compare-left", RolloutView).show(self.left)
        self.query_one("#compare-right", RolloutView).show(self.right)

    def action_back(self) -> None:
        self.leave()
