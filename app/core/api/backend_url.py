"""The backend's base URL: from --backend or the environment's variables, checked before any
request (docs/wire-contract.md#backend-url). Apart from the HTTP client so that the first
screen, which needs the URL but sends nothing yet, does not wait for the HTTP library's import."""

from __future__ import annotations

import re
from collections.abc import Mapping

from app.core import shell_env
from app.core.api.urls import CREDENTIALS_PROBLEM, http_url_problem
from app.core.errors import UsageError
from app.core.redact import key_prefix

# The hosted service since SDK 0.3.9 (0.2.x used https://agent-learning.onrender.com).
# docs/compatibility.md.
DEFAULT_PROD_BACKEND = "https://api.usesynth.ai"


def ensure_api_base(url: str) -> str:
    """The SDK's ``ensure_api_base``: strip trailing slashes and append ``/api`` if missing."""
    url = url.strip().rstrip("/")
    return url if url.endswith("/api") else f"{url}/api"


BACKEND_URL_HINT = ("Write it as http://HOST:PORT or https://HOST (/api is appended), e.g. http://127.0.0.1:8000; "
                    "`synth-tui backend` runs the embedded backend here and `synth-tui demo` a whole setup on "
                    "this machine.")


# A backend takes its key from SYNTH_API_KEY, never from its URL (docs/product.md#secrets).
BACKEND_CREDENTIALS_HINT = ("Drop `user:pass@` from the URL and put the key in SYNTH_API_KEY (the .env or the shell): "
                            "it is sent as a Bearer token. A URL's credentials would be sent instead of it, and "
                            "shown wherever the URL is.")


def request_url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as an http(s) URL to send requests to, or None. A URL with
    ``user:pass@`` is refused (CREDENTIALS_PROBLEM): the client never sends or prints them."""
    if url.strip() and "://" not in url:
        return "it has no http:// or https:// scheme"  # quoting none of it: it may be a pasted key
    return http_url_problem(url)


def backend_url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a backend base URL, or None when it can be used."""
    url = url.strip()
    if "?" in url or "#" in url:
        return "it has a ?query or #fragment, but /api is appended to its path"
    return request_url_problem(url)


def shown_url(url: str) -> str:
    """A URL quoted for a message, never a secret pasted into it: user:password@, ?query and
    #fragment are hidden, and a value without "://" (maybe a key in the wrong place) is cut to
    its first 4 characters, as a key's mask shows. Escapes stay visible; the length is bounded."""
    text = url.strip()
    if "://" not in text:
        return repr(key_prefix(text) if len(text) > 4 else text)
    hidden = re.sub(r"(?<=//)[^/?#]*@", "…@", text)  # up to the last @: a password may hold one
    hidden = re.sub(r"([?#]).*", r"\1…", hidden, flags=re.DOTALL)
    return repr(hidden if len(hidden) <= 200 else hidden[:200] + "…")


def checked_api_base(url: str, where: str) -> str:
    """``url`` with /api appended, or a UsageError naming where it came from and what is wrong."""
    problem = backend_url_problem(url)
    if problem:
        hint = BACKEND_CREDENTIALS_HINT if problem == CREDENTIALS_PROBLEM else BACKEND_URL_HINT
        raise UsageError(f"{where} is not a usable backend URL: {problem}. Got {shown_url(url)}.", hint)
    return ensure_api_base(url)


def backend_from_env(env: Mapping[str, str] | None = None, *,
                     origins: Mapping[str, str] | None = None) -> tuple[str, str]:
    """Backend base from the environment as docs/wire-contract.md#backend-url; returns (base, where it came from).

    ``origins`` names where each variable was set (default: the shell environment), so a
    malformed URL is reported with its variable and its place.
    """
    env = shell_env.given_or_shell(env)
    variable, url, source = _backend_variable(env)
    where = f"{variable} in {(origins or {}).get(variable, 'the shell environment')}"
    return checked_api_base(url, where), source


# The variables every SDK generation read, in the order they are tried (docs/compatibility.md):
# the 0.2.x `train` command's three first, then today's SYNTH_API_URL, then the names it
# deprecated. The first one set wins.
LATER_BACKEND_VARIABLES = ("SYNTH_API_URL", "SYNTH_BACKEND_URL", "SYNTH_API_BASE_URL")


def _backend_variable(env: Mapping[str, str]) -> tuple[str, str, str]:
    """(the variable that chooses the backend, its URL, the source label)."""
    if env.get("BACKEND_BASE_URL"):
        return "BACKEND_BASE_URL", env["BACKEND_BASE_URL"], "BACKEND_BASE_URL"
    if env.get("BACKEND_OVERRIDE"):
        override = env["BACKEND_OVERRIDE"].strip().rstrip("/")
        override = override[: -len("/api")] if override.endswith("/api") else override
        return "BACKEND_OVERRIDE", override, "BACKEND_OVERRIDE"
    mode = (env.get("SYNTH_BACKEND_URL_OVERRIDE") or "").strip().lower()
    if mode in ("local", "dev"):
        variable = f"{mode.upper()}_BACKEND_URL"
        return variable, env.get(variable) or "http://localhost:8000", f"SYNTH_BACKEND_URL_OVERRIDE={mode}"
    for variable in LATER_BACKEND_VARIABLES:
        if env.get(variable, "").strip():
            return variable, env[variable], variable
    return "PROD_BACKEND_URL", env.get("PROD_BACKEND_URL") or DEFAULT_PROD_BACKEND, "default"


def resolve_backend(flag: str | None, env: Mapping[str, str] | None = None, *,
                    origins: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(base URL ending in /api, where it came from); a malformed URL is a UsageError."""
    if flag is not None:
        return checked_api_base(flag, "--backend"), "--backend"
    return backend_from_env(env, origins=origins)
