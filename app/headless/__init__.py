"""The headless front end: the SDK's printed lines instead of screens (``--no-tui``, or no
terminal). It never imports Textual, directly or through anything it imports (import-linter)."""
