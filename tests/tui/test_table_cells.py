"""No table cell breaks a word in two at 80x24 or 60x20: a cell narrower than its text wraps at
spaces or is cut with "…" (widgets/cells.py, docs/product.md#tables).

Each test draws a screen, takes the text inside one table's region and checks every word
drawn there: it is a word of the table's cells, or the start of one ending in "…". A word
split at the column's edge (`/rl/verify_task_` then `app`) is neither.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from pathlib import Path

import pytest
import test_history
import test_jobs
import test_rollouts
import test_verification
from rich.console import Console
from rich.text import Text
from test_config_picker import discovered
from textual.widget import Widget
from textual.widgets import DataTable

from app.core.launch.diagnosis import format_latency
from app.screens.history import HistoryTable
from support.pilot_waits import wait_for
from support.textual_compat import compositor
from widgets.cells import cell, wrapped_cell
from widgets.config_list import ConfigList
from widgets.diagnostics import DiagnosticsTable

pytestmark = pytest.mark.usefixtures("project_configs_only")

EXAMPLES = Path(__file__).resolve().parents[2] / "configs" / "rl"
SIZES = [(80, 24), (60, 20)]
# Drawn by the widget around the cells: scrollbars, rules, the check marks.
DECORATION = re.compile(r"^[─▁▂▃▄▅▆▇█▔▏▕▎▍▌▋▊▉]+$")


def words_of(texts: Iterable[str]) -> set[str]:
    return {word for text in texts for word in str(text).split()}


def drawn_words(app, widget: Widget) -> list[str]:
    """The words drawn inside the part of ``widget`` that is on the screen."""
    drawn = compositor(app.screen)
    lines = [strip.text for strip in drawn.render_strips()]
    region, clip = drawn.visible_widgets[widget]
    region = region.intersection(clip)
    inside = [line[region.x : region.right] for line in lines[region.y : region.bottom]]
    return [word for line in inside for word in line.split() if not DECORATION.match(word)]


def broken_words(drawn: Iterable[str], source: set[str], *, middle_cut: bool = False) -> list[str]:
    """Words drawn that are neither whole words of the cells nor a word's start cut with "…"
    (nor, with ``middle_cut``, a word's start and end with "…" between: a path cut in the
    middle, its file name whole, as the config list cuts one)."""
    def whole_or_cut(word: str) -> bool:
        if word in source:
            return True
        if middle_cut and word.count("…") == 1 and not word.endswith("…"):
            head, tail = word.split("…")
            return any(whole.startswith(head) and whole.endswith(tail) for whole in source)
        return word.endswith("…") and any(whole.startswith(word[:-1]) for whole in source)

    return [word for word in drawn if not whole_or_cut(word)]


def table_words(table: DataTable) -> set[str]:
    texts = [str(column.label) for column in table.columns.values()]
    for index in range(table.row_count):
        texts += [cell.plain if isinstance(cell, Text) else str(cell) for cell in table.get_row_at(index)]
    return words_of(texts)


# --------------------------------------------------------------------------- the helper


def rendered(text: Text, width: int) -> list[str]:
    console = Console(width=width)
    return ["".join(segment.text for segment in line).rstrip()
            for line in console.render_lines(text, console.options.update_width(width), pad=False)]


def test_a_one_line_cell_is_cut_with_an_ellipsis():
    assert rendered(cell("configs/rl/crafter_policy_lora.toml"), 16) == ["configs/rl/craf…"]
    assert rendered(cell("short"), 16) == ["short"]


def test_a_wrapped_cell_breaks_at_spaces_and_cuts_only_a_word_wider_than_the_column():
    assert rendered(wrapped_cell("POST /rl/verify_task_app · Bearer sk_t…89"), 20) == [
        "POST", "/rl/verify_task_app", "· Bearer sk_t…89"]
    assert rendered(wrapped_cell("POST /rl/verify_task_app"), 12) == ["POST", "/rl/verify_…"]


# --------------------------------------------------------------------------- the screens


@pytest.mark.parametrize("size", SIZES)
async def test_verification_rows_never_split_a_word(flow_app, monkeypatch, size):
    verify_app = functools.partial(flow_app, "verify", synth_key=test_verification.SYNTH_KEY,
                                   env_key=test_verification.ENV_KEY)
    app = test_verification.snapshot_app(verify_app, monkeypatch, env_key=test_verification.WRONG_ENV_KEY)
    async with app.run_test(size=size) as pilot:
        screen = await test_verification.checks_done(pilot)
        table = screen.query_one(DiagnosticsTable)
        source = words_of(["Check What was tried HTTP Time Reason and fix Fix:"])
        for row in table.rows:
            source |= words_of([row.check, row.tried, row.status or "—", row.verdict.symbol, row.reason, row.fix or ""])
            source |= words_of([format_latency(row.latency_ms)])
        drawn = drawn_words(app, table)
        assert any(word.startswith("/rl/verify") for word in drawn), "the backend's endpoint is drawn"
        assert broken_words(drawn, source) == []


@pytest.mark.parametrize("size", SIZES)
async def test_the_config_list_never_splits_a_path(make_app, project, size):
    deep = project / "experiments" / "gridworld-sweep-with-a-long-folder-name" / "learning-rate-3e-5"
    deep.mkdir(parents=True)
    (deep / "crafter_policy_lora_with_a_long_name.toml").write_text(
        (EXAMPLES / "crafter_policy_lora.toml").read_text())
    app = make_app()
    async with app.run_test(size=size) as pilot:
        screen = await discovered(pilot)
        config_list = screen.query_one(ConfigList)
        await wait_for(pilot, lambda: config_list.option_count == 1, what="the deep config listed")
        await pilot.pause()
        source = words_of([entry.label for entry in config_list.entries]) | {"✓", "✗", "★", "last", "used",
                                                                              "--config", "problem", "problems"}
        drawn = drawn_words(app, config_list)
        assert drawn, "the list is drawn"
        assert broken_words(drawn, source, middle_cut=True) == []
        assert any("crafter_policy_lora_with_a_long_name.toml" in word for word in drawn)  # the name whole


async def test_the_jobs_table_cuts_cells_with_an_ellipsis():
    app = test_jobs.preset_app()
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.screen.query_one(DataTable)
        await wait_for(pilot, lambda: table.row_count > 0, what="the jobs listed")
        await pilot.pause()
        assert broken_words(drawn_words(app, table), table_words(table)) == []


async def test_the_rollouts_table_cuts_cells_with_an_ellipsis():
    app = test_rollouts.preset_app()
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.screen.query_one(DataTable)
        await wait_for(pilot, lambda: table.row_count > 0, what="the rollouts listed")
        await pilot.pause()
        assert broken_words(drawn_words(app, table), table_words(table)) == []


async def test_the_history_table_cuts_cells_with_an_ellipsis(project):
    app = test_history.snapshot_app(project)
    async with app.run_test(size=(80, 24)) as pilot:
        await test_history.settled(pilot)
        table = app.screen.query_one(HistoryTable)
        assert broken_words(drawn_words(app, table), table_words(table)) == []
