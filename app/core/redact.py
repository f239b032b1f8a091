"""Keep secrets out of anything we show: errors, logs, previews, exports.

A server may echo a key back in an error body, and an exception may quote a header; every
message that leaves the core goes through :func:`redact` with the secrets in play.
"""

from __future__ import annotations

from collections.abc import Iterable


def mask_secret(value: str | None) -> str:
    """The SDK's ``mask_value``: first 4 + U+2026 + last 2; short values become ``****``."""
    if not value:
        return "<unset>"
    if len(value) <= 6:
        return "****"
    return f"{value[:4]}…{value[-2:]}"


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """Replace every occurrence of each secret (longest first) with its mask."""
    for secret in sorted((s for s in secrets if s and len(s) >= 4), key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, mask_secret(secret))
    return text
