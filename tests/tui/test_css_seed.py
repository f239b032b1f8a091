"""The parsed CSS shipped with the package (app/screens/css_cache.py's seed,
docs/performance.md#first-paint): it is the picker's start's, a first start (an empty cache
folder) parses nothing with it, and a seed that is not the package's own rules (stale, for
another Textual, writable by others, torn) is parsed around. The seed's entries stay out of
the user's file."""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path

import pytest

from app.commands.css_seed import picker_start_rules
from app.screens import css_cache
from app.screens.css_cache import ParsedCss, parsed_css_kept, read_rules, seed_path, written_for
from app.tui import SynthTuiApp
from support.pilot_waits import wait_for
from support.textual_compat import FIRST_PART
from widgets.compat.textual_compat import origin_name

REGENERATE = "the seed is stale: run `python -m app.commands.css_seed` and commit app/screens/parsed-css-seed.pickle"


async def start(app: SynthTuiApp, path: Path, seed: Path) -> ParsedCss:
    """One start of `app` with the user's file at `path` and the seed `seed`, until its save."""
    with parsed_css_kept(path, seed) as cache:
        assert cache is not None, "the wrapper did not install: widgets/compat/textual_compat.py"
        async with app.run_test(size=(160, 45), notifications=True, tooltips=True) as pilot:
            await wait_for(pilot, lambda: cache.saves > 0, what="the save after the first frame")
        if cache.writer is not None:
            cache.writer.join()
    return cache


async def test_the_shipped_seed_is_the_pickers_start(project):
    """Fails when styles.tcss, a widget's DEFAULT_CSS or Textual changed since the seed was written."""
    shipped = read_rules(seed_path(), users_own=False)
    assert shipped, f"no seed, or not for {written_for()}: {REGENERATE}"
    parsed = await picker_start_rules(project)
    assert parsed.keys() == shipped.keys(), REGENERATE


async def test_a_first_start_parses_nothing_with_the_seed(make_app, kept, parses):
    cache = await start(make_app(), kept, seed_path())
    origins = [origin for _, origin in parses]  # (CSS text, where it came from): the text would drown the message
    assert parses == [], f"a first start parsed {len(parses)} sources, from {origins}: {REGENERATE}"
    assert not kept.exists(), "the seed's rules were copied into the user's file"
    assert cache.saves and cache.writer is None


async def test_what_the_seed_lacks_is_parsed_and_kept_without_the_seeds(make_app, kept, tmp_path):
    shipped = read_rules(seed_path(), users_own=False)
    first, *others = shipped  # any one of the sources the start parses
    partial = tmp_path / "seed.pickle"
    partial.write_bytes(pickle.dumps((written_for(), {key: shipped[key] for key in others})))
    partial.chmod(0o644)
    cache = await start(make_app(), kept, partial)
    assert cache.parsed.keys() == {first}
    assert read_rules(kept).keys() == {first}, "the user's file holds only what this start parsed"
    assert cache.known.keys() >= shipped.keys()


@pytest.mark.parametrize("spoil", ["stale", "other textual", "writable by others", "torn", "a link"])
async def test_a_seed_not_for_these_sources_is_parsed_around(make_app, kept, tmp_path, parses, spoil):
    seed = tmp_path / "seed.pickle"
    shutil.copyfile(seed_path(), seed)
    seed.chmod(0o644)
    if spoil == "stale":  # rules kept under other keys: another styles.tcss, other DEFAULT_CSS
        seed.write_bytes(pickle.dumps((written_for(), {f"x{key}": rules for key, rules in
                                                       read_rules(seed_path(), users_own=False).items()})))
    elif spoil == "other textual":
        seed.write_bytes(pickle.dumps(("textual 0.1; python 3.11; format 2", read_rules(seed_path(), users_own=False))))
    elif spoil == "writable by others":
        seed.chmod(0o666)
    elif spoil == "torn":
        seed.write_bytes(seed.read_bytes()[:1000])
    else:
        seed.rename(tmp_path / "real-seed.pickle")
        seed.symlink_to(tmp_path / "real-seed.pickle")
    await start(make_app(), kept, seed)
    assert FIRST_PART in [where for _css, where in parses]


def test_the_seed_is_read_from_the_package_folder_only(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    assert seed_path() == Path(css_cache.__file__).resolve().parent / css_cache.SEED_NAME
    assert seed_path().is_file()


def test_a_key_names_where_a_source_came_from_without_its_folders():
    assert origin_name(("/site-packages/textual/widgets/_input.py", "Input.DEFAULT_CSS")) == \
        origin_name(("/elsewhere/textual/widgets/_input.py", "Input.DEFAULT_CSS")) == ("_input.py", "Input.DEFAULT_CSS")
    assert origin_name(("", "123")) == ("", "123")
    assert origin_name(None) is None
