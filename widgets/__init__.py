"""Reusable Textual widgets for synth-tui."""
