"""What the ``modal`` CLI prints, read (docs/modal.md: each command's output): the rows of its
JSON lists as typed results, the one value a container printed between markers, the keys
``modal secret create`` reported, and the message of an error it printed on stderr.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from app.core.redact import printable


@dataclass(frozen=True)
class ModalSecret:
    """One row of ``modal secret list --json`` (docs/modal.md#secret-list)."""

    name: str
    created_at: str | None = None
    created_by: str | None = None
    last_used_at: str | None = None


@dataclass(frozen=True)
class ModalApp:
    """One row of ``modal app list --json`` (docs/modal.md#app-list); ``name`` is its description,
    the name it was deployed under."""

    app_id: str
    name: str
    state: str
    tasks: int = 0
    created_at: str | None = None
    stopped_at: str | None = None

    @property
    def deployed(self) -> bool:
        return self.state == "deployed"


@dataclass(frozen=True)
class SecretSent:
    """What :meth:`ModalCli.send_secret` wrote, and whether Modal showed afterwards that it
    landed: ``confirmed`` with ``detail`` saying how, or not, with ``detail`` saying why
    (docs/modal.md#confirming-a-send)."""

    name: str
    keys: tuple[str, ...]
    confirmed: bool
    detail: str


class WebEndpoint(NamedTuple):
    """A web function of a deployed app and its URL: ``(function, url)``."""

    function: str
    url: str


class AppEndpoint(NamedTuple):
    """A web endpoint of one of the deployed apps: ``(app, function, url)``."""

    app: str
    function: str
    url: str


def print_one_variable(key: str, marker: str) -> str:
    """The container's command (run by bash -c): only ``key``'s value, between markers.

    The markers are built at run time (``$p`` plus a suffix), so the command's own text never
    holds them: a CLI that echoed the command could not be mistaken for an answer. Nothing
    but the one variable is printed (the container also holds Modal's token variables)."""
    return (f"p={marker}; if [ -n \"${{{key}+set}}\" ]; then printf '%s_begin:' \"$p\"; "
            f"printf '%s' \"${key}\"; printf ':%s_end\\n' \"$p\"; else printf '%s_missing\\n' \"$p\"; fi")


def between_markers(output: str, marker: str) -> str | None:
    begin, end = f"{marker}_begin:", f":{marker}_end"
    start = output.find(begin)
    if start < 0:
        return None
    stop = output.rfind(end)
    if stop < start + len(begin):
        return None
    return output[start + len(begin):stop]


def reported_keys(stdout: str, name: str) -> list[str] | None:
    """The keys of "Created a new secret 'NAME' with the key(s) 'A', 'B'" (cli/secret.py
    ``create``; docs/modal.md#writing-a-secret), None when that line is not there."""
    for line in stdout.splitlines():
        head, _, keys = line.partition(" with the key")
        if head.strip() == f"Created a new secret {name!r}":
            return re.findall(r"'([A-Za-z_][A-Za-z0-9_]*)'", keys)
    return None


def error_text(stream: str) -> str:
    """The message of an ``Error: …`` the CLI printed (rich tables and code samples dropped),
    else the last non-empty line; at most 300 characters, control characters escaped."""
    lines = [line.strip() for line in stream.splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if line.startswith("Error:"):
            text = " ".join([line.removeprefix("Error:").strip(), *lines[index + 1:index + 3]])
            break
    else:
        text = lines[-1] if lines else ""
    return printable(text[:300] + ("…" if len(text) > 300 else ""))


def error_suffix(stderr: str) -> str:
    text = error_text(stderr)
    return f" Modal said: {text}" if text else ""


def text_or_none(value: object) -> str | None:
    return None if value in (None, "", "-") else str(value)


def int_or_zero(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0
