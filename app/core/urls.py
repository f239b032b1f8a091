"""Checking an http(s) URL before anything is sent to it: one rule for every front end and
both local servers, so a typo is a sentence, not an exception from the HTTP library."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx

MAX_URL_CHARS = 2_048


def http_url_problem(url: object) -> str | None:
    """What is wrong with `url` as an http(s) base URL, or None when it is usable."""
    if not isinstance(url, str) or not url.strip():
        return "it is empty; expected a URL such as http://127.0.0.1:8102"
    if len(url) > MAX_URL_CHARS:
        return f"it is {len(url):,} characters long; at most {MAX_URL_CHARS:,}"
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        return "it contains spaces or control characters"
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError when out of range or not a number
    except ValueError as exc:
        return f"it is not a valid URL ({exc})"
    if parts.scheme.lower() not in ("http", "https"):
        return f"it must start with http:// or https:// (got {parts.scheme + '://' if parts.scheme else 'no scheme'})"
    if not parts.hostname:
        return "it has no host name"
    if port == 0:
        return "port 0 cannot be connected to"
    try:
        _ = httpx.URL(url).host  # reading .host decodes an IDNA name ("xn--...") as every request does
    except (httpx.InvalidURL, ValueError) as exc:  # ValueError: a bad IDNA host name too
        return f"it is not a valid URL ({exc})"
    return None
