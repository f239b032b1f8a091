"""The typed errors of a call to the Synth backend (docs/wire-contract.md#endpoints-and-auth).

Every failure of :class:`app.core.api.client.SynthClient` is one of these: an :class:`ApiError`
with a human message, a fix and, where the backend answered, its status and body. Apart from
the client so that callers catching them (screens, the run services) need not import it.
"""

from __future__ import annotations

from typing import Any

from app.core.api.failures import error_detail
from app.core.errors import ExitCode, SynthTuiError


class ApiError(SynthTuiError):
    """The backend could not be reached or answered something we cannot use."""

    exit_code = ExitCode.BACKEND
    transient = False

    def __init__(self, message: str, hint: str | None = None, *, status: int | None = None,
                 body: Any = None, request: str | None = None) -> None:
        super().__init__(message, hint)
        self.status = status
        self.body = body
        # The request that got the answer, as the rows name it ("GET /rl/jobs", under the
        # backend's base URL); None when no answer came (unreachable, timed out).
        self.request = request

    def body_summary(self) -> str:
        return error_detail(self.body, self.body if isinstance(self.body, str) else "")[:120]


class BackendUnreachable(ApiError):
    transient = True


class BackendTimeout(ApiError):
    transient = True


class ServerError(ApiError):
    """5xx or 429: the request may succeed later."""

    transient = True


class AuthError(ApiError):
    """The backend refused SYNTH_API_KEY (401 or 403). The backend answered, and what the
    files say, read fine, is not enough: exit 3, as a missing key and a failed verification
    are, wherever it happens (the checks, a submit, a watch, a listing), not 5, which is for a
    backend that could not be asked or answered something unusable (docs/product.md#exit-codes)."""

    exit_code = ExitCode.CHECKS_FAILED


class NotFoundError(ApiError):
    pass


class ConflictError(ApiError):
    pass


class RejectedError(ApiError):
    """4xx other than auth, 404 and 409: the request itself is wrong (e.g. 422)."""


class PayloadRefused(RejectedError):
    """The backend refused the job's payload itself (400, 413, 415 or 422): the config, or a
    flag that went into the payload, is wrong. A usage problem (exit 2, docs/product.md#exit-codes);
    sending the same payload again is refused again, so no retry is offered."""

    exit_code = ExitCode.USAGE


# The answers to POST /rl/jobs that refuse the payload itself, not the moment it was sent.
PAYLOAD_REFUSED_STATUSES = frozenset({400, 413, 415, 422})


# The hosted service is what a run talks to when no backend was chosen: a user without network,
# or without an account, may not know another exists (issue 37).
HOSTED_UNREACHABLE_HINT = ("No backend was chosen (--backend, BACKEND_BASE_URL), so this is the hosted service. "
                           "Check your network, or train on this machine: add --backend local (or run `synth-tui "
                           "lab`, a task app and a backend of your own).")


class BadResponseError(ApiError):
    """The body is HTML, empty or otherwise not the JSON the contract promises."""

    transient = True


class UnsendableRequest(ApiError):
    """The HTTP library cannot build the request's URL (httpx.InvalidURL): a value in its path
    or query is too long or malformed. Bad input, never a traceback; not retried."""

    exit_code = ExitCode.USAGE


def unsendable_url(what: str, exc: Exception) -> UnsendableRequest:
    """The error for a request whose URL cannot be built. httpx's reason names the part ("URL
    component 'query' too long") or one bad character, not the value (it may be a key)."""
    reason = " ".join(str(exc).split())[:120] or type(exc).__name__
    return UnsendableRequest(
        f"The request for {what} cannot be sent: its URL cannot be built ({reason}).",
        "A value that goes into the URL is too long or malformed: check the job id, --status, --id and the "
        "other flags of the command (each has a bound); if none was given, the backend sent it (a page cursor).")


class StreamUnavailable(ApiError):
    """The backend answered, but offers no server-sent event stream at this path."""


class RlNotOffered(NotFoundError):
    """The backend answers, but has no RL job endpoints (GET /rl/jobs is a 404)."""
