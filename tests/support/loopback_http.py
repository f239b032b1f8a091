"""httpx's one-request functions (``httpx.get``, ``post``, ``head``, ``request``) for the tests'
requests to loopback servers, sharing the process's one TLS context.

``httpx.get(url)`` builds a Client, and each Client a TLS context of its own, loading the CA
bundle: about 34 ms of CPU for a request that takes 1 ms and never uses TLS. The tests send
hundreds (docs/testing.md#what-is-shared). The context is the app's own
(``app.core.api.transport.ssl_context``), so a request is verified as the app would verify it.
"""

from __future__ import annotations

from typing import Any

import httpx

from app.core.api.transport import ssl_context


def request(method: str, url: str, **kwargs: Any) -> httpx.Response:
    kwargs.setdefault("verify", ssl_context())
    return httpx.request(method, url, **kwargs)


def get(url: str, **kwargs: Any) -> httpx.Response:
    return request("GET", url, **kwargs)


def post(url: str, **kwargs: Any) -> httpx.Response:
    return request("POST", url, **kwargs)


def head(url: str, **kwargs: Any) -> httpx.Response:
    return request("HEAD", url, **kwargs)


def client(**kwargs: Any) -> httpx.Client:
    """``httpx.Client(**kwargs)`` on the shared TLS context."""
    kwargs.setdefault("verify", ssl_context())
    return httpx.Client(**kwargs)


def async_client(**kwargs: Any) -> httpx.AsyncClient:
    """``httpx.AsyncClient(**kwargs)`` on the shared TLS context."""
    kwargs.setdefault("verify", ssl_context())
    return httpx.AsyncClient(**kwargs)
