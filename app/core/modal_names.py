"""Names given to Modal (app/core/modal.py), checked before any call: a secret's or an app's
name, a secret's key, ``APP/FUNCTION``. Modal's own rule for object names (docs/modal.md#errors,
"bad name"); a name starting with "-" would be read as an option.
"""

from __future__ import annotations

import re

from app.core.modal_errors import ModalUsageError
from app.core.redact import printable

_OBJECT_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}\Z")
_APP_ID = re.compile(r"ap-[A-Za-z0-9]{22}\Z")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


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
