"""The `synth-tui` command's entry point: the command line's modules are imported here, inside
the handler of Ctrl+C, so an interrupt during the first fraction of a second (most of it is
imports) ends as quietly as one later: "Interrupted." and exit 130, no traceback
(docs/product.md#exit-codes). It also stops the terminal echoing keys typed before the app has
the terminal (quiet_terminal). The cyclic collector is off during those imports: the front
end chosen turns it on again (app/cli/dispatch.py; a TUI after its first frame)."""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable, Sequence

INTERRUPTED = 130  # ExitCode.INTERRUPTED; app.core.errors is not imported yet when this is needed


# Commands that never draw the app: they keep the terminal as it is (a server runs for hours
# and may be stopped by a signal that skips the restore).
_PLAIN = frozenset({"backend", "taskapp", "serve", "-h", "--help", "--version"})


def quiet_terminal(argv: Sequence[str], fd: int) -> Callable[[], None] | None:
    """Stop the terminal echoing keys typed while the app starts (the README's `Enter c Enter s`
    typed at once would otherwise be printed above the app and stay there after it ends); the
    keys stay queued for the app, which reads them. Returns what puts the terminal back, or None
    when nothing was changed (no terminal, a headless run, a server)."""
    if "--no-tui" in argv or (argv and argv[0] in _PLAIN) or not (os.isatty(fd) and sys.stdout.isatty()):
        return None
    import termios

    try:
        saved = termios.tcgetattr(fd)
        quiet = list(saved)
        quiet[3] &= ~termios.ECHO  # lflag
        termios.tcsetattr(fd, termios.TCSANOW, quiet)  # TCSANOW: the typed keys are kept
    except (termios.error, OSError):
        return None

    def restore() -> None:
        try:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
        except (termios.error, OSError):
            pass  # the terminal went away

    return restore


def main() -> int:
    restore = quiet_terminal(sys.argv[1:], 0)
    gc.disable()  # docs/performance.md#first-paint
    try:
        from app.cli.dispatch import main as cli_main

        return cli_main()
    except KeyboardInterrupt:
        try:
            sys.stderr.write("\nInterrupted.\n")
            sys.stderr.flush()
        except OSError:
            pass  # a closed terminal: nothing to tell
        return INTERRUPTED
    finally:
        gc.enable()
        if restore is not None:
            restore()


if __name__ == "__main__":
    sys.exit(main())
