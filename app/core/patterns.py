"""Regular expressions compiled when first used, not when their module is imported.

Compiling one costs 0.1 to 0.8 ms here (a character class with IGNORECASE, a long alternation):
a module on the first screen's import path that compiles its patterns at import makes the
first frame wait for patterns only a later step uses (docs/performance.md#first-paint).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable


def compiled_on_first_use(pattern: str, flags: int = 0) -> Callable[[], re.Pattern[str]]:
    """A function returning ``re.compile(pattern, flags)``, compiled on its first call, then kept."""

    @functools.cache
    def compiled() -> re.Pattern[str]:
        return re.compile(pattern, flags)

    return compiled
