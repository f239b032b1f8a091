"""The import contracts of pyproject.toml hold: the layers (command line, front ends, screens,
widgets, core), a core and an embedded backend without Textual, a headless front end without
Textual. One check, by import-linter itself (docs/architecture.md#layers), so the README's test
command catches a broken layer as .ci/run's lint step does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_every_import_contract_is_kept():
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint_imports), "--no-cache"], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout
