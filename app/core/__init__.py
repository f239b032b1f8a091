"""The headless core of synth-tui.

Nothing under ``app.core`` may import Textual (``tests/test_core_isolation.py`` checks it), so
the headless mode, the embedded backend and the logic tests need no terminal.
"""
