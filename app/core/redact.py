"""Keep secrets out of anything we show: errors, logs, previews, exports.

A server may echo a key back in an error body, and an exception may quote a header; every
message that leaves the core goes through :func:`redact` with the secrets in play.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# C0 controls but tab and newline, DEL, and C1 controls: on a terminal, ESC starts a command
# (clear the screen, set the title, write the clipboard). Text from files and servers is shown
# with these made visible instead.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` safe to put on a terminal: control characters shown as escapes (\\x1b)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


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


PREFIX_CHARS = 4
# Fields in which backends and task apps report key prefixes (docs/wire-contract.md#key-prefixes). A "first 15"
# prefix of a short key is the whole key, so every one is cut to the mask's first 4 characters.
_PREFIX_FIELDS = ("first15", "prefix", "key_prefix")


def key_prefix(value: object) -> str:
    """A reported key prefix, shown like the mask: its first 4 characters and an ellipsis."""
    text = str(value or "").rstrip(".…")
    return f"{text[:PREFIX_CHARS]}…" if text else "—"


def scrub_key_fragments(text: str, keys: Iterable[str]) -> str:
    """`text` with every run of more than 4 characters of any key replaced by "[redacted]".

    For what a server relays from another one (a task app's error body, say): a foreign task
    app may echo 15 characters of a key, which `redact` (whole keys only) would let through.
    """
    width = PREFIX_CHARS + 1
    grams = {key[i:i + width] for key in keys if key and len(key) >= width for i in range(len(key) - width + 1)}
    if not grams or len(text) < width:
        return text
    covered = [False] * len(text)
    for start in range(len(text) - width + 1):
        if text[start:start + width] in grams:
            covered[start:start + width] = [True] * width
    out, index = [], 0
    while index < len(text):
        if covered[index]:
            while index < len(text) and covered[index]:
                index += 1
            out.append("[redacted]")
        else:
            out.append(text[index])
            index += 1
    return "".join(out)


def held_key_prefix(key: str) -> str:
    """How a server names a key it holds: its first 4 characters, or nothing of a short key
    (4 characters of an 8-character key are half the secret)."""
    return f"{key[:PREFIX_CHARS]}…" if len(key) >= 3 * PREFIX_CHARS else "****"


def mask_prefixes(body: object) -> object:
    """A copy of a JSON body with every reported key prefix cut to ``key_prefix`` form."""
    if isinstance(body, dict):
        return {key: _masked_field(key, value) for key, value in body.items()}
    if isinstance(body, list):
        return [mask_prefixes(item) for item in body]
    return body


def _masked_field(key: str, value: object) -> object:
    if any(marker in str(key).lower() for marker in _PREFIX_FIELDS):
        if isinstance(value, list):
            return [key_prefix(item) for item in value]
        if isinstance(value, str):
            return key_prefix(value)
    return mask_prefixes(value)
