"""The parsed CSS kept between starts (app/screens/css_cache.py, docs/performance.md#first-paint):
a second start in the same cache folder parses nothing the first one kept; other theme variables
are parsed again; a file that is not the user's own, too big, torn or for another Textual is
parsed around, without a word; the file is the user's alone."""

from __future__ import annotations

import os
import pickle
import stat
from pathlib import Path

import pytest

from app.screens import css_cache
from app.screens.css_cache import KeptRules, ParsedCss, cache_path, parsed_css_kept, read_rules, written_for
from app.tui import SynthTuiApp
from support.pilot_waits import wait_for
from support.textual_compat import FIRST_PART

pytestmark = pytest.mark.usefixtures("project_configs_only")




async def start(app: SynthTuiApp, path: Path) -> ParsedCss:
    """One start of `app` with the CSS kept at `path` (and no seed: tests/tui/test_css_seed.py),
    until its first frame's parse was saved."""
    with parsed_css_kept(path, seed=path.parent / "no-seed.pickle") as cache:
        assert cache is not None, "the wrapper did not install: widgets/compat/textual_compat.py"
        async with app.run_test(size=(160, 45)) as pilot:
            await wait_for(pilot, lambda: cache.saves > 0, what="the save after the first frame")
        if cache.writer is not None:
            cache.writer.join()
    return cache


async def test_a_second_start_parses_nothing_the_first_one_kept(make_app, kept, parses):
    first = await start(make_app(), kept)
    assert FIRST_PART in [where for _css, where in parses] and first._saved
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
    assert first._saved <= read_rules(kept).keys()
    parses.clear()
    second = await start(make_app(), kept)
    assert second.known.keys() >= first._saved
    assert FIRST_PART not in [where for _css, where in parses], "styles.tcss's first part was parsed again"
    assert second.parsed.keys().isdisjoint(first._saved), "a kept source was parsed again"


async def test_other_theme_variables_are_parsed_again(make_app, kept, parses):
    await start(make_app(), kept)
    parses.clear()
    light = make_app()
    light.theme = "textual-light"
    second = await start(light, kept)
    assert FIRST_PART in [where for _css, where in parses], "the light theme got the dark theme's rules"
    assert second.parsed


async def test_a_torn_file_is_parsed_around_and_replaced(make_app, kept, parses):
    kept.parent.mkdir(parents=True)
    kept.write_bytes(b"\x80\x05not a pickle")
    kept.chmod(0o600)
    cache = await start(make_app(), kept)
    assert FIRST_PART in [where for _css, where in parses]
    assert read_rules(kept).keys() == cache._saved


def kept_file(path: Path, rules: dict) -> Path:
    cache = ParsedCss(path)
    cache.parsed.update(rules)
    writer = cache.save()
    assert writer is not None
    writer.join()
    return path


def test_the_file_is_the_users_alone_and_reads_back(kept):
    kept_file(kept, {"key": ["rules"]})
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.parent.stat().st_mode) == 0o700
    assert dict(KeptRules(read_rules(kept))) == {"key": ["rules"]}


def test_a_file_others_may_write_is_ignored(kept):
    kept_file(kept, {"key": ["rules"]})
    kept.chmod(0o666)
    assert read_rules(kept) == {}
    kept.chmod(0o620)
    assert read_rules(kept) == {}


def test_an_oversized_file_is_ignored_and_never_written(kept, monkeypatch):
    kept_file(kept, {"key": ["rules"]})
    monkeypatch.setattr(css_cache, "CACHE_LIMIT_BYTES", kept.stat().st_size - 1)
    assert read_rules(kept) == {}
    cache = ParsedCss(kept)
    cache.parsed["big"] = ["x" * kept.stat().st_size]
    assert cache.save() is None


def test_a_file_for_another_textual_or_torn_is_ignored(kept):
    kept.parent.mkdir(parents=True)
    for data in (pickle.dumps(("textual 0.1; python 3.11; format 1", {"key": b""})), b"", b"\x80\x05\x95",
                 pickle.dumps({"key": b""}), pickle.dumps((written_for(), ["key"])),
                 pickle.dumps((written_for(), {"key": ["not pickled"]}))):
        kept.write_bytes(data)
        kept.chmod(0o600)
        assert read_rules(kept) == {}, data


def test_a_source_that_does_not_read_back_is_parsed_again():
    rules = KeptRules({"torn": b"\x80\x05\x95", "kept": pickle.dumps(["rules"])})
    assert rules["kept"] == ["rules"]
    with pytest.raises(KeyError):
        rules["torn"]


def test_a_full_cache_starts_again_with_this_starts_rules(kept, monkeypatch):
    kept_file(kept, {"old": ["o" * 400]})
    monkeypatch.setattr(css_cache, "CACHE_LIMIT_BYTES", kept.stat().st_size + 100)
    cache = ParsedCss(kept)
    cache.parsed["new"] = ["n" * 400]
    writer = cache.save()
    assert writer is not None
    writer.join()
    assert read_rules(kept).keys() == {"new"}


def test_the_cache_is_in_the_users_cache_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_path() == tmp_path / "xdg" / "synth-tui" / "parsed-css.pickle"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # not absolute: ignored, as the XDG spec says
    assert cache_path() == Path(os.environ["HOME"]) / ".cache" / "synth-tui" / "parsed-css.pickle"
