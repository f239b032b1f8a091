"""Modal, optional: read ENVIRONMENT_API_KEY from a Modal secret, write it into one, and find
the web endpoint of a deployed Modal app, through the ``modal`` command-line tool
(docs/modal.md: what each command prints, and which modal release confirmed it).

Nothing here imports the ``modal`` package. The CLI runs as a subprocess, from an argument
list (never a shell string), with its output captured; every call has a timeout and can be
stopped from another thread (a ``threading.Event``). A value read from a secret is never
logged, put on a command line or into an exception; a value written to a secret goes through
a file readable only by its owner, in a private folder removed afterwards.

Here: :class:`ModalCli`, one method a step (the secrets, the apps), and what the env review
asks of it. Beside it: running the CLI (``modal_process``), reading what it prints
(``modal_output``), checking the names given to it (``modal_names``) and its errors
(``modal_errors``).
"""

from __future__ import annotations

import difflib
import json
import os
import secrets
import shutil
import tempfile
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from app.core import shell_env
from app.core.modal_errors import (
    UPGRADE_HINT,
    ModalCancelled,
    ModalCommandFailed,
    ModalError,
    ModalKeyNotInSecret,
    ModalNotInstalled,
    ModalNotLoggedIn,
    ModalNoWebEndpoint,
    ModalSecretNotFound,
    ModalTimeout,
    ModalUsageError,
    apps_hint,
)
from app.core.modal_names import check_key_name, check_object_name, split_app_ref
from app.core.modal_output import (
    AppEndpoint,
    ModalApp,
    ModalSecret,
    SecretSent,
    WebEndpoint,
    between_markers,
    error_suffix,
    int_or_zero,
    print_one_variable,
    reported_keys,
    text_or_none,
)
from app.core.modal_process import CliResult, cli_failure, find_modal, run_cli
from app.core.text import plural

# docs/modal.md#costs-and-time: listing and creating take a second or two; a container
# takes seconds to tens of seconds to start, more when its image is built for the first time.
DEFAULT_TIMEOUT_S = 60.0
SHELL_TIMEOUT_S = 180.0


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
            self.command = find_modal(self.env, use_module=use_module)

    def available(self) -> bool:
        """Whether a ``modal`` CLI was found (it may still not be logged in)."""
        return self.command is not None

    # ---- secrets

    def list_secrets(self, *, timeout: float = DEFAULT_TIMEOUT_S,
                     cancel: threading.Event | None = None) -> list[ModalSecret]:
        """The secrets of the active Modal environment, names holding "env" first."""
        rows = self._json_list(["secret", "list", "--json"], timeout=timeout, cancel=cancel,
                               what="listing Modal secrets")
        found = [ModalSecret(str(row["name"]), text_or_none(row.get("created_at")), text_or_none(row.get("created_by")),
                             text_or_none(row.get("last_used_at")))
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
        result = self._run(["shell", "--secret", name, "--no-pty", "--cmd", print_one_variable(key, marker)],
                           timeout=timeout, cancel=cancel, what=f"reading {key} from Modal secret {name}",
                           stopping=" The container is stopped with it.")
        if result.returncode != 0:
            raise cli_failure(result, f"modal shell --secret {name}", secret=name)
        value = between_markers(result.stdout, marker)
        if value is None:
            if f"{marker}_missing" in result.stdout:
                raise ModalKeyNotInSecret(
                    f"Modal secret {name} has no {key}.",
                    f"Add {key} to it (the env review's Send to Modal, or `modal secret create {name} --from-json "
                    f"FILE --force`, which replaces the whole secret), or choose another secret (`modal secret list`).")
            raise ModalCommandFailed(
                f"The Modal container for secret {name} ran, but its answer for {key} was not in its output."
                + error_suffix(result.stderr),
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

        reported = reported_keys(stdout, name)
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
            raise cli_failure(result, f"modal secret create {name}", secret=name)
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
                         int_or_zero(row.get("tasks")), text_or_none(row.get("created_at")),
                         text_or_none(row.get("stopped_at")))
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
                                     f"Deploy it again (`modal deploy`), or pass --task-url URL. {apps_hint()}")
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
            raise cli_failure(result, "modal " + " ".join(args[:2]), app=app)
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
             stopping: str = "") -> CliResult:
        return run_cli(self.command, self.env, args, timeout=timeout, cancel=cancel, what=what, stopping=stopping)
