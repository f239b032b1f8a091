"""Where the test suite keeps what it provisions once per machine (support/provision.py): the
user's own cache folder, not $HOME (the suite points HOME at a temporary folder per test) and
not the clone (a fresh clone on the same machine finds them). SYNTH_TUI_TEST_CACHE moves it."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

USER_HOME = Path(pwd.getpwuid(os.getuid()).pw_dir)
# SYNTH_TUI_TEST_MODELS is the name this variable had when only models lived here.
CACHE = Path(os.environ.get("SYNTH_TUI_TEST_CACHE") or os.environ.get("SYNTH_TUI_TEST_MODELS")
             or USER_HOME / ".cache" / "synth-tui-tests")
