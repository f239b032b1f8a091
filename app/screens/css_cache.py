"""The parsed CSS kept between starts (docs/performance.md#first-paint): a start that finds the
rules its sources parse to in the user's cache folder skips the parse (13-15 ms of the picker's
first frame; reading them back takes about 1 ms), as a second start finds its bytecode.

The file: (XDG_CACHE_HOME or ~/.cache)/synth-tui/parsed-css.pickle, in a 0700 folder, 0600,
replaced atomically (app/core/atomic.py), after the first frame and only when the start parsed
something the file did not hold. It is read only when it is the user's own, writable by no one
else, at most CACHE_LIMIT_BYTES, and written for the installed Textual and Python; anything
else, or a file that does not read back, is ignored: the CSS is parsed as without it.

The seed: the rules the config picker's start parses (styles.tcss and its widgets' default CSS,
in the default theme), shipped beside this module (SEED_NAME) so that the first start after an
install or an upgrade parses nothing either. It is read only from this package's folder, kept
to the same rules as the user's file (save the owner: an installed package is often root's),
and holds the same keys, which hash the CSS text: a source changed since the seed was written
misses and is parsed, as without it. `python -m app.commands.css_seed` writes it again;
tests/tui/test_css_seed.py fails, naming that command, when it is stale.
"""

from __future__ import annotations

import os
import pickle
import stat
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import textual

from app.core.atomic import atomic_write_bytes
from widgets.compat.textual_compat import look_up_parsed_rules

FILE_NAME = "parsed-css.pickle"
SEED_NAME = "parsed-css-seed.pickle"
CACHE_LIMIT_BYTES = 1_000_000  # a few themes' worth (the picker's sources pickle to 43 kB); over it, start again


def cache_path() -> Path:
    """Where the parsed CSS is kept: the XDG cache folder (an absolute XDG_CACHE_HOME, else ~/.cache)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    folder = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return folder / "synth-tui" / FILE_NAME


def textual_version() -> str:
    """The installed Textual's version, from its dist-info folder's name beside the package:
    importlib.metadata's answer takes 14 ms, as long as the parse it saves."""
    site = Path(textual.__file__).parent.parent
    try:
        names = [name for name in os.listdir(site) if name.startswith("textual-") and name.endswith(".dist-info")]
    except OSError:
        names = []
    if len(names) == 1:
        return names[0].removeprefix("textual-").removesuffix(".dist-info")
    from importlib.metadata import version  # an unusual install: the slow, sure answer

    return version("textual")


def seed_path() -> Path:
    """The rules shipped with the package: beside this module, never in a folder the user writes."""
    return Path(__file__).resolve().parent / SEED_NAME


def written_for() -> str:
    """What the pickled rules are valid for: the Textual that parsed them, the Python that pickled them."""
    return f"textual {textual_version()}; python {sys.version_info[0]}.{sys.version_info[1]}; format 2"


def file_bytes(rules: dict[str, bytes]) -> bytes:
    """A cache file's (or the seed's) contents: what they are written for, and each source's rules
    pickled by key (ParsedCss.own's form)."""
    return pickle.dumps((written_for(), rules), protocol=pickle.HIGHEST_PROTOCOL)


def read_rules(path: Path, *, users_own: bool = True) -> dict[str, bytes]:
    """The rules kept at `path`, each source's still pickled (KeptRules reads one when it is
    asked for), or none when the file is missing, not only the user's (with `users_own`; the seed
    is only writable by no one else), too big, for another Textual or Python, or does not read back."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return {}
    try:
        with os.fdopen(fd, "rb") as file:
            info = os.fstat(file.fileno())
            if (not stat.S_ISREG(info.st_mode) or (users_own and info.st_uid != os.getuid())
                    or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or info.st_size > CACHE_LIMIT_BYTES):
                return {}
            kept = pickle.loads(file.read(CACHE_LIMIT_BYTES + 1))
    except Exception:  # a torn, foreign or older file is only a cache: parse as without it
        return {}
    if (not isinstance(kept, tuple) or len(kept) != 2 or kept[0] != written_for()
            or not isinstance(kept[1], dict) or not all(isinstance(rules, bytes) for rules in kept[1].values())):
        return {}
    return kept[1]


class KeptRules(Mapping[str, Any]):
    """The kept sources' rules, each unpickled when a stylesheet asks for it: the first frame
    reads its own (43 kB), not the later steps' too. One that does not read back is missing."""

    def __init__(self, pickled: dict[str, bytes]) -> None:
        self.pickled = pickled

    def __getitem__(self, key: str) -> Any:
        try:
            return pickle.loads(self.pickled[key])
        except KeyError:
            raise
        except Exception:  # a rule that no longer unpickles: parsed again
            raise KeyError(key) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.pickled)

    def __len__(self) -> int:
        return len(self.pickled)


class ParsedCss:
    """The rules read from the cache file and the seed (`known`; `own`: the file's alone) and those
    this process parsed (`parsed`)."""

    def __init__(self, path: Path, seed: Path | None = None) -> None:
        self.path = path
        self.own = read_rules(path)  # what the user's file holds, and is written back with what is new
        shipped = read_rules(seed, users_own=False) if seed is not None else {}
        self.known = KeptRules({**shipped, **self.own})
        self.parsed: dict[str, Any] = {}
        self._saved: set[str] = set()
        self.writer: threading.Thread | None = None  # the last save's, while it writes (tests join it)
        self.saves = 0  # calls to save, new sources or not

    def save(self) -> threading.Thread | None:
        """Keep what was parsed since the file was read (or last saved): pickled now, written on
        a thread, so that the UI does not wait for the disk. The thread, or None when there is
        nothing new (or it would not fit)."""
        self.saves += 1
        new = self.parsed.keys() - self.known.keys() - self._saved
        if not new:
            return None
        self._saved |= new
        try:
            this_start = {key: pickle.dumps(self.parsed[key], protocol=pickle.HIGHEST_PROTOCOL) for key in new}
        except Exception:  # a rule Textual made unpicklable: no cache, as before it
            return None
        self.known.pickled.update(this_start)
        self.own.update(this_start)
        data = self._pickled(self.own) or self._pickled(this_start)
        if data is None:
            return None
        self.writer = threading.Thread(target=self._write, args=(data,), name="parsed-css-cache")
        self.writer.start()
        return self.writer

    @staticmethod
    def _pickled(rules: dict[str, bytes]) -> bytes | None:
        data = file_bytes(rules)
        return data if len(data) <= CACHE_LIMIT_BYTES else None

    def _write(self, data: bytes) -> None:
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.path.parent, 0o700)
            atomic_write_bytes(self.path, data)
        except OSError:  # a read-only or full disk: the next start parses, as without the cache
            pass


_installed: ParsedCss | None = None


@contextmanager
def parsed_css_kept(path: Path | None = None, seed: Path | None = None) -> Iterator[ParsedCss | None]:
    """While inside, stylesheets take their rules from the cache file or the seed (`seed`, the
    package's when None; tests of the user's file pass a missing one), and save_parsed_css keeps
    what they parsed; None, and CSS parsed as usual, when Textual's parse is not the one the
    wrapper was written for (widgets/compat/textual_compat.py)."""
    global _installed
    try:
        cache = ParsedCss(path or cache_path(), seed or seed_path())
    except (OSError, RuntimeError):  # no home folder to find (Path.home): parse as without the cache
        yield None
        return
    undo = look_up_parsed_rules(cache.known, cache.parsed)
    if undo is None:
        yield None
        return
    _installed = cache
    try:
        yield cache
    finally:
        _installed = None
        undo()


def save_parsed_css() -> None:
    """Keep what this start parsed, if the cache is in use (SynthTuiApp, after its first frame)."""
    if _installed is not None:
        _installed.save()
