"""synth-tui: launch and watch RL training jobs from the terminal."""

__version__ = "0.1.0"
