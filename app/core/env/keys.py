"""The keys a run needs, their aliases, and how a key's value is shown and sent.

A secret shows only as its mask (docs/product.md#secrets); a key sent in an HTTP header must be
printable ASCII. Nothing here prints, logs or reprs a full secret value.
"""

from __future__ import annotations

from app.core.redact import is_secret_name, looks_like_secret, mask_secret, redact_url, url_secrets

REQUIRED_KEYS: tuple[str, ...] = ("SYNTH_API_KEY", "ENVIRONMENT_API_KEY", "TASK_APP_URL")

# Differs from the SDK on purpose: the SDK tries dev_environment_api_key before
# DEV_ENVIRONMENT_API_KEY; we try the conventional upper-case spelling first. This only matters
# when both are set to different values.
KEY_ALIASES: dict[str, tuple[str, ...]] = {
    "ENVIRONMENT_API_KEY": ("DEV_ENVIRONMENT_API_KEY", "dev_environment_api_key"),
    "TASK_APP_URL": ("TASK_APP_BASE_URL",),
}

# The command-line flag that can supply a key; used as ResolvedKey.origin for source "flag".
FLAG_NAMES: dict[str, str] = {"TASK_APP_URL": "--task-url"}

UNSET = "<unset>"


def is_secret_key(name: str) -> bool:
    """A name that says its value is a secret (KEY, TOKEN, PASSWORD…: redact.SECRET_NAME_WORDS)."""
    # Differs from the SDK on purpose: the SDK masks every value, TASK_APP_URL too. A URL or a
    # project name is not a secret, and seeing it in full is what makes a wrong one obvious.
    return is_secret_name(name)


def hides_value(name: str, value: str | None) -> bool:
    """Whether ``value`` is shown only as its mask: a secret's name, or a value like a key."""
    return bool(value) and (is_secret_key(name) or looks_like_secret(value))


def secret_parts(name: str, value: str | None) -> list[str]:
    """What of ``value`` is secret, for the redaction of messages: all of it, a URL's
    credentials, or nothing."""
    if not value:
        return []
    return [value] if hides_value(name, value) else url_secrets(value)


# The SDK's ``mask_value``; one implementation, shared with the redaction of messages.
mask_value = mask_secret


def display_value(name: str, value: str | None) -> str:
    """The value as shown (docs/product.md#secrets): a secret's mask, else in full with a
    URL's credentials replaced by ``****``."""
    if not value:
        return UNSET
    return mask_value(value) if hides_value(name, value) else redact_url(value)



# Keys sent as HTTP header values (Authorization: Bearer ..., X-API-Key). A header value must
# be printable ASCII, or the HTTP library fails while encoding the request; a space or a line
# break inside a key is a paste accident that would fail authentication anyway.
HEADER_KEYS: tuple[str, ...] = ("SYNTH_API_KEY", "ENVIRONMENT_API_KEY")


def header_value_problem(value: str) -> str | None:
    """Why ``value`` cannot be sent as an API key in an HTTP header, or None. Names the first
    bad character's position and kind, never the character or the value."""
    for position, char in enumerate(value, start=1):
        kind = _bad_character_kind(char)
        if kind:
            return f"character {position} of {len(value)} is {kind}"
    return None


def _bad_character_kind(char: str) -> str | None:
    code = ord(char)
    if char in "\r\n":
        return "a line break"
    if char == "\t":
        return "a tab"
    if char == " ":
        return "a space"
    if code < 32 or code == 127:
        return "a control character"
    if code > 126:
        return "a non-ASCII space" if char.isspace() else "not ASCII (an accented letter, a curly quote or an emoji?)"
    return None


