"""app.core must import without Textual, so the headless mode needs no terminal library."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import app.core

CORE = Path(app.core.__file__).parent


def test_core_never_imports_textual():
    modules = sorted(f"app.core.{p.stem}" for p in CORE.glob("*.py") if p.stem != "__init__")
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "print(','.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "", f"app.core pulled in: {result.stdout.strip()}"


def test_headless_command_never_imports_textual():
    code = "import sys, app.cli, app.headless; print(any(m.startswith('textual') for m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
