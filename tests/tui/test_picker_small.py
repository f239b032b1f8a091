"""The config picker at small sizes (issue 37: in tmux at 40x12 the picker hid its highlighted
row): after the terminal shrinks, the highlighted config is still on screen."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.screens.config_picker import ConfigPickerScreen
from support.pilot_waits import wait_for, wait_until
from support.screen_text import screen_lines
from widgets.config_list import ConfigList

EXAMPLES = Path(__file__).resolve().parents[2] / "configs" / "rl"

pytestmark = pytest.mark.usefixtures("project_configs_only", "fixed_home")


@pytest.mark.parametrize("size", [(40, 12), (60, 20)])
async def test_the_highlighted_row_stays_on_screen_when_the_terminal_shrinks(make_app, project, size):
    for copy in range(2):  # ten configs: more rows than a small terminal shows
        for path in sorted(EXAMPLES.glob("*.toml")):
            shutil.copy(path, project / "configs" / f"{copy}_{path.name}")
    app = make_app()
    async with app.run_test(size=(160, 45)) as pilot:
        screen = app.screen
        assert isinstance(screen, ConfigPickerScreen)
        await wait_until(pilot, lambda: screen.searched, "discovery")
        config_list = screen.query_one(ConfigList)
        last = config_list.option_count - 1
        config_list.highlighted = last
        await pilot.pause()
        await pilot.resize_terminal(*size)
        name = config_list.entries[last].path.name
        await wait_for(pilot, lambda: any(name in line for line in screen_lines(app)),
                       what=f"{name}, the highlighted config, on screen at {size[0]}x{size[1]}")


@pytest.mark.parametrize("size", [(80, 24), (60, 20)])
async def test_long_paths_are_cut_in_the_middle_keeping_the_file_name(make_app, project, size):
    """The walk: two long paths that differ only at the end were cut at the end, so they looked
    the same. Each is cut in the middle, its file name whole, once the list knows its width."""
    folder = project / "configs" / "a_rather_long_folder_name_for_the_experiments_of_this_project"
    folder.mkdir(parents=True)
    names = ["gridworld_experiment_variant_alpha.toml", "gridworld_experiment_variant_beta.toml"]
    for name in names:
        shutil.copy(EXAMPLES / "demo.toml", folder / name)
    app = make_app()
    async with app.run_test(size=size) as pilot:
        screen = app.screen
        assert isinstance(screen, ConfigPickerScreen)
        await wait_until(pilot, lambda: screen.searched, "discovery")
        for name in names:
            await wait_for(pilot, lambda name=name: any(line.rstrip(" │▄▀▁█").endswith(name) and "…" in line
                                                        for line in screen_lines(app)),
                           what=f"{name} whole at the end of a cut path at {size[0]}x{size[1]}")
