"""The state of one guided launch: what the user chose on each screen, and the steps between.

The TUI's screens read and change a :class:`LaunchSession`; every method that touches files
or the network is called from a worker. No Textual here, so the flow is testable on its own.
The flags it starts from are in options.py, the attach to an existing job in attaching.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from app.core import shell_env
from app.core.api.backend_url import checked_api_base, resolve_backend
from app.core.env.discovery import resolved_user_path
from app.core.env.keys import secret_parts
from app.core.errors import MissingSecretsError, SynthTuiError, UsageError
from app.core.launch.options import LaunchOptions, Overrides, new_idempotency_key

# The first screen is drawn before the config schema (pydantic), the HTTP client (httpx), the
# watch, the run history's and Modal's modules, and the launch steps' (app/core/launch/steps.py,
# its dataclasses) are imported: each method imports what it uses, once its step comes
# (docs/performance.md#first-paint).
if TYPE_CHECKING:
    from app.core import modal as modal_cli
    from app.core.api.client import SynthClient
    from app.core.api.health import HealthReport
    from app.core.api.results import ModelVerifyResult, RlSupport, VerifyResult
    from app.core.api.streaming import WatchOptions
    from app.core.config import rl as cfg
    from app.core.env import envfile
    from app.core.env.resolve import ResolvedKey
    from app.core.launch.steps import EnvChoice, PreparedJob
    from app.core.modal_errors import ModalError
    from app.core.runs.history import RunHistory, RunRecord
    from app.core.runs.jobs import JobContext


class _Same:
    """Equal only to a wrapper of the very same object."""

    __slots__ = ("obj",)

    def __init__(self, obj: object) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj

    __hash__ = None  # type: ignore[assignment]


@dataclass
class LaunchSession:
    """One launch, shared by both front ends: each step is a method here, and the screens and
    the headless flow only show what these return (docs/architecture.md)."""

    options: LaunchOptions
    shell: Mapping[str, str] = field(default_factory=shell_env.snapshot)
    config_path: Path | None = None
    report: cfg.ValidationReport | None = None
    env_choice: EnvChoice | None = None
    env: envfile.EnvFile | None = None
    resolved: list[ResolvedKey] = field(default_factory=list)
    backend_base: str = ""
    backend_source: str = ""
    idempotency_key: str = ""
    prepared: PreparedJob | None = None
    job_id: str | None = None
    # A malformed backend URL in the .env: raised by open_env, and again by anything that
    # would talk to the backend, so the hosted default is never used in its place.
    backend_problem: UsageError | None = None
    # What the backend said about RL jobs (probe): the payload takes the names it reads.
    rl_support: RlSupport | None = None
    overrides: Overrides = field(init=False)
    # The task URL and the model the verification step passed with: the preview says when
    # either changed since, and then sends nothing before they are verified again.
    verified_task_url: str | None = None
    verified_model: str | None = None
    # Keys fetched from Modal for this session (use_modal_value): they win over the shell and
    # the .env, are masked like every secret and are never written to the .env on their own.
    modal_keys: dict[str, ResolvedKey] = field(default_factory=dict)
    # Why --modal-secret / --modal-app gave nothing, in the TUI: the env review shows it, with
    # the fix, instead of the app ending before its first screen (docs/modal.md#in-synth-tui).
    modal_failure: ModalError | None = None
    # What the prepared payload was built from; the same inputs give it back without a re-read.
    _prepared_from: tuple[object, ...] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.backend_base, self.backend_source = resolve_backend(self.options.backend, self.shell)
        self.idempotency_key = self.options.idempotency or new_idempotency_key()
        options = self.options
        self.overrides = Overrides(options.model, options.task_url, options.allow_experimental)

    def adopt_options(self, options: LaunchOptions) -> None:
        """Use the options a :class:`Preparation` made (the demo's backend, .env and config),
        as if given on the command line; nothing was chosen or sent before."""
        self.options = options
        self.__post_init__()

    def override(self, **changes: object) -> bool:
        """Change the preview's overrides (model, task_url, allow_experimental); the flags stay
        as given. True when something changed, and the payload is then prepared again."""
        new = dataclasses.replace(self.overrides, **changes)  # type: ignore[arg-type]
        if new == self.overrides:
            return False
        task_url_changed = new.task_url != self.overrides.task_url
        self.overrides = new
        if task_url_changed:
            self.resolve()  # TASK_APP_URL resolution depends on the task URL given
        return True

    def use_backend(self, url: str, source: str) -> None:
        """Talk to this backend (e.g. the one a job from the history ran on); the .env does
        not override it."""
        self.backend_base, self.backend_source = checked_api_base(url, f"The backend recorded in {source}"), source
        self.backend_problem = None

    # -- config -------------------------------------------------------------------

    def discover_configs(self) -> list[cfg.ConfigCandidate]:
        from app.core.config import rl as cfg

        candidates = cfg.discover_configs(self.options.cwd, last_config=cfg.read_last_config(), include_broken=True)
        explicit = [resolved_user_path(p) for p in self.options.config_paths]
        if explicit:
            known = {c.path for c in candidates}
            candidates = [cfg.ConfigCandidate(p, "rl") for p in explicit if p not in known] + candidates
        return candidates

    def validate(self, path: Path, *, strict: bool = False) -> cfg.ValidationReport:
        """Read the config once and validate it; the report keeps the text and the file's
        stamp, so :meth:`prepare` builds from it without reading again. ``strict``: a file
        that cannot be read raises its ConfigError instead of becoming a problem."""
        from app.core.config.validation import validate_rl_file

        return validate_rl_file(path, allow_experimental=self.overrides.allow_experimental, env=self.shell,
                                strict=strict)

    def current_report(self) -> cfg.ValidationReport:
        """The chosen config's report, as it is now: the one :meth:`choose_config` stored
        while the file is unchanged (same mtime and size), judged again from its text (not
        read) when the experimental switch changed, read again only when the file changed."""
        from app.core.config.validation import config_stamp, revalidate

        assert self.config_path is not None, "choose a config first"
        report, path = self.report, self.config_path
        stamp = config_stamp(path)
        if report is None or report.text is None or report.path != path or stamp is None or report.stamp != stamp:
            report = self.validate(path)
        elif report.allow_experimental != self.overrides.allow_experimental:
            report = revalidate(report.text, path, report.stamp, allow_experimental=self.overrides.allow_experimental,
                                env=self.shell)
        self.report = report
        return report

    def choose_config(self, path: Path, report: cfg.ValidationReport) -> None:
        """Use this config. Changes the session: the TUI calls it on its UI thread only (its
        workers read and remember, then post a message; see :meth:`remember_config`)."""
        self.config_path = path
        self.report = report
        self.resolve()  # the config's [services].task_url may make TASK_APP_URL optional

    @staticmethod
    def remember_config(path: Path, report: cfg.ValidationReport) -> None:
        """Remember a valid config as the last chosen (the SDK's LAST_CONFIG), so a later run
        without --config never proposes one that cannot be sent. A file write, no session
        state: safe on a worker thread."""
        from app.core.config import rl as cfg

        if report.ok:
            cfg.write_last_config(path)

    # -- env -------------------------------------------------------------------------

    def initial_env_choice(self) -> EnvChoice:
        from app.core.launch import steps

        return steps.choose_env_file(self.options.env_files, cwd=self.options.cwd, config_path=self.config_path)

    def unattended_env_choice(self) -> EnvChoice:
        """The .env for a run where no one confirms what discovery proposes."""
        from app.core.launch import steps

        return steps.unattended_env_choice(self.initial_env_choice(), cwd=self.options.cwd,
                                           config_path=self.config_path)

    def open_unattended_env(self) -> EnvChoice:
        """Open the .env without asking: headless runs, attach, the history, and a TUI start
        that skips the env review (--env-file given). Only the env review lets a user confirm
        a discovered file, so only it opens :meth:`initial_env_choice` itself."""
        choice = self.unattended_env_choice()
        self.open_env(choice.path, choice.how, choice.candidates)
        return choice

    def open_env(self, path: Path | None, how: str = "chosen",
                 candidates: Sequence[Path] | None = None) -> envfile.EnvFile | None:
        """Read the .env at ``path`` and use it (:meth:`read_env`, then :meth:`use_env`)."""
        return self.use_env(self.read_env(path), path, how, candidates)

    @staticmethod
    def read_env(path: Path | None) -> envfile.EnvFile | None:
        """The .env at ``path`` as read now (None for no path). File reads, no session state:
        the TUI's workers call this, then hand the file to :meth:`use_env` on the UI thread."""
        from app.core.env import envfile  # with its parser: not before the first frame (docs/performance.md)

        return envfile.EnvFile.load(path) if path else None

    def use_env(self, env: envfile.EnvFile | None, path: Path | None, how: str = "chosen",
                candidates: Sequence[Path] | None = None) -> envfile.EnvFile | None:
        """Use a .env already read; raises when the backend it names cannot be used."""
        from app.core.launch.steps import EnvChoice

        if candidates is None:
            candidates = self.env_choice.candidates if self.env_choice else []
        self.env_choice = EnvChoice(path, how, list(candidates))
        self.env = env
        self.resolve()
        self._raise_backend_problem()
        return env

    def replace_env(self, env: envfile.EnvFile) -> None:
        """The same .env as read again from disk (the env review's reload)."""
        self.env = env
        self.resolve()

    def _backend_from_env_file(self) -> None:
        """Differs from the SDK on purpose: the SDK picks the backend before reading the .env,
        so a BACKEND_BASE_URL written there is listed but silently ignored. We use it when
        neither --backend nor the shell chose one (the shell still wins over the file).
        A malformed URL there is kept in backend_problem rather than raised: the env review
        resolves after every edit and must go on showing the keys."""
        from_env_file_or_default = self.backend_source == "default" or self.backend_source.endswith("(.env)")
        if self.options.backend is not None or not from_env_file_or_default:
            return
        file_values = {k: v for k, v in (self.env.values if self.env else {}).items() if v}
        origins = {name: str(self.env.path) for name in file_values if name not in self.shell} if self.env else {}
        self.backend_problem = None
        try:
            base, source = resolve_backend(None, {**file_values, **self.shell}, origins=origins)
        except UsageError as problem:
            self.backend_problem = problem
            return
        self.backend_base, self.backend_source = base, (f"{source} (.env)" if source != "default" else source)

    def resolve(self) -> list[ResolvedKey]:
        """The keys (and the backend, which the .env may set) as they are now; never raises."""
        from app.core.launch import steps

        self.resolved = [self._as_this_run_needs(self._from_modal(key))
                         for key in steps.resolve_secrets(self.env, shell=self.shell,
                                                          task_url_flag=self.overrides.task_url)]
        self._backend_from_env_file()
        return self.resolved

    def _from_modal(self, key: ResolvedKey) -> ResolvedKey:
        """A key fetched from Modal wins over the shell and the .env; --task-url (or the
        preview's override) still wins over a Modal app's URL."""
        fetched = self.modal_keys.get(key.name)
        if fetched is None or key.source == "flag":
            return key
        return dataclasses.replace(fetched, required=key.required)

    # -- Modal (docs/modal.md) ----------------------------------------------------------

    def use_modal_value(self, name: str, value: str, origin: str) -> None:
        """Use ``value`` for the key ``name`` in this session, shown as from ``origin`` (e.g.
        "Modal secret NAME"). It is not written to the .env: saving it is the user's choice."""
        from app.core.env.resolve import ResolvedKey

        self.modal_keys[name] = ResolvedKey(name, value, "modal", origin, True, False)
        self.resolve()

    def forget_modal_value(self, name: str) -> None:
        if self.modal_keys.pop(name, None) is not None:
            self.resolve()

    def fetch_modal_values(self, cli: modal_cli.ModalCli | None = None, *,
                           announce: Callable[[str], None] | None = None,
                           cancel: threading.Event | None = None) -> None:
        """What --modal-secret and --modal-app ask for: ENVIRONMENT_API_KEY read from the
        secret, TASK_APP_URL from the app's web endpoint. The free checks come first (the
        secret is listed, the app resolves): a typo in either costs no container. Only then is
        the container started, ``announce`` told right before. Raises the ModalError of
        app/core/modal.py that stopped it (docs/modal.md#in-synth-tui)."""
        options = self.options
        if not (options.modal_secret or options.modal_app):
            return
        from app.core import modal as modal_cli

        cli = cli or modal_cli.ModalCli(env=self.shell)
        if options.modal_secret:
            cli.require_secret(options.modal_secret, cancel=cancel)
        if options.modal_app:
            if announce:
                announce(f"Looking up the web endpoint of Modal app {options.modal_app}…")
            endpoint = cli.task_app_endpoint(options.modal_app, cancel=cancel)
            app = options.modal_app.partition("/")[0]
            self.use_modal_value("TASK_APP_URL", endpoint.url, f"Modal app {app}/{endpoint.function}")
        if options.modal_secret:
            if announce:
                announce(modal_cli.container_notice(options.modal_secret))
            value = cli.read_secret_value(options.modal_secret, cancel=cancel, check_exists=False)
            self.use_modal_value("ENVIRONMENT_API_KEY", value, f"Modal secret {options.modal_secret}")

    def _as_this_run_needs(self, key: ResolvedKey) -> ResolvedKey:
        """With --backend local, SYNTH_API_KEY is the key of the backend this process started,
        never the .env's or the shell's (a hosted key must not reach it), shown as from that
        flag. A key this run can do without is shown as such, not as "required — missing"."""
        if key.name == "SYNTH_API_KEY" and self.options.backend_key:
            return dataclasses.replace(key, value=self.options.backend_key, source="flag",
                                       origin=self.options.backend_key_origin, shell_overrides_file=False)
        if key.name == "TASK_APP_URL" and key.source == "flag" and self.overrides.task_url != self.options.task_url:
            key = dataclasses.replace(key, source="preview", origin="the payload preview")
        if key.name in self.optional_keys():
            return dataclasses.replace(key, required=False)
        return key

    def optional_keys(self) -> tuple[str, ...]:
        """Required keys this run can do without: TASK_APP_URL when --task-url (or the preview's
        override) or the config's [services].task_url names the task app."""
        return ("TASK_APP_URL",) if self.overrides.task_url or self._config_task_url() else ()

    def _config_task_url(self) -> str | None:
        from app.core.config.payload import usable_url

        config = self.report.config if self.report is not None else None
        return usable_url(config.services.task_url) if config is not None and config.services else None

    def missing_keys(self) -> list[str]:
        from app.core.env.resolve import missing_required

        return missing_required(self.resolved, optional=self.optional_keys())

    def urls_with_credentials(self) -> list[str]:
        """The URL keys in play whose value has ``user:pass@``: verification refuses them
        (docs/product.md#secrets), so the env review says so before it is reached."""
        from app.core.api.urls import credentials_problem

        return [k.name for k in self.resolved
                if k.name.endswith("_URL") and k.value and credentials_problem(k.value)]

    def unsendable_keys(self) -> list[str]:
        """The header keys in play an HTTP header cannot carry (a space, a non-ASCII letter), each
        as "NAME: why" (the value never): the env review says so before the payload fails on it."""
        from app.core.launch import steps

        return [f"{key.name}: {problem}" for key, problem in steps.unsendable_keys(self.resolved)]

    def secrets(self) -> dict[str, str]:
        from app.core.launch import steps

        path = self.env_choice.path if self.env_choice else None
        return steps.require_secrets(self.resolved, env_path=path, task_url_flag=self.overrides.task_url,
                               optional=self.optional_keys())

    def secret_values(self) -> list[str]:
        """Every secret in play, for redaction of anything shown."""
        values = [part for k in self.resolved for part in secret_parts(k.name, k.value)]
        if self.env is not None:
            values += [part for k, v in self.env.values.items() for part in secret_parts(k, v)]
        return values

    # -- payload, checks, submit ---------------------------------------------------------

    def prepare(self) -> PreparedJob:
        """The payload to send: built from the config as :meth:`choose_config` stored it (read
        once), again only when what it is built from changed (the file on disk, the keys, an
        override, the backend and its generation); the file is read again only when it changed."""
        from app.core.launch import steps

        assert self.config_path is not None, "choose a config first"
        self._raise_backend_problem()
        secrets = self.secrets()
        report = self.current_report()
        inputs = self._prepare_inputs(report, secrets)
        if self.prepared is not None and inputs == self._prepared_from:
            return self.prepared
        self.prepared = None  # until the new one is built: a failed build leaves no stale payload
        task_url_key = next((k for k in self.resolved if k.name == "TASK_APP_URL"), None)
        overrides, typed = self.overrides, task_url_key is not None and task_url_key.source == "preview"
        self.prepared = steps.prepare_payload(
            report, task_url_flag=overrides.task_url, env_task_url=secrets.get("TASK_APP_URL"),
            backend_base=self.backend_base, model=overrides.model, allow_experimental=overrides.allow_experimental,
            env=self.shell, task_url_flag_where="The preview's Task URL" if typed else None,
            env_task_url_where=f"TASK_APP_URL from {task_url_key.where}" if task_url_key else "TASK_APP_URL",
            generations=self.rl_support.generations if self.rl_support else frozenset())
        self._prepared_from = inputs
        return self.prepared

    def _prepare_inputs(self, report: cfg.ValidationReport, secrets: Mapping[str, str]) -> tuple[object, ...]:
        generations = self.rl_support.generations if self.rl_support else frozenset()
        # The report by identity: a new one (the file changed, the switch changed) is a new build.
        return (self.config_path, _Same(report), secrets.get("TASK_APP_URL"), self.overrides, self.backend_base,
                generations)

    def _raise_backend_problem(self) -> None:
        if self.backend_problem is not None:
            raise self.backend_problem

    # -- the job ---------------------------------------------------------------------

    def submitted_job(self, job_id: str, prepared: PreparedJob) -> JobContext:
        """The job that submitting ``prepared`` created: its context for the dashboard."""
        self.job_id = job_id
        from app.core.runs.jobs import JobContext

        return JobContext.of(job_id, prepared.payload, str(self.config_path) if self.config_path else None)

    def remember_submission(self, job: JobContext, *, idempotency_key: str | None = None,
                            rerun_of: str | None = None) -> str | None:
        """Record a created job in the run history, with the path (never the contents) of the
        .env it was launched with; a warning when the history could not be written. A backend
        this process started (--backend local, demo) holds a key of its own, not the .env's: the
        record names a 0600 file of the run folder holding that key instead, so `history` and
        `attach` from another terminal reach it (docs/product.md#commands)."""
        # after the first frame (docs/performance.md#first-paint)
        from app.core.runs.jobs import remember, save_backend_key

        env_path = self.env.path if self.env is not None and self.env.exists else None

        def record(history: RunHistory) -> None:
            remembered = env_path
            own_key = self.options.backend_key
            if own_key and (self.env is None or env_path is None or self.env.get("SYNTH_API_KEY") != own_key):
                remembered = save_backend_key(job.job_id, own_key)
            history.record_submission(
                job_id=job.job_id, backend=self.backend_base, config_path=job.config_path, payload=job.payload,
                idempotency_key=idempotency_key or self.idempotency_key, rerun_of=rerun_of,
                env_path=os.path.abspath(remembered) if remembered is not None else None)

        return remember(record)

    def attach(self, job_id: str) -> JobContext:
        """Set up a watch of an existing job, the same for both front ends (attaching.attach)."""
        from app.core.launch import attaching  # after the first frame (docs/performance.md#first-paint)

        return attaching.attach(self, job_id)

    def use_history_record(self, record: RunRecord) -> JobContext:
        """Set up an attach, a rerun or a status check of a job from the run history
        (attaching.use_history_record)."""
        from app.core.launch import attaching  # after the first frame (docs/performance.md#first-paint)

        return attaching.use_history_record(self, record)

    def remembered_env(self, record: RunRecord) -> Path | None:
        """The .env to use for this job instead of discovery: None when --env-file was given
        (it wins) or the record is from before the history remembered it."""
        if self.options.env_files or not record.env_path:
            return None
        return Path(record.env_path)

    def for_history_record(self, record: RunRecord) -> LaunchSession:
        """A new session with these flags and shell, set up for ``record``
        (:meth:`use_history_record`): the status check asks each job's backend with its own key."""
        session = LaunchSession(self.options, shell=self.shell)
        session.use_history_record(record)
        return session

    def backend_and_key_for(self, record: RunRecord) -> tuple[str, str] | SynthTuiError:
        """The job's backend and the key to ask it with (the history's status check,
        ``app/core/runs/history_refresh.py``), or why there is none. --env-file names the key
        for the job the user attaches to; this check asks every job unasked, so a job launched
        with a .env that is still there is asked with that .env's key: a key reaches only
        backends it was used with (docs/product.md#commands)."""
        session = self
        if self.options.env_files and record.env_path and Path(record.env_path).is_file():
            session = LaunchSession(dataclasses.replace(self.options, env_files=()), shell=self.shell)
        try:
            job_session = session.for_history_record(record)
            return job_session.backend_base, job_session.synth_api_key()
        except SynthTuiError as exc:
            return exc

    def watch_options(self, *, since_seq: int = 0) -> WatchOptions:
        """How both front ends watch a job: the flags' intervals and bounds."""
        from app.core.api.streaming import WatchOptions

        options = self.options
        return WatchOptions(poll_interval=options.poll_interval, poll_timeout=options.poll_timeout,
                            give_up_after=options.give_up_after or None, since_seq=since_seq)

    def attach_hint(self, job_id: str) -> str:
        """How to watch this job again after leaving: the command with every flag it needs."""
        from app.core.launch import attaching  # after the first frame (docs/performance.md#first-paint)

        return attaching.attach_hint(self, job_id)

    def history_attach_command(self, record: RunRecord) -> str:
        """The attach command for a job of the run history (attaching.history_attach_command)."""
        from app.core.launch import attaching  # after the first frame (docs/performance.md#first-paint)

        return attaching.history_attach_command(self, record)

    def paused_message(self, job_id: str) -> str:
        """What a watch that ended on a paused job says (the job is not over)."""
        from app.core.launch import attaching  # after the first frame (docs/performance.md#first-paint)

        return attaching.paused_message(self, job_id)

    def synth_api_key(self) -> str:
        """Only the backend key: enough to attach to a job, which needs no task app."""
        key = next((k for k in self.resolved if k.name == "SYNTH_API_KEY" and k.value), None)
        if key is None or not key.value:
            raise MissingSecretsError("Missing required key: SYNTH_API_KEY.",
                                      "Pass --env-file PATH with SYNTH_API_KEY, or export it in the shell.")
        from app.core.launch import steps

        steps.require_sendable_keys([key])
        return key.value

    def client(self, **kwargs: object) -> SynthClient:
        from app.core.api.client import SynthClient

        self._raise_backend_problem()
        return SynthClient(self.backend_base, self.synth_api_key(), **kwargs)  # type: ignore[arg-type]

    async def probe(self, client: SynthClient) -> RlSupport:
        """Ask the backend whether it offers RL jobs (RlNotOffered, with the way out, when it
        does not) and remember which generation it speaks, so the payload is prepared again
        under the names that one reads."""
        self.rl_support = await client.probe_rl()  # prepare() sees a new generation in its inputs
        return self.rl_support

    async def probe_for_attach(self, client: SynthClient) -> RlSupport:
        """The probe before a watch of an existing job: a backend without RL jobs is named as
        such, not as "job not found", with a way out that attach can take."""
        from app.core.api.errors import RlNotOffered

        try:
            return await self.probe(client)
        except RlNotOffered as exc:
            exc.hint = ("Attach with --backend URL of the backend that ran the job (`synth-tui history` lists "
                        "where each job launched from this machine ran).")
            raise

    def check_attach_backend(self) -> RlSupport:
        """:meth:`probe_for_attach` before the dashboard opens (the TUI's attach), so the TUI
        ends as headless does (exit 5) instead of showing an empty dashboard."""
        async def probe() -> RlSupport:
            async with self.client() as client:
                return await self.probe_for_attach(client)

        return asyncio.run(probe())

    async def verify(self, *, timeout: float = 30.0) -> VerifyResult:
        """The probe, then the backend's verification of the task app (POST /rl/verify_task_app)."""
        self.hand_env_keys_to_embedded_backend()
        async with self.client(timeout=timeout, retries=0) as client:
            await self.probe(client)
            held = self.env_keys() if self.secrets().get("ENVIRONMENT_API_KEY") else []
            return await client.verify_task_app(self.prepare().task_url, held)

    async def verify_model(self, *, timeout: float = 30.0) -> ModelVerifyResult:
        """The backend's check of the model the payload names (POST /rl/verify_model); for a
        backend without one (the hosted service), the hosted service's list."""
        from app.core.api.results import ModelFinding, ModelVerifyResult
        from app.core.config.models import check_rl_model, experimental_allowed
        from app.core.errors import ConfigError
        from app.core.launch.asked_model import asked_model

        asked = asked_model(self.prepare().payload)
        async with self.client(timeout=timeout, retries=0) as client:
            result = await client.verify_model(asked.model, chat_template=asked.chat_template,
                                               learning_rate=asked.learning_rate, trainer_mode=asked.trainer_mode)
        if result is not None:
            return result
        try:
            check_rl_model(asked.model, allow_experimental=experimental_allowed(self.overrides.allow_experimental,
                                                                                self.shell),
                           env=self.shell, allow_fine_tuned=not asked.is_base, hosted=True)
        except ConfigError as exc:
            return ModelVerifyResult(False, problems=[ModelFinding(exc.message, exc.hint)], by_list=True)
        return ModelVerifyResult(True, by_list=True)

    def env_keys(self) -> list[str]:
        """ENVIRONMENT_API_KEY and its aliases: every key the task app may accept."""
        aliases = [a.strip() for a in self.shell.get("ENVIRONMENT_API_KEY_ALIASES", "").split(",") if a.strip()]
        return [self.secrets()["ENVIRONMENT_API_KEY"], *aliases]

    def hand_env_keys_to_embedded_backend(self) -> None:
        """An embedded backend of this process holds the task-app keys as they are now (the
        hosted service holds the keys an org uploaded; this one gets them in memory)."""
        if self.options.hold_env_keys is not None:
            self.options.hold_env_keys(self.env_keys())

    async def health(self, *, timeout: float = 30.0) -> HealthReport:
        from app.core.api.health import check_task_app

        key, *aliases = self.env_keys()
        return await check_task_app(self.prepare().task_url, key, aliases=aliases, timeout=timeout)
