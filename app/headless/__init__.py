"""The headless mode: the commands as the SDK's printed lines (docs/wire-contract.md#headless-output),
for ``--no-tui`` or no terminal: ``train`` (the flow up to the job), ``watch`` (a job's progress,
``attach``), ``listings`` (``history``, ``jobs``, ``compare``, ``rollouts``), ``text_chart``
(``--stream-format chart``), all printing through ``printer.Printer``.

The SDK's lines go to stdout, diagnostics to stderr, and every run ends with the exit code of
docs/product.md#exit-codes. User errors end with ``Error: <message>`` and a hint, never a traceback.
Everything printed passes through ``Printer``, which redacts the secrets in play. No Textual
import, directly or through anything imported (import-linter).
"""
