"""The process behind one browser tab: ``synth-tui`` run by the server with the tab's command
(docs/browser.md#one-process-a-tab). The server asks it to quit through Textual's web driver
when the tab closes; a SIGTERM (the server's next step when that is not enough) ends it through
the same ``finally`` blocks, so a demo still stops its servers and removes a temporary folder
with its keys."""

from __future__ import annotations

import signal
import sys
from types import FrameType


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    signal.signal(signal.SIGTERM, _terminate)
    from app.cli.dispatch import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
