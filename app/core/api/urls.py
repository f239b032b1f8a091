"""Checking an http(s) URL before anything is sent to it: one rule for every front end and
both local servers, so a typo is a sentence, not an exception from the HTTP library."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import SplitResult, urlsplit

MAX_URL_CHARS = 2_048
# Hosts the HTTP library takes as they are: ASCII labels and dots; a dotted-number host is read
# as an IPv4 address, and an "xn--" label is decoded (IDNA), so those are left to it. ASCII only
# (re.ASCII): without it IGNORECASE lets the Kelvin sign and the long s through as k and s, and
# the pattern takes four times as long to compile, before the first frame.
_PLAIN_HOST = re.compile(r"[a-z0-9-]+(?:\.[a-z0-9-]+)*\.?\Z", re.IGNORECASE | re.ASCII)
_IPV4_STYLE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+\Z")


def _plain_host(parts: SplitResult) -> bool:
    """True when the HTTP library would accept this URL's host without a question, so the
    check need not import it (about 0.1 s, before the first screen; docs/performance.md)."""
    if "@" in parts.netloc or "[" in parts.netloc or not parts.netloc.isascii():
        return False  # not ASCII as written: hostname lowers the Kelvin sign to an ASCII k
    host = parts.hostname or ""
    if not _PLAIN_HOST.match(host) or any(label.startswith("xn--") for label in host.split(".")):
        return False
    if _IPV4_STYLE.match(host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return False
    return True


# What a URL with credentials gets, said without quoting any of it (what stands before the @
# is a secret), so that callers can tell this problem from the others. Refused, not stripped:
# a server that stored it would show it to whoever lists jobs, and a client that sent it would
# send Basic auth instead of its key. docs/product.md#secrets, docs/hardening.md.
CREDENTIALS_PROBLEM = ("it has a user name or password (user:pass@) before the host; remove them from the URL: "
                       "credentials travel in headers, never in URLs")


def credentials_problem(url: str) -> str | None:
    """CREDENTIALS_PROBLEM when ``url`` carries ``user:pass@`` (or any ``…@``) before its host,
    else None. The HTTP library would send them as Basic auth, and every message quoting the
    URL would show them: docs/product.md#secrets. Never quotes any part of the URL."""
    return CREDENTIALS_PROBLEM if "@" in _authority(url.strip()) else None


def _authority(url: str) -> str:
    """The part of a URL between "//" and the path, query or fragment (empty when it has no "//")."""
    _, slashes, rest = url.partition("//")
    return re.split(r"[/?#]", rest, maxsplit=1)[0] if slashes else ""


def http_url_problem(url: object) -> str | None:
    """What is wrong with `url` as an http(s) base URL, or None when it is usable."""
    if not isinstance(url, str) or not url.strip():
        return "it is empty; expected a URL such as http://127.0.0.1:8102"
    if len(url) > MAX_URL_CHARS:
        return f"it is {len(url):,} characters long; at most {MAX_URL_CHARS:,}"
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url):
        return "it contains spaces or control characters"
    if credentials_problem(url):
        return CREDENTIALS_PROBLEM
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
    if _plain_host(parts):
        return None
    import httpx

    try:
        _ = httpx.URL(url).host  # reading .host decodes an IDNA name ("xn--...") as every request does
    except (httpx.InvalidURL, ValueError) as exc:  # ValueError: a bad IDNA host name too
        return f"it is not a valid URL ({exc})"
    return None


def without_credentials(url: object) -> object:
    """`url` with any user:secret@ before its host cut out (other values as they are)."""
    if not isinstance(url, str):
        return url
    authority = _authority(url)
    if "@" not in authority:
        return url
    start = url.index("//") + 2
    return url[:start] + authority.rpartition("@")[2] + url[start + len(authority):]
