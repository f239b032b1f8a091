"""The URL check's shortcut: hosts it passes without the HTTP library are hosts that library takes."""

from __future__ import annotations

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.api.urls import http_url_problem
from support.tiers import examples

HOST_CHARS = "abcxyzABZ0189-._~%@[]:xn\u017f\u212a"
hosts = st.one_of(
    st.text(HOST_CHARS, min_size=1, max_size=24),
    st.lists(st.integers(0, 400).map(str), min_size=1, max_size=5).map(".".join),
    st.sampled_from(["xn--zz", "xn--bcher-kva", "XN--bcher-kva", "sub.xn--zz.org", "localhost", "127.0.0.1"]),
)


def httpx_takes(url: str) -> bool:
    try:
        _ = httpx.URL(url).host
    except (httpx.InvalidURL, ValueError):
        return False
    return True


@settings(max_examples=examples(400), deadline=None)
@given(host=hosts, port=st.one_of(st.none(), st.integers(1, 65535)), scheme=st.sampled_from(["http", "https"]))
def test_a_url_passed_by_the_check_is_one_the_http_library_takes(host: str, port: int | None, scheme: str) -> None:
    url = f"{scheme}://{host}" + (f":{port}" if port is not None else "") + "/api"
    if http_url_problem(url) is None:
        assert httpx_takes(url), url


def test_the_shortcut_still_refuses_what_the_http_library_refuses() -> None:
    assert "Invalid IPv4 address" in (http_url_problem("http://999.1.1.1:8000") or "")
    assert "not a valid URL" in (http_url_problem("http://xn--zz.com") or "")
    assert http_url_problem("http://127.0.0.1:8000") is None
    assert http_url_problem("https://api.usesynth.ai") is None


def test_the_shortcut_takes_only_ascii_hosts_whatever_their_case_folds_to() -> None:
    """IGNORECASE alone folds the long s (U+017F) to s and the Kelvin sign (U+212A) to k: such a
    host goes to the HTTP library, which refuses the one and lowers the other to k."""
    assert "not a valid URL" in (http_url_problem("http://\u017f.example/api") or "")
    assert http_url_problem("http://\u212a.example/api") is None
    assert httpx_takes("http://\u212a.example/api") and not httpx_takes("http://\u017f.example/api")
    # hostname lowers the Kelvin sign to an ASCII k: "-K" read as "-k" passed, which IDNA refuses
    assert "not a valid URL" in (http_url_problem("http://-\u212a/api") or "")
