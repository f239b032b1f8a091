"""``python -m app.commands.css_seed``: write the parsed CSS shipped with the package (the seed of
app/screens/css_cache.py), so that a first start parses no CSS either (docs/performance.md#first-paint).

It starts the guided session's app headless on the config picker in an empty project folder,
as `synth-tui` starts, until the start has kept what it parsed (the first frame's part of
styles.tcss, the later part and the widgets' default CSS, in the default theme), and writes
those rules beside app/screens/css_cache.py. Run it after changing styles.tcss, a widget's
default CSS or the Textual version: tests/tui/test_css_seed.py fails until then.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from app.core.atomic import atomic_write_bytes
from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession
from app.screens.css_cache import file_bytes, parsed_css_kept, seed_path, written_for
from app.tui import SynthTuiApp

SETTLE_LIMIT_S = 60.0  # the headless start's save comes 1 s after its first frame


async def picker_start_rules(project: Path, size: tuple[int, int] = (160, 45)) -> dict[str, bytes]:
    """The rules a picker start in `project` parses up to its save after the first frame, pickled
    by key as the save kept them (app/screens/css_cache.py's ParsedCss.own), in parse order, with no
    rules kept from before (neither the user's file nor the seed)."""
    with tempfile.TemporaryDirectory(prefix="synth-tui-css-seed-") as folder:
        nothing = Path(folder) / "none.pickle"
        with parsed_css_kept(nothing, seed=nothing) as cache:
            if cache is None:
                raise RuntimeError("Textual's parse changed: see widgets/compat/textual_compat.py")
            app = SynthTuiApp(LaunchSession(LaunchOptions(cwd=project), shell={}), start="picker")
            async with app.run_test(size=size, notifications=True, tooltips=True) as pilot:  # as a terminal start has
                waited = 0.0
                while cache.saves == 0:  # the save after the first frame: the later part is in by then
                    if waited > SETTLE_LIMIT_S:
                        raise RuntimeError("the picker's start did not save its parsed CSS")
                    await pilot.pause(0.05)
                    waited += 0.05
                # What the save kept (the user's file would hold it): what the start parsed up to
                # then, not a toast shown later or not, as a search ends sooner or later.
                saved = {key: cache.own[key] for key in cache.parsed if key in cache.own}  # in parse order
            return saved


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="synth-tui-css-seed-") as folder:
        home = Path(folder)
        (home / "project").mkdir()
        # A start of its own: no state, settings or theme of the user's (the seed is the default theme's).
        os.environ.update({"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"),
                           "SYNTH_TUI_STATE_DIR": str(home / "state"), "SYNTH_AI_HOME": str(home / ".synth-ai")})
        for name in ("NO_COLOR", "TEXTUAL_THEME"):
            os.environ.pop(name, None)
        rules = asyncio.run(picker_start_rules(home / "project"))
    path = seed_path()
    atomic_write_bytes(path, file_bytes(rules), mode=0o644)  # shipped: read by every user of an install
    print(f"{path}: {len(rules)} sources, {path.stat().st_size} bytes, {written_for()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
