"""The transport under :class:`app.core.api.client.SynthClient`: one HTTP connection pool to a
backend, one request with retries (backoff and jitter, app.core.api.retry), and the translation
of every failure (a network error, an error status, a body that is not JSON) into a typed
:class:`app.core.api.errors.ApiError` with the key redacted from anything it carries.
"""

from __future__ import annotations

import functools
import json
import ssl
from collections.abc import Mapping
from typing import Any, Self
from urllib.parse import urlsplit

import httpx

from app import __version__
from app.core.api.backend_url import DEFAULT_PROD_BACKEND, checked_api_base, ensure_api_base
from app.core.api.errors import (
    HOSTED_UNREACHABLE_HINT,
    ApiError,
    AuthError,
    BackendTimeout,
    BackendUnreachable,
    BadResponseError,
    ConflictError,
    NotFoundError,
    RejectedError,
    ServerError,
    unsendable_url,
)
from app.core.api.failures import describe_exception, error_detail
from app.core.api.results import ApiResponse
from app.core.api.retry import Backoff, retrying
from app.core.env.keys import header_value_problem
from app.core.errors import UnusableSecretError
from app.core.redact import redact

DEFAULT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
# Idle connections are dropped before a server would close them (uvicorn's default is 5 s), so
# a request is never sent on a connection being closed at that moment (docs/hardening.md).
CLIENT_KEEPALIVE_S = 2.0
MAX_RETRY_DELAY_S = 10.0  # a retried request waits at most about this long (±50 %) before its next attempt


@functools.cache
def ssl_context() -> ssl.SSLContext:
    """One TLS context for every client: building one loads the CA bundle (50-90 ms), and a
    client made on the UI thread would stall the screen that long each time."""
    return httpx.create_ssl_context()


class ApiTransport:
    """One backend, one key: the connection pool and :meth:`request`. The endpoints are
    :class:`app.core.api.client.SynthClient`'s; use it as ``async with SynthClient(base, key) as client``."""

    def __init__(self, base_url: str, api_key: str, *, timeout: httpx.Timeout | float = DEFAULT_TIMEOUT,
                 retries: int = 2, backoff: float = 0.25, transport: httpx.AsyncBaseTransport | None = None,
                 extra_headers: Mapping[str, str] | None = None) -> None:
        # Checked here as well as where they are resolved: httpx would fail with a traceback.
        self.base_url = checked_api_base(base_url, "The URL")
        self.is_hosted_default = self.base_url == ensure_api_base(DEFAULT_PROD_BACKEND)
        _check_api_key(api_key)
        self._api_key = api_key
        self.retries = retries
        self.backoff = backoff
        headers = {
            "Authorization": f"Bearer {api_key}",
            "User-Agent": f"synth-tui/{__version__}",
            "Accept": "application/json",
        }
        headers.update(extra_headers or {})
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout,
                                       limits=httpx.Limits(keepalive_expiry=CLIENT_KEEPALIVE_S),
                                       transport=transport, follow_redirects=True, verify=ssl_context())
        # Differs from the SDK on purpose: it polls /rl, /learning and /orchestration on every
        # tick. We use /learning/... only after /rl/... answered 404, and remember what worked.
        self._job_prefix: dict[str, str] = {}
        self._stream_suffix: dict[str, str] = {}
        self.request_count = 0

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # -- low level ---------------------------------------------------------------

    def _clean(self, text: str) -> str:
        return redact(text, [self._api_key])

    def _asked(self, request: httpx.Request) -> str:
        """A request as the rows name it: its method and its path under the base URL
        (``GET /rl/jobs``, not ``/api/rl/jobs``), without the query."""
        base_path = urlsplit(self.base_url).path.rstrip("/")
        path = request.url.path
        if base_path and path.startswith(f"{base_path}/"):
            path = path[len(base_path):]
        return f"{request.method} {path}"

    async def request(self, method: str, path: str, *, what: str, json_body: Any = None,
                      params: Mapping[str, Any] | None = None, headers: Mapping[str, str] | None = None,
                      retries: int | None = None, expect_json: bool = True) -> ApiResponse:
        """Send one request, retrying transient failures; raise a typed ApiError otherwise."""
        backoff = Backoff(attempts=1 + (self.retries if retries is None else retries),
                          first_delay_s=self.backoff, max_delay_s=MAX_RETRY_DELAY_S)
        return await retrying(lambda: self._request_once(method, path, what=what, json_body=json_body, params=params,
                                                         headers=headers, expect_json=expect_json),
                              backoff=backoff, transient_error=_transient_api_error)

    async def _request_once(self, method: str, path: str, *, what: str, json_body: Any,
                            params: Mapping[str, Any] | None, headers: Mapping[str, str] | None,
                            expect_json: bool) -> ApiResponse:
        url = f"{self.base_url}{path}"
        self.request_count += 1
        try:
            response = await self._http.request(method, path, json=json_body, params=params, headers=headers)
        except httpx.InvalidURL as exc:
            raise unsendable_url(what, exc) from None
        except httpx.TimeoutException as exc:
            raise BackendTimeout(
                f"The backend did not answer {what} in time ({type(exc).__name__} at {url}).",
                HOSTED_UNREACHABLE_HINT if self.is_hosted_default else
                "The backend may be overloaded or unreachable from here; try again, or check --backend.",
            ) from None
        except (httpx.ConnectError, httpx.UnsupportedProtocol) as exc:
            raise BackendUnreachable(
                f"Cannot reach the backend at {self.base_url} for {what}: {self._clean(describe_exception(exc))}.",
                HOSTED_UNREACHABLE_HINT if self.is_hosted_default else
                "Check --backend (or BACKEND_BASE_URL) and that the backend is running "
                "(`synth-tui backend` starts a local one).",
            ) from None
        except httpx.TransportError as exc:
            raise BackendUnreachable(
                f"The connection to {self.base_url} broke during {what}: {self._clean(describe_exception(exc))}.",
                "This is usually transient; try again.",
            ) from None
        return self._decode(response, what=what, expect_json=expect_json)

    def _decode(self, response: httpx.Response, *, what: str, expect_json: bool) -> ApiResponse:
        text = self._clean(response.text)
        body: Any = None
        content_type = response.headers.get("content-type", "")
        if text.strip():
            try:
                body = json.loads(text)
            except ValueError:
                body = None
        status = response.status_code
        detail = self._clean(error_detail(body, text))
        asked = self._asked(response.request)
        if status >= 400 and body is None and _looks_like_html(text, content_type):
            # A web page, not the API: a proxy, a login page or a plain web server at --backend.
            error = BadResponseError(
                f"The backend answered {what} with HTTP {status} and an HTML page instead of JSON: "
                f"{detail[:100]!r}.",
                "Is --backend pointing at the API? It should end in /api (added automatically).",
                status=status, body=text[:400], request=asked)
            error.transient = status >= 500 and status != 501
            raise error
        if status in (401, 403):
            # The request that was refused, by its method and path: a check that sends more than
            # one request (the probe, then the verification) says which (the walk: a row for POST
            # /rl/verify_task_app named "the RL job list").
            raise AuthError(
                f"The backend at {self.base_url} rejected the SYNTH_API_KEY on {asked} ({what}): HTTP {status}, "
                f"{detail}.",
                "Check SYNTH_API_KEY in your .env or shell: it must be a key for this backend. It may not be the "
                f"backend you started: check that {self.base_url} is the address it printed.",
                status=status, body=body, request=asked)
        if status == 404:
            raise NotFoundError(f"Not found: {what} (HTTP 404 at {response.request.url.path}): {detail}.",
                                "Check the job id and that --backend points at the right service.",
                                status=status, body=body, request=asked)
        if status == 409:
            raise ConflictError(f"Conflict on {what} (HTTP 409): {detail}.", None, status=status, body=body,
                                request=asked)
        if status == 429 or status >= 500:
            raise ServerError(f"The backend failed on {what} (HTTP {status}): {detail}.",
                              "The backend had a problem; it is retried automatically where safe.",
                              status=status, body=body, request=asked)
        if status >= 400:
            raise RejectedError(f"The backend refused {what} (HTTP {status}): {detail}.", None,
                                status=status, body=body, request=asked)
        if expect_json and body is None:
            kind = "HTML" if _looks_like_html(text, content_type) else (
                "an empty body" if not text.strip() else f"non-JSON ({content_type or 'no content type'})")
            raise BadResponseError(
                f"The backend answered {what} with HTTP {status} but {kind} instead of JSON: "
                f"{text.strip()[:120]!r}.",
                "Is --backend pointing at the API? It should end in /api (added automatically).",
                status=status, body=text[:400], request=asked)
        return ApiResponse(status=status, body=body, text=text, headers=response.headers)


def _check_api_key(api_key: str) -> None:
    problem = header_value_problem(api_key)
    if problem:
        raise UnusableSecretError(
            f"SYNTH_API_KEY cannot be sent: {problem}.",
            "API keys are plain ASCII with no spaces: copy the key again from where it was issued.")


def _transient_api_error(exc: Exception) -> str | None:
    """Why a failed request is worth another attempt (app.core.api.retry.retrying), or None."""
    return exc.message if isinstance(exc, ApiError) and exc.transient else None


def _looks_like_html(text: str, content_type: str) -> bool:
    return "html" in content_type or text.lstrip().startswith("<")
