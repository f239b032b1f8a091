"""Everything the headless commands print passes through :class:`Printer`: the SDK's lines on
stdout, diagnostics on stderr, the secrets in play redacted, our commands named as the user ran
them."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TextIO

from app.core.errors import SynthTuiError
from app.core.invocation import as_run
from app.core.redact import printable, redact


@dataclass
class Printer:
    out: TextIO = field(default_factory=lambda: sys.stdout)
    err: TextIO = field(default_factory=lambda: sys.stderr)
    secrets: list[str] = field(default_factory=list)

    # Each line names our commands as the user ran them (app.core.invocation).
    def line(self, text: str = "") -> None:
        print(as_run(printable(redact(text, self.secrets))), file=self.out, flush=True)

    def diag(self, text: str) -> None:
        print(as_run(printable(redact(text, self.secrets))), file=self.err, flush=True)

    def warning(self, text: str | None) -> None:
        """A problem that does not stop the run (a history write that failed); None: nothing."""
        if text:
            self.diag(f"Warning: {text}")

    def error(self, exc: SynthTuiError) -> None:
        self.diag(f"Error: {exc.render()}")
