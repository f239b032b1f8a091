"""Typed errors shared by the core, the headless command and the TUI.

Every error carries a human message, an optional hint that says how to fix it, and the exit
code the headless command ends with (docs/product.md#exit-codes). None of them may hold a full secret.
"""

from __future__ import annotations


class ExitCode:
    OK = 0
    JOB_FAILED = 1
    USAGE = 2
    CHECKS_FAILED = 3
    POLL_TIMEOUT = 4
    BACKEND = 5
    # The job is paused on the backend: the watch ended, the job keeps its state there.
    PAUSED = 6
    INTERRUPTED = 130
    # The reader of stdout (or stderr) went away, as `| head` does: 128 + SIGPIPE, what a shell
    # reports for any tool a closed pipe stopped (docs/product.md#exit-codes).
    OUTPUT_CLOSED = 141


# What an interrupt (Ctrl+C) prints, the same in the headless run and on every screen of the TUI
# (docs/product.md#exit-codes): before a job exists, that nothing was sent.
INTERRUPTED = "Interrupted."
INTERRUPTED_BEFORE_A_JOB = "Interrupted before a job was created; nothing was sent."


class SynthTuiError(Exception):
    """Base class: a problem we explain to the user instead of showing a traceback."""

    exit_code: int = ExitCode.USAGE

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message

    def render(self) -> str:
        """The message and, where we have one, the fix, as printed to the user."""
        return self.message if not self.hint else f"{self.message}\n  Hint: {self.hint}"


class UsageError(SynthTuiError):
    exit_code = ExitCode.USAGE


class ConfigError(SynthTuiError):
    """The config cannot be found, parsed or validated."""

    exit_code = ExitCode.USAGE


class EnvFileError(SynthTuiError):
    """A .env file cannot be read or written. Exit 2, as a config that cannot be read: the file
    the user gave is the problem, whatever its kind (docs/product.md#exit-codes). A readable .env
    that lacks a key is a MissingSecretsError (3)."""

    exit_code = ExitCode.USAGE


class MissingSecretsError(SynthTuiError):
    exit_code = ExitCode.CHECKS_FAILED


class UnusableSecretError(MissingSecretsError):
    """A key is set but cannot be sent (a character an HTTP header cannot carry): as good as
    missing. The message names the key and the character's position, never the value."""
