"""Hostile inputs shared by the CLI tests and the core tests (one list, two levels of test)."""

# (URL, words of the problem reported): malformed backend URLs, each refused in words.
MALFORMED_BACKEND_URLS = [
    ("http://[::1", "Invalid IPv6 URL"),
    ("http://host:99999", "Port out of range"),
    ("ftp://x", "must start with http:// or https://"),
    ("not a url", "no http:// or https:// scheme"),
    ("http://", "no host name"),
    ("http://xn--/", "not a valid URL"),
]
