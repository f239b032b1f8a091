"""Keep secrets out of anything we show: errors, logs, previews, exports.

A server may echo a key back in an error body, and an exception may quote a header; every
message that leaves the core goes through :func:`redact` with the secrets in play.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from app.core.patterns import compiled_on_first_use

# C0 controls but tab and newline, DEL, and C1 controls: on a terminal, ESC starts a command
# (clear the screen, set the title, write the clipboard). Text from files and servers is shown
# with these made visible instead.
_CONTROL = compiled_on_first_use("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` safe to put on a terminal: control characters shown as escapes (\\x1b)."""
    return _CONTROL().sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def mask_secret(value: str | None) -> str:
    """The SDK's ``mask_value``: first 4 + U+2026 + last 2; short values become ``****``."""
    if not value:
        return "<unset>"
    if len(value) <= 6:
        return "****"
    return f"{value[:4]}…{value[-2:]}"


# --------------------------------------------------------------------------- what is a secret
# The rule (docs/product.md#secrets): a key whose name holds one of these words is a secret,
# whatever its value; so is a value that looks like a key, under any name; a URL shows in full
# but for its credentials. When unsure, mask: a word is matched anywhere in the name (MONKEY
# is masked too), and a random-looking run of 16 characters is taken for a key.
SECRET_NAME_WORDS = ("KEY", "TOKEN", "SECRET", "PASS", "PWD", "AUTH", "CREDENTIAL", "CREDS", "PRIVATE",
                     "COOKIE", "SESSION", "SIGNATURE", "SALT", "DSN")
# The prefixes providers give their keys (OpenAI, Stripe, GitHub, GitLab, Slack, AWS, Google,
# Hugging Face, npm, PyPI, webhooks), and a JWT's header.
_KEY_PREFIX = compiled_on_first_use(
    r"\s*(?:(?:sk|pk|rk|ak)[-_]|gh[pousr]_|github_pat_|glpat-|xox[abeprs]-|AKIA|ASIA|AIza|hf_|npm_|pypi-|whsec_"
    r"|eyJ[A-Za-z0-9_-]{8,}\.)"
)
_ONE_WORD = compiled_on_first_use(r"[A-Za-z0-9+/=_\-.~:]+\Z")
_RUN_SEPARATORS = compiled_on_first_use(r"[-_.~/+=:]")
_RANDOM_RUN = 16  # characters
# Up to the last @ before the path: a password may hold an @ of its own.
_URL_USERINFO = compiled_on_first_use(r"(?P<head>\A\s*[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/?#\s]+)@")
_URL_QUERY_VALUE = compiled_on_first_use(r"(?P<head>[?&;](?P<name>[^=&#;]*)=)(?P<value>[^&#;]*)")


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return any(word in upper for word in SECRET_NAME_WORDS)


def looks_like_secret(value: str | None) -> bool:
    """A value that reads like a key: a provider's key prefix, or one word (no spaces, not a
    URL) holding a random-looking run (16+ characters, letters and digits mixed)."""
    if not value:
        return False
    if _KEY_PREFIX().match(value):
        return True
    if "://" in value or not _ONE_WORD().match(value):
        return False  # a URL's secrets are its credentials (url_secrets); words with spaces are prose
    return any(_random_looking(run) for run in _RUN_SEPARATORS().split(value))


def _random_looking(run: str) -> bool:
    if len(run) < _RANDOM_RUN:
        return False
    classes = sum((any(c.islower() for c in run), any(c.isupper() for c in run), any(c.isdigit() for c in run)))
    return classes >= 2 and len(set(run)) >= len(run) // 3


def url_secrets(value: str | None) -> list[str]:
    """The credentials in a URL: the user:password before the host, and the values of query
    parameters named like secrets or looking like keys (``?token=…``)."""
    if not value or "://" not in value:
        return []
    found = [m.group("userinfo") for m in _URL_USERINFO().finditer(value)]
    found += [m.group("value") for m in _URL_QUERY_VALUE().finditer(value)
              if m.group("value") and (is_secret_name(m.group("name")) or looks_like_secret(m.group("value")))]
    return found


def redact_url(value: str) -> str:
    """``value`` with its URL credentials (url_secrets) replaced by ``****``."""
    if "://" not in value:
        return value
    value = _URL_USERINFO().sub(lambda m: f"{m.group('head')}****@", value)
    return _URL_QUERY_VALUE().sub(
        lambda m: f"{m.group('head')}****"
        if m.group("value") and (is_secret_name(m.group("name")) or looks_like_secret(m.group("value")))
        else m.group(), value)


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


def key_prefix(value: object, held: Iterable[str] = ()) -> str:
    """A reported key prefix: its first 4 characters and an ellipsis; or, when it is the start of
    a key this machine holds (``held``), that key's mask (first 4 + … + last 2), so a key reads
    the same in every view (docs/product.md#secrets).
    """
    text = str(value or "").rstrip(".…")
    if not text:
        return "—"
    for key in held:
        if len(text) >= PREFIX_CHARS and key.startswith(text):
            return mask_secret(key)
    return f"{text[:PREFIX_CHARS]}…"


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


def mask_prefixes(body: object, held: Sequence[str] = ()) -> object:
    """A copy of a JSON body with every reported key prefix cut to ``key_prefix`` form (the
    mask of a ``held`` key it starts)."""
    if isinstance(body, dict):
        return {key: _masked_field(key, value, held) for key, value in body.items()}
    if isinstance(body, list):
        return [mask_prefixes(item, held) for item in body]
    return body


def _masked_field(key: str, value: object, held: Sequence[str]) -> object:
    if any(marker in str(key).lower() for marker in _PREFIX_FIELDS):
        if isinstance(value, list):
            return [key_prefix(item, held) for item in value]
        if isinstance(value, str):
            return key_prefix(value, held)
    return mask_prefixes(value, held)
