"""The errors of a Modal step (app/core/modal.py, docs/modal.md#errors) and the hints they
carry: every call to the ``modal`` CLI that fails raises one of these, a :class:`ModalError`.
"""

from __future__ import annotations

from app.core.errors import ExitCode, SynthTuiError

INSTALL_HINT = ("Install Modal's CLI: pip install 'synth-tui[modal]' (or pipx install modal), "
                "then log in with `modal token new`.")
LOGIN_HINT = "Run `modal token new` (or set MODAL_TOKEN_ID and MODAL_TOKEN_SECRET), then try again."
UPGRADE_HINT = "Upgrade it: pip install -U 'synth-tui[modal]' (modal 1.6 or newer)."


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


def apps_hint() -> str:
    return "`modal app list` lists the apps of the active environment (MODAL_ENVIRONMENT chooses it)."
