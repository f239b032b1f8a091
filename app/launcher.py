"""The `synth-tui` command's entry point: the command line's modules are imported here, inside
the handler of Ctrl+C, so an interrupt during the first fraction of a second (most of it is
imports) ends as quietly as one later: "Interrupted." and exit 130, no traceback
(docs/product.md#exit-codes)."""

from __future__ import annotations

import sys

INTERRUPTED = 130  # ExitCode.INTERRUPTED; app.core.errors is not imported yet when this is needed


def main() -> int:
    try:
        from app.cli import main as cli_main

        return cli_main()
    except KeyboardInterrupt:
        try:
            sys.stderr.write("\nInterrupted.\n")
            sys.stderr.flush()
        except OSError:
            pass  # a closed terminal: nothing to tell
        return INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
