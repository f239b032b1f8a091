"""Modal, optional: read ENVIRONMENT_API_KEY from a Modal secret, write it into one, and find
the web endpoint of a deployed Modal app, through the ``modal`` command-line tool
(docs/modal.md: what each command prints, and which modal release confirmed it).

Nothing here imports the ``modal`` package. The CLI runs as a subprocess, from an argument
list (never a shell string), with its output captured; every call has a timeout and can be
stopped from another thread (a ``threading.Event``). A value read from a secret is never
logged, put on a command line or into an exception; a value written to a secret goes through
a file readable only by its owner, in a private folder removed afterwards.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.util import find_spec
from typing import Any, NamedTuple

from app.core import shell_env
from app.core.errors import ExitCode, SynthTuiError
from app.core.redact import printable
from app.core.text import plural

INSTALL_HINT = ("Install Modal's CLI: pip install 'synth-tui[modal]' (or pipx install modal), "
                "then log in with `modal token new`.")
LOGIN_HINT = "Run `modal token new` (or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET), then try again."
UPGRADE_HINT = "Upgrade it: pip install -U 'synth-tui[modal]' (modal 1.6 or newer)."

# docs/modal.md#costs-and-time: listing and creating take a second or two; a container
# takes seconds to tens of seconds to start, more when its image is built for the first time.
DEFAULT_TIMEOUT_S = 60.0
SHELL_TIMEOUT_S = 180.0
# After a cancel or a timeout: SIGINT first, so the CLI stops its ephemeral app and container
# (docs/modal.md#stopping-a-call), then SIGKILL if it has not exited within this grace.
STOP_GRACE_S = 5.0
_POLL_S = 0.1

# Modal's own rule for object names (docs/modal.md#errors, "bad name").
_OBJECT_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}\Z")
_APP_ID = re.compile(r"ap-[A-Za-z0-9]{22}\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


# --------------------------------------------------------------------------- errors


class ModalError(SynthTuiError):
    """A Modal step failed: the run cannot get the key or URL it asked Modal for."""

    exit_code = ExitCode.CHECKS_FAILED


class ModalNotInstalled(ModalError):
    pass


class ModalNotLoggedIn(ModalError):
    pass


class ModalSecretNotFound(ModalError):
    pass


class ModalKeyNotInSecret(ModalError):
    pass


class ModalAppNotFound(ModalError):
    pass


class ModalNoWebEndpoint(ModalError):
    pass


class ModalTimeout(ModalError):
    pass


class ModalCommandFailed(ModalError):
    pass


class ModalUsageError(ModalError):
    """A name Modal would refuse, or a choice the user has to make (several web endpoints)."""

    exit_code = ExitCode.USAGE


class ModalCancelled(ModalError):
    exit_code = ExitCode.INTERRUPTED


# --------------------------------------------------------------------------- results


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


@dataclass(frozen=True)
class _Result:
    returncode: int
    stdout: str
    stderr: str


# --------------------------------------------------------------------------- checks


def check_object_name(name: str, kind: str) -> str:
    """``name`` when Modal accepts it as a secret or app name, else a ModalUsageError. A name
    starting with "-" would be read as an option, so it is refused here too."""
    name = name.strip()
    if not _OBJECT_NAME.match(name) or name.startswith("-") or (kind != "app" and _APP_ID.match(name)):
        # Not echoed: a value pasted into the wrong flag must not be shown.
        raise ModalUsageError(f"That is not a Modal {kind} name.",
                              "Names hold letters, digits, dashes, dots and underscores, at most 64 characters.")
    return name


def check_key_name(key: str) -> str:
    if not _ENV_NAME.match(key):
        raise ModalUsageError("A secret's key must be a variable name (letters, digits and underscores).")
    return key


def split_app_ref(ref: str) -> tuple[str, str | None]:
    """``APP`` or ``APP/FUNCTION`` (as `modal function info` takes it): both parts checked."""
    app, slash, function = ref.strip().partition("/")
    app = check_object_name(app, "app")
    if not slash:
        return app, None
    if not _OBJECT_NAME.match(function) or function.startswith("-"):
        raise ModalUsageError(f"{printable(function[:64])!r} is not a Modal function name.",
                              "Pass --modal-app APP or APP/FUNCTION.")
    return app, function


def deployed_endpoints(cli: ModalCli, *, timeout: float = DEFAULT_TIMEOUT_S, cancel: threading.Event | None = None,
                       parallel: int = 4) -> list[AppEndpoint]:
    """Every web endpoint of every deployed app of the active environment, for a picker:
    apps in `modal app list` order, functions by name. Each app costs one or more CLI calls,
    so ``parallel`` of them run at once; one that fails (stopped meanwhile, say) is left out,
    but not being logged in or a cancel ends it all."""
    apps = [a for a in cli.list_apps(timeout=timeout, cancel=cancel) if a.deployed and a.name]

    def endpoints_of(app: ModalApp) -> list[AppEndpoint]:
        try:
            return [AppEndpoint(app.name, e.function, e.url) for e in cli.web_urls(app.name, timeout=timeout,
                                                                                    cancel=cancel)]
        except (ModalNotLoggedIn, ModalNotInstalled, ModalCancelled, ModalTimeout):
            raise
        except ModalError:
            return []

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        found = list(pool.map(endpoints_of, apps))
    return [endpoint for endpoints in found for endpoint in endpoints]


def container_notice(name: str, key: str = "ENVIRONMENT_API_KEY") -> str:
    """What to tell the user before :meth:`ModalCli.read_secret_value` starts its container."""
    return (f"Starting a Modal container to read {key} from secret {name} "
            f"(takes a few seconds, costs a little compute)…")


def secrets_env_first(found: Sequence[ModalSecret]) -> list[ModalSecret]:
    """Names holding "env" first (the SDK offers only those), each group in Modal's order."""
    return sorted(found, key=lambda s: "env" not in s.name.lower())


# --------------------------------------------------------------------------- the client


class ModalCli:
    """The ``modal`` CLI, run as a subprocess.

    ``executable``: a path or a command (a list, e.g. ``[python, "-m", "modal"]``); None finds
    ``modal`` on the PATH of ``env``, else runs ``python -m modal`` when the package is
    installed in this interpreter (``use_module``). ``env``: the environment of the calls
    (default: this process's).

    Every method raises a :class:`ModalError`: :class:`ModalNotInstalled`,
    :class:`ModalNotLoggedIn`, :class:`ModalTimeout`, :class:`ModalCancelled` (``cancel`` was
    set), :class:`ModalCommandFailed` (anything else the CLI reported), and the ones each
    method names.
    """

    def __init__(self, executable: str | Sequence[str] | None = None, *, env: Mapping[str, str] | None = None,
                 use_module: bool = True) -> None:
        self.env = dict(shell_env.given_or_shell(env))
        if isinstance(executable, str):
            self.command: list[str] | None = [executable]
        elif executable is not None:
            self.command = list(executable)
        else:
            self.command = _find_modal(self.env, use_module=use_module)

    def available(self) -> bool:
        """Whether a ``modal`` CLI was found (it may still not be logged in)."""
        return self.command is not None

    # ---- secrets

    def list_secrets(self, *, timeout: float = DEFAULT_TIMEOUT_S,
                     cancel: threading.Event | None = None) -> list[ModalSecret]:
        """The secrets of the active Modal environment, names holding "env" first."""
        rows = self._json_list(["secret", "list", "--json"], timeout=timeout, cancel=cancel,
                               what="listing Modal secrets")
        found = [ModalSecret(str(row["name"]), _text(row.get("created_at")), _text(row.get("created_by")),
                             _text(row.get("last_used_at")))
                 for row in rows if isinstance(row, dict) and row.get("name")]
        return secrets_env_first(found)

    def read_secret_value(self, name: str, key: str = "ENVIRONMENT_API_KEY", *, timeout: float = SHELL_TIMEOUT_S,
                          cancel: threading.Event | None = None, check_exists: bool = True) -> str:
        """The value of ``key`` in the secret ``name``, read by mounting the secret in a
        short-lived container (``modal shell --secret NAME --cmd …``): Modal has no API that
        reads a value back (docs/modal.md#reading-a-value). It takes seconds and costs a little
        compute; say so before calling it.

        ``check_exists`` lists the secrets first, so a wrong name costs no container.
        Raises ModalSecretNotFound, ModalKeyNotInSecret (naming the secret and the key), and
        the errors every call raises. The value appears in no message.
        """
        name = check_object_name(name, "secret")
        key = check_key_name(key)
        if check_exists:
            self.require_secret(name, timeout=min(timeout, DEFAULT_TIMEOUT_S), cancel=cancel)
        marker = f"synth_tui_{secrets.token_hex(8)}"
        result = self._run(["shell", "--secret", name, "--no-pty", "--cmd", _print_one_variable(key, marker)],
                           timeout=timeout, cancel=cancel, what=f"reading {key} from Modal secret {name}",
                           stopping=" The container is stopped with it.")
        if result.returncode != 0:
            raise self._failure(result, f"modal shell --secret {name}", secret=name)
        value = _between_markers(result.stdout, marker)
        if value is None:
            if f"{marker}_missing" in result.stdout:
                raise ModalKeyNotInSecret(
                    f"Modal secret {name} has no {key}.",
                    f"Add {key} to it (the env review's Send to Modal, or `modal secret create {name} --from-json "
                    f"FILE --force`, which replaces the whole secret), or choose another secret (`modal secret list`).")
            raise ModalCommandFailed(
                f"The Modal container for secret {name} ran, but its answer for {key} was not in its output."
                + _error_suffix(result.stderr),
                "Try again; `modal app list` shows a 'modal shell' app that failed to start.")
        if not value:
            raise ModalKeyNotInSecret(f"{key} is empty in Modal secret {name}.",
                                      f"Set a value for {key} in that secret, or choose another one.")
        return value

    def write_secret(self, name: str, values: Mapping[str, str], *, timeout: float = DEFAULT_TIMEOUT_S,
                     cancel: threading.Event | None = None) -> list[str]:
        """Create the secret ``name`` holding exactly ``values``, or REPLACE it when it exists
        (``modal secret create NAME --from-json FILE --force``: keys not in ``values`` are gone
        afterwards; Modal cannot add one key to a secret). The values pass through a JSON file
        of mode 0600 in a private folder, removed afterwards even when the call fails; never a
        command line, which ``ps`` shows. docs/modal.md#writing-a-secret says why JSON and not
        --from-dotenv. Returns the names of the keys the secret now holds."""
        self._create_secret(check_object_name(name, "secret"), values, timeout=timeout, cancel=cancel)
        return list(values)

    def send_secret(self, name: str, values: Mapping[str, str], *, timeout: float = DEFAULT_TIMEOUT_S,
                    cancel: threading.Event | None = None) -> SecretSent:
        """:meth:`write_secret`, then a check that it landed, with no container: the secret
        must be in ``modal secret list`` afterwards, newly created (a replaced secret is a new
        one, with a new creation time), and the CLI must have reported every key sent. A
        value cannot be read back for free, so it is not compared (docs/modal.md#confirming-a-send).
        A failure before the write raises; one of the check after it is a ``SecretSent``
        that is not confirmed, saying why."""
        name = check_object_name(name, "secret")
        before = {s.name: s for s in self.list_secrets(timeout=timeout, cancel=cancel)}
        stdout = self._create_secret(name, values, timeout=timeout, cancel=cancel)
        keys = tuple(values)

        def sent(confirmed: bool, detail: str) -> SecretSent:
            return SecretSent(name, keys, confirmed, detail)

        reported = _reported_keys(stdout, name)
        if reported is None:
            return sent(False, f"`modal secret create` did not print its usual 'Created a new secret {name!r}' line.")
        unreported = [k for k in keys if k not in reported]
        if unreported:
            return sent(False, f"`modal secret create` reported the keys {', '.join(reported) or 'none'}, "
                               f"not {', '.join(unreported)}.")
        try:
            after = self.list_secrets(timeout=timeout, cancel=cancel)
        except ModalCancelled:
            raise
        except ModalError as exc:
            return sent(False, f"`modal secret list` failed afterwards: {exc.message}")
        row = next((s for s in after if s.name == name), None)
        if row is None:
            return sent(False, f"`modal secret list` does not list {name} afterwards "
                               "(MODAL_ENVIRONMENT chooses the environment of both calls).")
        earlier = before.get(name)
        if earlier is not None and earlier.created_at == row.created_at:
            return sent(False, f"`modal secret list` shows {name} with the creation time it had before "
                               f"({row.created_at or 'none'}), so it does not show that it was replaced.")
        when = f" at {row.created_at}" if row.created_at else ""
        done = "replaced" if earlier is not None else "created"
        return sent(True, f"`modal secret list` shows {name} {done}{when}, and Modal reported the "
                          f"{plural(len(keys), 'key')} {', '.join(keys)}.")

    def _create_secret(self, name: str, values: Mapping[str, str], *, timeout: float,
                       cancel: threading.Event | None) -> str:
        """``modal secret create NAME --from-json FILE --force``; returns its stdout."""
        if not values:
            raise ModalUsageError("Nothing to send: a Modal secret needs at least one key.")
        for key, value in values.items():
            check_key_name(key)
            if not isinstance(value, str) or not value or "\x00" in value:
                raise ModalUsageError(f"{key} has no value that can be sent to Modal.")
        folder = tempfile.mkdtemp(prefix="synth-tui-modal-")  # mode 0700
        try:
            path = os.path.join(folder, "secret.json")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            os.fchmod(fd, 0o600)  # whatever the umask
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(dict(values), handle)
            result = self._run(["secret", "create", name, "--from-json", path, "--force"], timeout=timeout,
                               cancel=cancel, what=f"writing Modal secret {name}")
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if result.returncode != 0:
            raise self._failure(result, f"modal secret create {name}", secret=name)
        return result.stdout

    def require_secret(self, name: str, *, timeout: float = DEFAULT_TIMEOUT_S,
                       cancel: threading.Event | None = None) -> ModalSecret:
        """The secret ``name`` as ``modal secret list`` shows it: free (no container), so it
        comes before any read. Not there: ModalSecretNotFound naming the closest names first."""
        name = check_object_name(name, "secret")
        found = self.list_secrets(timeout=timeout, cancel=cancel)
        row = next((s for s in found if s.name == name), None)
        if row is not None:
            return row
        names = [s.name for s in found]
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
        known = f" Did you mean {' or '.join(close)}?" if close else ""
        if names:
            ordered = close + [n for n in names if n not in close]
            known += f" The secrets here are: {', '.join(ordered[:8])}{' …' if len(ordered) > 8 else ''}."
        else:
            known = " There are no secrets in the active Modal environment."
        raise ModalSecretNotFound(f"There is no Modal secret named {name}.{known}",
                                  "`modal secret list` lists them (MODAL_ENVIRONMENT chooses the environment).")

    # ---- apps

    def list_apps(self, *, timeout: float = DEFAULT_TIMEOUT_S,
                  cancel: threading.Event | None = None) -> list[ModalApp]:
        """The apps of the active environment: deployed ones first, each group in Modal's order."""
        rows = self._json_list(["app", "list", "--json"], timeout=timeout, cancel=cancel, what="listing Modal apps")
        apps = [ModalApp(str(row["app_id"]), str(row.get("description") or ""), str(row.get("state") or ""),
                         _int(row.get("tasks")), _text(row.get("created_at")), _text(row.get("stopped_at")))
                for row in rows if isinstance(row, dict) and row.get("app_id")]
        return sorted(apps, key=lambda a: not a.deployed)

    def web_urls(self, app: str, *, timeout: float = DEFAULT_TIMEOUT_S,
                 cancel: threading.Event | None = None) -> list[WebEndpoint]:
        """Every web function of the deployed app ``app`` (a name or an app id) with its URL:
        ``modal app info APP --json`` names them, ``modal function info APP/FN --json`` gives
        each URL (docs/modal.md#web-endpoints; modal 1.6 or newer). Raises ModalAppNotFound,
        and ModalNoWebEndpoint when the app is not deployed."""
        app = check_object_name(app, "app")
        info = self._json(["app", "info", app, "--json"], timeout=timeout, cancel=cancel,
                          what=f"reading Modal app {app}", app=app)
        if not isinstance(info, dict):
            raise ModalCommandFailed(f"`modal app info {app} --json` printed something other than an app.",
                                     UPGRADE_HINT)
        name = str(info.get("description") or app)
        lifecycle = info.get("lifecycle")
        state = str(lifecycle.get("state") or "") if isinstance(lifecycle, dict) else ""
        if state and state != "deployed":
            raise ModalNoWebEndpoint(f"Modal app {name} is {state}, not deployed: its web endpoints do not answer.",
                                     f"Deploy it again (`modal deploy`), or pass --task-url URL. {_apps_hint()}")
        functions = info.get("functions")
        web = sorted(fn for fn, entry in (functions.items() if isinstance(functions, dict) else [])
                     if isinstance(entry, dict) and isinstance(entry.get("summary"), dict)
                     and entry["summary"].get("web_function"))
        endpoints = []
        for function in web:
            url = self._function_url(name, function, timeout=timeout, cancel=cancel)
            if url:
                endpoints.append(WebEndpoint(function, url))
        return endpoints

    def task_app_endpoint(self, ref: str, *, timeout: float = DEFAULT_TIMEOUT_S,
                          cancel: threading.Event | None = None) -> WebEndpoint:
        """The endpoint ``--modal-app`` means: ``APP/FUNCTION`` names it; ``APP`` takes the app's
        only web function. Several: a ModalUsageError listing them (docs/modal.md#choosing-the-endpoint);
        none: ModalNoWebEndpoint."""
        app, function = split_app_ref(ref)
        endpoints = self.web_urls(app, timeout=timeout, cancel=cancel)
        if function is not None:
            chosen = [e for e in endpoints if e.function == function]
            if not chosen:
                listed = ", ".join(e.function for e in endpoints) or "none"
                raise ModalNoWebEndpoint(f"Modal app {app} has no web function {function} "
                                         f"(its web functions: {listed}).",
                                         "Pass --modal-app APP/FUNCTION with one of them.")
            return chosen[0]
        if not endpoints:
            raise ModalNoWebEndpoint(f"Modal app {app} has no web endpoint.",
                                     "A task app is served by a web function (@modal.asgi_app or "
                                     "@modal.fastapi_endpoint); check the app, or pass --task-url URL.")
        if len(endpoints) > 1:
            listed = "\n".join(f"  {app}/{e.function}  {e.url}" for e in endpoints)
            raise ModalUsageError(f"Modal app {app} has {len(endpoints)} web endpoints:\n{listed}",
                                  f"Pass --modal-app {app}/FUNCTION to choose one.")
        return endpoints[0]

    def _function_url(self, app: str, function: str, *, timeout: float, cancel: threading.Event | None) -> str | None:
        info = self._json(["function", "info", f"{app}/{function}", "--json"], timeout=timeout, cancel=cancel,
                          what=f"reading Modal function {app}/{function}", app=app)
        web_info = info.get("web_info") if isinstance(info, dict) else None
        url = web_info.get("web_url") if isinstance(web_info, dict) else None
        return url if isinstance(url, str) and url.startswith(("https://", "http://")) else None

    # ---- running the CLI

    def _json(self, args: list[str], *, timeout: float, cancel: threading.Event | None, what: str,
              app: str | None = None) -> Any:
        result = self._run(args, timeout=timeout, cancel=cancel, what=what)
        if result.returncode != 0:
            raise self._failure(result, "modal " + " ".join(args[:2]), app=app)
        try:
            return json.loads(result.stdout)
        except ValueError:
            raise ModalCommandFailed(f"`modal {' '.join(args)}` did not print JSON.", UPGRADE_HINT) from None

    def _json_list(self, args: list[str], *, timeout: float, cancel: threading.Event | None,
                   what: str) -> list[Any]:
        rows = self._json(args, timeout=timeout, cancel=cancel, what=what)
        if not isinstance(rows, list):
            raise ModalCommandFailed(f"`modal {' '.join(args)}` did not print a JSON list.", UPGRADE_HINT)
        return rows

    def _run(self, args: list[str], *, timeout: float, cancel: threading.Event | None, what: str,
             stopping: str = "") -> _Result:
        if self.command is None:
            raise ModalNotInstalled(f"Modal's command-line tool is not installed (needed for {what}).", INSTALL_HINT)
        try:
            process = subprocess.Popen([*self.command, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, env=self.env, text=True, encoding="utf-8",
                                       errors="replace")
        except OSError as exc:
            raise ModalNotInstalled(f"Cannot run {self.command[0]} ({exc.strerror or type(exc).__name__}), "
                                    f"needed for {what}.", INSTALL_HINT) from None
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    stdout, stderr = process.communicate(timeout=_POLL_S)
                    return _Result(process.returncode, stdout or "", stderr or "")
                except subprocess.TimeoutExpired:
                    pass
                if cancel is not None and cancel.is_set():
                    _stop(process)
                    raise ModalCancelled(f"Stopped {what}.{stopping}")
                if time.monotonic() >= deadline:
                    _stop(process)
                    raise ModalTimeout(f"Modal did not finish {what} within {timeout:g} s.{stopping}",
                                       "Try again (a first container start can be slow), check Modal's status "
                                       "page, or set the value in the .env instead.")
        finally:
            if process.poll() is None:  # an exception of ours, or Ctrl-C, while it ran
                _stop(process)

    def _failure(self, result: _Result, command: str, *, secret: str | None = None,
                 app: str | None = None) -> ModalError:
        # stderr only: the CLI prints its errors there, and stdout may hold what a container printed.
        text = _error_text(result.stderr)
        low = text.lower()
        if any(s in low for s in ("token missing", "modal token new", "could not authenticate", "unauthenticated",
                                  "invalid token", "token validation")):
            return ModalNotLoggedIn("Modal is not logged in on this machine.", LOGIN_HINT)
        if "no such command" in low or "no such option" in low:
            return ModalCommandFailed(f"This modal CLI cannot run `{command}` as synth-tui needs: {text}",
                                      UPGRADE_HINT)
        missing = "not found" in low or "no app with name" in low or "no secret" in low
        if secret is not None and missing:
            return ModalSecretNotFound(f"Modal secret {secret} was not found: {text}",
                                       "`modal secret list` lists them.")
        if app is not None and missing:
            return ModalAppNotFound(f"Modal app {app} was not found: {text}", _apps_hint())
        detail = f": {text}" if text else f" (exit {result.returncode}, nothing on stderr)"
        return ModalCommandFailed(f"`{command}` failed{detail}",
                                  "Run the same `modal` command yourself to see the whole message.")


# --------------------------------------------------------------------------- helpers


def _find_modal(env: Mapping[str, str], *, use_module: bool) -> list[str] | None:
    found = shutil.which("modal", path=env.get("PATH", os.defpath))
    if found:
        return [found]
    if use_module and _module_installed():
        return [sys.executable, "-m", "modal"]
    return None


def _module_installed() -> bool:
    """The ``modal`` package in this interpreter (the synth-tui[modal] extra), without importing it."""
    try:
        return find_spec("modal") is not None
    except (ImportError, ValueError):
        return False


def _stop(process: subprocess.Popen[str]) -> None:
    """SIGINT (the CLI then stops its app and container), then SIGKILL after a grace."""
    try:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
    except (OSError, ValueError):
        pass


def _print_one_variable(key: str, marker: str) -> str:
    """The container's command (run by bash -c): only ``key``'s value, between markers.

    The markers are built at run time (``$p`` plus a suffix), so the command's own text never
    holds them: a CLI that echoed the command could not be mistaken for an answer. Nothing
    but the one variable is printed (the container also holds Modal's token variables)."""
    return (f"p={marker}; if [ -n \"${{{key}+set}}\" ]; then printf '%s_begin:' \"$p\"; "
            f"printf '%s' \"${key}\"; printf ':%s_end\\n' \"$p\"; else printf '%s_missing\\n' \"$p\"; fi")


def _between_markers(output: str, marker: str) -> str | None:
    begin, end = f"{marker}_begin:", f":{marker}_end"
    start = output.find(begin)
    if start < 0:
        return None
    stop = output.rfind(end)
    if stop < start + len(begin):
        return None
    return output[start + len(begin):stop]


def _reported_keys(stdout: str, name: str) -> list[str] | None:
    """The keys of "Created a new secret 'NAME' with the key(s) 'A', 'B'" (cli/secret.py
    ``create``; docs/modal.md#writing-a-secret), None when that line is not there."""
    for line in stdout.splitlines():
        head, _, keys = line.partition(" with the key")
        if head.strip() == f"Created a new secret {name!r}":
            return re.findall(r"'([A-Za-z_][A-Za-z0-9_]*)'", keys)
    return None


def _error_text(stream: str) -> str:
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


def _error_suffix(stderr: str) -> str:
    text = _error_text(stderr)
    return f" Modal said: {text}" if text else ""


def _apps_hint() -> str:
    return "`modal app list` lists the apps of the active environment (MODAL_ENVIRONMENT chooses it)."


def _text(value: object) -> str | None:
    return None if value in (None, "", "-") else str(value)


def _int(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


__all__ = [
    "DEFAULT_TIMEOUT_S",
    "AppEndpoint",
    "INSTALL_HINT",
    "SHELL_TIMEOUT_S",
    "ModalApp",
    "ModalCancelled",
    "ModalCli",
    "ModalCommandFailed",
    "ModalError",
    "ModalKeyNotInSecret",
    "ModalNoWebEndpoint",
    "ModalNotInstalled",
    "ModalNotLoggedIn",
    "ModalSecret",
    "ModalSecretNotFound",
    "ModalTimeout",
    "ModalUsageError",
    "SecretSent",
    "WebEndpoint",
    "check_key_name",
    "container_notice",
    "deployed_endpoints",
    "check_object_name",
    "secrets_env_first",
    "split_app_ref",
]
