"""The launch's options: the command-line flags that prefill or skip steps (:class:`LaunchOptions`,
checked as they are given), the preview's overrides over them, and the work a guided session
waits for before its first step (:class:`Preparation`). Cut from session.py: no session state here.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.env.discovery import user_path
from app.core.env.keys import header_value_problem
from app.core.errors import UsageError


@dataclass(frozen=True)
class LaunchOptions:
    """The command-line flags that prefill or skip steps (the SDK's, plus --backend), as
    given: what the user changes later (the preview's overrides) is held by the session."""

    config_paths: Sequence[str] = ()
    env_files: Sequence[str] = ()
    task_url: str | None = None
    model: str | None = None
    allow_experimental: bool | None = None
    idempotency: str | None = None
    backend: str | None = None
    poll_interval: float = 5.0
    poll_timeout: float = 3600.0
    # Seconds a watch waits for a backend that stopped answering (0: until poll_timeout).
    give_up_after: float = 60.0
    metric: str | None = None
    cwd: Path = field(default_factory=Path.cwd)
    # The backend runs inside this process (synth-tui demo, --backend local): it stops when
    # the app does.
    embedded_backend: bool = False
    # --backend local: the key of the backend started for this run (SYNTH_API_KEY is then not
    # needed), and how to hand it the ENVIRONMENT_API_KEY it calls the task app with.
    backend_key: str | None = None
    hold_env_keys: Callable[[Sequence[str]], None] | None = None
    # What started that backend, shown as the key's source: the flag ("--backend local"), or the
    # command that made the key ("lab": "made by lab", docs/product.md#lab).
    backend_key_origin: str = "--backend local"
    # --modal-secret NAME: ENVIRONMENT_API_KEY from that Modal secret; --modal-app APP[/FUNCTION]:
    # TASK_APP_URL from that deployed app's web endpoint (docs/modal.md). Fetched by
    # LaunchSession.fetch_modal_values, not on construction: reading a secret starts a container.
    modal_secret: str | None = None
    modal_app: str | None = None

    def __post_init__(self) -> None:
        # Expanded once here, so no later expanduser() meets an unknown ~user and raises.
        object.__setattr__(self, "config_paths", tuple(str(user_path(p)) for p in self.config_paths))
        object.__setattr__(self, "env_files", tuple(str(user_path(p)) for p in self.env_files))
        check_seconds("--poll-interval", self.poll_interval, allow_zero=False)
        check_seconds("--poll-timeout", self.poll_timeout, allow_zero=True)
        check_seconds("--give-up-after", self.give_up_after, allow_zero=True)
        if self.idempotency:
            check_idempotency_key(self.idempotency)
        if self.modal_secret is not None or self.modal_app is not None:
            from app.core import modal_names
        if self.modal_secret is not None:
            object.__setattr__(self, "modal_secret", modal_names.check_object_name(self.modal_secret, "secret"))
        if self.modal_app is not None:
            modal_names.split_app_ref(self.modal_app)
            if self.task_url:
                raise UsageError("--task-url and --modal-app both name the task app.",
                                 "Pass one of them: --task-url URL, or --modal-app APP[/FUNCTION].")

    @classmethod
    def from_args(cls, args: object, *, cwd: Path | None = None) -> LaunchOptions:
        """From parsed command-line flags; commands without a flag get its default."""
        def flag(name: str, default: Any = None) -> Any:
            return getattr(args, name, default)

        return cls(
            config_paths=list(flag("config", []) or []), env_files=list(flag("env_file", []) or []),
            task_url=flag("task_url"), model=flag("model"), allow_experimental=flag("allow_experimental"),
            idempotency=flag("idempotency"), backend=flag("backend"),
            poll_interval=flag("poll_interval", 5.0), poll_timeout=flag("poll_timeout", 3600.0),
            give_up_after=flag("give_up_after", 60.0),
            metric=flag("metric"), cwd=cwd or Path.cwd(), embedded_backend=bool(flag("embedded_backend", False)),
            backend_key=flag("backend_key"), hold_env_keys=flag("hold_env_keys"),
            backend_key_origin=flag("backend_key_origin", "--backend local"),
            modal_secret=flag("modal_secret"), modal_app=flag("modal_app"),
        )



def check_seconds(flag: str, value: object, *, allow_zero: bool) -> None:
    """A UsageError unless ``value`` is a finite number of seconds (above zero, or at least
    zero when ``allow_zero``): nan fails every comparison, so a wait on it never ends or never
    starts, and a poll every 0 seconds floods the backend."""
    low = "0 or more" if allow_zero else "more than 0"
    ok = isinstance(value, (int, float)) and math.isfinite(value) and (value > 0 or (allow_zero and value == 0))
    if not ok:
        example = f"{flag} 3600 (86400 waits a day)" if allow_zero else f"{flag} 5"
        raise UsageError(f"{flag} must be a number of seconds, {low} (got {value!r}).", f"For example {example}.")


def new_idempotency_key() -> str:
    return str(uuid.uuid4())


def check_idempotency_key(key: str) -> None:
    """A UsageError unless ``key`` can be sent as the Idempotency-Key header."""
    from app.core.api.wire import MAX_IDEMPOTENCY_KEY_CHARS  # pydantic: not before the first frame

    problem = header_value_problem(key)
    if problem is None and len(key) > MAX_IDEMPOTENCY_KEY_CHARS:
        problem = f"it is {len(key):,} characters long; at most {MAX_IDEMPOTENCY_KEY_CHARS}"
    if problem:
        raise UsageError(f"--idempotency cannot be sent as an Idempotency-Key header: {problem}.",
                         "Use plain ASCII letters, digits and dashes, e.g. a UUID (the default when it is left out).")


@dataclass(frozen=True)
class Overrides:
    """What the preview lets the user change, over the flags (None: as the config says)."""

    model: str | None = None
    task_url: str | None = None
    allow_experimental: bool | None = None


@dataclass(frozen=True)
class Preparation:
    """Work the guided session waits for, started after its first frame (the demo's servers):
    ``run`` blocks (call it from a worker) and returns the options the session then adopts and
    a sentence saying what is ready; ``waiting`` says what is being done meanwhile, ``failed``
    titles the error when ``run`` raises."""

    waiting: str
    run: Callable[[], tuple[LaunchOptions, str]]
    failed: str = "Could not start"

