"""The headless core of synth-tui.

Nothing under ``app.core`` may import Textual (an import-linter contract, run by ``tests/test_import_contracts.py``), so
the headless mode, the embedded backend and the logic tests need no terminal.
"""
