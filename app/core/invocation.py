"""The command as the user ran it, for the commands our hints print (docs/product.md#commands).

A hint that says `synth-tui attach …` is "command not found" for a user who ran
`.venv/bin/synth-tui` without activating the virtualenv (issue 37). So a printed hint names the
program as it was started: `synth-tui` when that name on PATH is this very program, else the
path as it was typed. :func:`as_run` rewrites a sentence's `synth-tui SUBCOMMAND` mentions;
the printers (app/cli/, app/headless/, app/commands/foreground.py) pass what they print through it,
the screens what they show (hints, fixes, toasts, error dialogs).
No Textual import.
"""

from __future__ import annotations

import os
import re
import shutil
import sys

from app.core.patterns import compiled_on_first_use

__all__ = ["PROGRAM", "SUBCOMMANDS", "as_run", "program"]

PROGRAM = "synth-tui"
# Every subcommand of app/cli/parser.py: a mention of one of these is a command to run.
SUBCOMMANDS = ("train", "history", "demo", "attach", "compare", "backend", "ranks-host", "taskapp", "tiny-model",
               "jobs", "rollouts", "serve", "lab")
_MENTION = compiled_on_first_use(rf"(?<![\w./-]){PROGRAM}(?=\s+(?:{'|'.join(map(re.escape, SUBCOMMANDS))})(?![\w'-]))")


def program(argv0: str | None = None) -> str:
    """How to run this program again from the same shell: `synth-tui` when PATH finds this
    very program under that name (or when it was not started by name at all, as in tests),
    else the path it was started by, quoted for the shell."""
    started_as = sys.argv[0] if argv0 is None else argv0
    if os.path.basename(started_as) != PROGRAM or os.sep not in started_as:
        return PROGRAM
    on_path = shutil.which(PROGRAM)
    if on_path is not None and os.path.realpath(on_path) == os.path.realpath(started_as):
        return PROGRAM
    import shlex  # only for a program started by a path PATH does not give: not before the first frame

    return shlex.quote(started_as)


def as_run(text: str, argv0: str | None = None) -> str:
    """``text`` with each `synth-tui SUBCOMMAND` naming the program as it was started."""
    name = program(argv0)
    return text if name == PROGRAM else _MENTION().sub(lambda _: name, text)
