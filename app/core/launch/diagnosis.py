"""What the verification checks found, as rows and a verdict a person can act on.

The verification screen runs three checks at once: the backend's ``POST /rl/verify_task_app``
(which also proves the backend is reachable and accepts SYNTH_API_KEY), the direct task-app
health check, and the backend's check of the model (``POST /rl/verify_model``; the hosted
service's list for a backend without one). This module turns their outcomes (core result
objects, or the error that stopped them) into one :class:`DiagnosticRow` per attempt and an
:class:`OverallVerdict` with the fix, following the contract's troubleshooting tips. No Textual
here: it is the screen's view model, tested on its own; ``widgets.diagnostics`` draws it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import Any

from app.core.api.backend_url import DEFAULT_PROD_BACKEND, ensure_api_base
from app.core.api.errors import (
    HOSTED_UNREACHABLE_HINT,
    ApiError,
    AuthError,
    BackendTimeout,
    BackendUnreachable,
    RlNotOffered,
)
from app.core.api.failures import error_detail
from app.core.api.health import HealthReport
from app.core.api.results import ModelVerifyResult, VerifyResult
from app.core.redact import key_prefix, mask_prefixes, redact
from app.core.text import size_words

VERIFY_ENDPOINT = "POST /rl/verify_task_app"
MODEL_ENDPOINT = "POST /rl/verify_model"
HOSTED_LIST = "the hosted service's list"
# The health check sends every header style at once, as the SDK does (docs/wire-contract.md#health-check).
TASK_APP_HEADER_STYLES = "X-API-Key, X-API-Keys, Bearer"
READY_MESSAGE = "Ready: press enter to preview the payload"
_BUG_FIX = "This is a bug in synth-tui: retry (r), and report it with the diagnostics (d)."

BACKEND_CHECK = "backend"
VERIFY_CHECK = "backend verify"
TASK_APP_CHECK = "task app"
MODEL_CHECK = "model"


class Verdict(Enum):
    OK = "ok"
    FAILED = "failed"
    PENDING = "pending"
    WARNING = "warning"  # passed, with something to change (it does not stop the launch)

    @property
    def symbol(self) -> str:
        return {"ok": "✓", "failed": "✗", "pending": "…", "warning": "!"}[self.value]


@dataclass(frozen=True)
class DiagnosticRow:
    """One attempt: which check, what was tried, what came back and what it means."""

    check: str
    tried: str
    verdict: Verdict
    reason: str = ""
    status: int | None = None
    latency_ms: float | None = None
    fix: str | None = None

    def redacted(self, secrets: Sequence[str]) -> DiagnosticRow:
        fix = redact(self.fix, secrets) if self.fix else self.fix
        return replace(self, tried=redact(self.tried, secrets), reason=redact(self.reason, secrets), fix=fix)


@dataclass
class BackendCheck:
    """How the backend's verify call ended: a result, or the error that stopped it."""

    backend_base: str
    key_hint: str
    timeout_s: float
    elapsed_s: float = 0.0
    result: VerifyResult | None = None
    error: ApiError | None = None
    timed_out: bool = False

    @property
    def reached(self) -> bool:
        """The backend answered and accepted SYNTH_API_KEY."""
        return self.result is not None

    @property
    def verified(self) -> bool:
        result = self.result
        return result is not None and result.status < 400 and result.any_ok


@dataclass
class TaskAppCheck:
    """How the direct health check ended: a report, or no answer within the time allowed."""

    task_url: str
    key_hint: str
    timeout_s: float
    elapsed_s: float = 0.0
    report: HealthReport | None = None
    timed_out: bool = False
    error: str | None = None  # the check itself stopped (a bug), not the task app
    env_name: str | None = None  # the config's [rollout] env_name, compared with what /task_info names

    @property
    def ok(self) -> bool:
        return self.report is not None and self.report.ok

    @property
    def other_environment(self) -> Problem | None:
        """The config names an environment the task app says it does not serve: the job would
        train on the app's game and "succeed" learning nothing the config meant (issue 37: the
        demo's gridworld app with lm_press.toml). A warning, not a refusal: only a task app that
        names its environments in /task_info is compared (docs/product.md#verification)."""
        served = served_environments(self.report) if self.report is not None and self.report.ok else ()
        if not served or self.env_name is None or self.env_name in served:
            return None
        names = " or ".join(repr(n) for n in served)
        return Problem(f"The task app at {self.task_url} serves {names}; the config's [rollout] env_name is "
                       f"{self.env_name!r}: the job would play {names}.",
                       f"Point TASK_APP_URL at the task app for {self.env_name!r}, or choose a config written for "
                       f"{names}.")


@dataclass
class ModelCheck:
    """How the model check ended: the backend's verdict (or the hosted list's), or the error
    that stopped it."""

    model: str
    timeout_s: float
    elapsed_s: float = 0.0
    result: ModelVerifyResult | None = None
    error: ApiError | None = None
    timed_out: bool = False

    @property
    def tried(self) -> str:
        how = HOSTED_LIST if self.result is not None and self.result.by_list else MODEL_ENDPOINT
        return f"{how} · {self.model}"


@dataclass(frozen=True)
class Problem:
    message: str
    fix: str | None = None


@dataclass
class OverallVerdict:
    """Both checks passed, or every problem found, most fundamental first."""

    ready: bool
    problems: list[Problem] = field(default_factory=list)
    warnings: int = 0  # the `!` rows: they do not stop the launch, but the ready line counts them

    @property
    def headline(self) -> str:
        return self.ready_line() if self.ready else self.problems[0].message

    def ready_line(self, *, below_fold: bool = False) -> str:
        """`Ready: press enter…`, or with warnings `Ready, 1 warning (scroll ↓): press enter…`:
        at 80x24 the `!` row can be below the fold while this line says all is well (issue 37).
        `below_fold`: the rows go on below what is in view."""
        if not self.warnings:
            return READY_MESSAGE
        count = f"{self.warnings} warning{'s' if self.warnings > 1 else ''}"
        where = "scroll ↓" if below_fold else f"the ! row{'s' if self.warnings > 1 else ''} above"
        return f"Ready, {count} ({where}): press enter to preview the payload"


# --------------------------------------------------------------------------- formatting


def format_latency(latency_ms: float | None) -> str:
    if latency_ms is None:
        return "—"
    return f"{latency_ms:.0f} ms" if latency_ms < 1000 else f"{latency_ms / 1000:.1f} s"


def key_prefix_hint(value: Any, held_masks: tuple[str, ...] = ()) -> str:
    """A key prefix a backend reported, cut to its first 4 characters: one backend sends 6
    characters, another 15, and 15 characters of a short key are the whole key. One the client
    found to start a key this machine holds came as that key's mask (``held_masks``), and stays
    so: the key reads as the env review shows it (docs/product.md#secrets)."""
    if not str(value or "").strip():
        return ""
    return str(value) if value in held_masks else key_prefix(value)


def _no_answer(timeout_s: float) -> str:
    return f"no answer within {timeout_s:g} s"


# --------------------------------------------------------------------------- rows


# Rows name endpoints, not whole URLs: the screen's header shows the task app and backend URLs
# once, and the rows stay short enough to read on an 80-column terminal.


def pending_backend_row(key_hint: str, elapsed_s: float) -> DiagnosticRow:
    return DiagnosticRow(VERIFY_CHECK, f"{VERIFY_ENDPOINT} · Bearer {key_hint}", Verdict.PENDING,
                         f"verifying… {elapsed_s:.1f} s")


def pending_task_app_row(key_hint: str, elapsed_s: float) -> DiagnosticRow:
    return DiagnosticRow(TASK_APP_CHECK, f"GET /health, /task_info · {key_hint}", Verdict.PENDING,
                         f"verifying… {elapsed_s:.1f} s")


def backend_rows(check: BackendCheck) -> list[DiagnosticRow]:
    """The backend row (reachability and auth), then one row per verify attempt."""
    tried = f"{VERIFY_ENDPOINT} · Bearer {check.key_hint}"
    latency = check.elapsed_s * 1000
    if check.timed_out or isinstance(check.error, BackendTimeout):
        return [DiagnosticRow(BACKEND_CHECK, tried, Verdict.FAILED, _no_answer(check.timeout_s), None, latency,
                              "The backend is slow or unreachable from here: retry (r), or check --backend.")]
    if check.error is not None:
        # The request that was answered, which may be the probe before the verification (the
        # walk: a 401 to GET /rl/jobs was shown as POST /rl/verify_task_app's).
        if check.error.request:
            tried = f"{check.error.request} · Bearer {check.key_hint}"
        elif isinstance(check.error, RlNotOffered):
            tried = f"GET /rl/jobs · Bearer {check.key_hint}"
        return [DiagnosticRow(BACKEND_CHECK, tried, Verdict.FAILED, check.error.message, check.error.status,
                              latency, check.error.hint)]
    result = check.result
    assert result is not None, "a finished backend check has a result or an error"
    if result.status >= 400 or result.body is None:
        return [DiagnosticRow(BACKEND_CHECK, tried, Verdict.FAILED, _verify_http_failure(result), result.status,
                              latency, _verify_http_fix(result.status))]
    rows = [DiagnosticRow(BACKEND_CHECK, tried, Verdict.OK, "reachable; SYNTH_API_KEY accepted", result.status,
                          latency)]
    rows += [_verify_attempt_row(attempt, result.held_masks) for attempt in result.attempts]
    if not result.attempts:
        candidates = ", ".join(key_prefix_hint(c, result.held_masks) for c in result.candidates) or "none reported"
        verdict = Verdict.OK if result.any_ok else Verdict.FAILED
        said = _short(result.body.get("detail")) if isinstance(result.body, dict) else ""
        reason = ("any_ok: a stored key works" if result.any_ok
                  else said or "no stored key was accepted (any_ok false)")
        rows.append(DiagnosticRow(VERIFY_CHECK, f"stored keys: {candidates}", verdict, reason))
    return rows


def _verify_http_failure(result: VerifyResult) -> str:
    detail = error_detail(result.body, result.preview_source.text)
    if result.status == 404:
        return f"this backend has no /rl/verify_task_app (HTTP 404): {detail}"
    if result.body is None and result.status < 400:
        return f"the backend answered HTTP {result.status} without a JSON report"
    return f"the backend could not run the verification (HTTP {result.status}): {detail}"


def _verify_http_fix(status: int) -> str:
    if status == 404:
        return "Check --backend (or BACKEND_BASE_URL): it must be the Synth API base."
    if status >= 500 or status == 429:
        return "The backend had a problem: retry in a moment; the full diagnostics show its whole answer."
    return "Check TASK_APP_URL is a full https:// URL; the full diagnostics show the backend's whole answer."


def _verify_attempt_row(attempt: dict[str, Any], held_masks: tuple[str, ...] = ()) -> DiagnosticRow:
    """One try the backend reports. The hosted backend may send only ``status``."""
    status = _as_int(attempt.get("status"))
    ok = attempt.get("ok")
    passed = bool(ok) if isinstance(ok, bool) else status == 200
    endpoint = str(attempt.get("endpoint") or attempt.get("path") or attempt.get("url") or "")
    header = str(attempt.get("header") or attempt.get("header_style") or "")
    key = key_prefix_hint(attempt.get("key_prefix") or attempt.get("key") or "", held_masks)
    parts = [p for p in (endpoint, header, key) if p]
    tried = " · ".join(parts) if parts else "(the backend did not say)"
    error = _short(attempt.get("error")) or _short(attempt.get("detail"))
    if passed:
        reason = "OK"
    elif status in (400, 401, 403):
        reason = f"the task app rejected this stored key (HTTP {status})"
    elif error:
        reason = error
    elif status is None:
        reason = "no answer"
    else:
        reason = f"HTTP {status}"
    if error and not passed and error not in reason:
        reason = f"{reason}: {error}"
    return DiagnosticRow(VERIFY_CHECK, tried, Verdict.OK if passed else Verdict.FAILED, reason, status,
                         _as_float(attempt.get("latency_ms")))


def pending_model_row(model: str, elapsed_s: float) -> DiagnosticRow:
    return DiagnosticRow(MODEL_CHECK, f"{MODEL_ENDPOINT} · {model}", Verdict.PENDING, f"checking… {elapsed_s:.1f} s")


def model_rows(check: ModelCheck) -> list[DiagnosticRow]:
    """The model's row (what trains it, its size, its template), then a row per warning the
    check found. Its problems are the verdict's (overall_verdict), said once, with their fixes,
    under the rows: a row as well repeated a long fix (issue 37)."""
    latency = check.elapsed_s * 1000
    if check.timed_out or isinstance(check.error, BackendTimeout):
        return [DiagnosticRow(MODEL_CHECK, check.tried, Verdict.FAILED, _no_answer(check.timeout_s), None, latency,
                              "The backend is slow to read the model: retry (r).")]
    if check.error is not None:
        return [DiagnosticRow(MODEL_CHECK, check.tried, Verdict.FAILED, check.error.message, check.error.status,
                              latency, check.error.hint)]
    result = check.result
    assert result is not None, "a finished model check has a result or an error"
    if not result.finished:  # no verdict on the model: a warning row, never a ✓ (issue 37)
        said = result.warnings[0] if result.warnings else None
        return [DiagnosticRow(MODEL_CHECK, check.tried, Verdict.WARNING,
                              said.message if said else "not finished within the backend's bound", 200, latency,
                              UNFINISHED_FIX)]
    rows = [DiagnosticRow(MODEL_CHECK, check.tried, Verdict.OK if result.ok else Verdict.FAILED,
                          model_summary(result), None if result.by_list else 200, latency)]
    rows += [DiagnosticRow(MODEL_CHECK, "", Verdict.WARNING, w.message, fix=w.fix) for w in result.warnings]
    return rows


# The TUI's words for an unfinished check (headless says "run the command again": app/headless/train.py).
UNFINISHED_FIX = ("Check again (r): the backend goes on with the check and answers at once when it has finished. "
                  "Or go on: the job checks the model again as it loads it.")


def model_summary(result: ModelVerifyResult) -> str:
    """What the check found, in one line: `lm trains it: 135M parameters, 538 MB; template …`."""
    if result.by_list:
        return "supported" if result.ok else "not supported"
    if not result.ok:
        return "a job of this backend cannot train it as configured"
    if result.trains != "lm":
        return "the tabular stand-in trains (the model is not loaded)"
    size = [f"{_magnitude(result.parameters, ('B', 'M', 'k'))} parameters" if result.parameters else "",
            size_words(result.bytes) if result.bytes else ""]
    facts = ", ".join(part for part in size if part)
    template = f"; template {result.template} renders a tool call" if result.template else ""
    return f"the lm policy trains it{': ' + facts if facts else ''}{template}"


def _magnitude(value: int, units: tuple[str, str, str]) -> str:
    """4.0B, 135M, 538 MB, 8.0 GB: three figures at most, as a person reads a size."""
    for unit, scale in zip(units, (1e9, 1e6, 1e3), strict=True):
        if value >= scale:
            scaled = value / scale
            return f"{scaled:.1f}{unit}" if scaled < 10 else f"{scaled:.0f}{unit}"
    return str(value)


def served_environments(report: HealthReport) -> tuple[str, ...]:
    """The environments a task app's /task_info names: its taskset's `environment` (a name) or
    `environments` (a list of names); none when it names none (the SDK's apps need not)."""
    answer = next((a.body for a in report.attempts if a.endpoint == "/task_info" and a.ok), None)
    taskset = answer.get("taskset") if isinstance(answer, dict) else None
    if not isinstance(taskset, dict):
        return ()
    named = taskset.get("environments", taskset.get("environment"))
    names = [named] if isinstance(named, str) else named if isinstance(named, list) else []
    return tuple(n for n in names if isinstance(n, str) and n)[:8]


def task_app_rows(check: TaskAppCheck) -> list[DiagnosticRow]:
    tried = f"GET /health, /task_info · {check.key_hint}"
    if check.error is not None:
        return [DiagnosticRow(TASK_APP_CHECK, tried, Verdict.FAILED, check.error, None, check.elapsed_s * 1000,
                              _BUG_FIX)]
    if check.timed_out or check.report is None:
        return [DiagnosticRow(TASK_APP_CHECK, tried, Verdict.FAILED, _no_answer(check.timeout_s), None,
                              check.elapsed_s * 1000,
                              "The task app is slow or hung: check its logs, or that TASK_APP_URL points at it.")]
    rows = [
        DiagnosticRow(TASK_APP_CHECK, f"GET {a.endpoint} · {TASK_APP_HEADER_STYLES} · {a.key_hint}",
                      Verdict.OK if a.ok else Verdict.FAILED, a.reason, a.status, a.latency_ms, a.fix)
        for a in check.report.attempts
    ]
    other = check.other_environment
    if other is not None:
        rows.append(DiagnosticRow(TASK_APP_CHECK, "", Verdict.WARNING, other.message, fix=other.fix))
    return rows


def _short(value: Any, limit: int = 160) -> str:
    """A backend-supplied explanation on one line, whatever its type."""
    if value is None or value == "":
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[:limit - 1]}…"


def _as_int(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _as_float(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


# --------------------------------------------------------------------------- verdict


def overall_verdict(backend: BackendCheck, task_app: TaskAppCheck, model: ModelCheck | None = None) -> OverallVerdict:
    """Every check passed → ready; else what failed, the cause that blocks the rest first."""
    problems = [*_backend_access_problems(backend), *_task_app_problems(task_app),
                *_verification_problems(backend, task_app)]
    warnings = int(task_app.other_environment is not None)
    if model is not None:
        problems += _model_problems(model, backend)
        warnings += len(model.result.warnings) if model.result is not None else 0
    return OverallVerdict(ready=not problems, problems=problems, warnings=warnings)


def _model_problems(check: ModelCheck, backend: BackendCheck) -> Iterable[Problem]:
    """The model's problems; an error the backend's own row explains (unreachable, the key) is
    not said twice."""
    if check.timed_out or isinstance(check.error, BackendTimeout):
        if not backend.timed_out:
            yield Problem(f"The backend's model check did not answer within {check.timeout_s:g} s.",
                          "Check again (r in the TUI, or run the command again); the first check on a backend "
                          "imports its training libraries.")
        return
    if check.error is not None:
        if backend.error is None:
            yield Problem(f"The model check failed: {check.error.message}", check.error.hint)
        return
    result = check.result
    for finding in result.problems if result is not None else []:
        yield Problem(f"Model {check.model}: {finding.message}", finding.fix)


def _backend_access_problems(check: BackendCheck) -> Iterable[Problem]:
    error = check.error
    if check.timed_out or isinstance(error, BackendTimeout):
        yield Problem(f"The backend at {check.backend_base} did not answer within {check.timeout_s:g} s.",
                      HOSTED_UNREACHABLE_HINT if check.backend_base == ensure_api_base(DEFAULT_PROD_BACKEND)
                      else "Retry; if it persists, check --backend and your network.")
    elif isinstance(error, BackendUnreachable):
        yield Problem(f"Backend unreachable: {error.message}", error.hint)
    elif isinstance(error, AuthError):
        # Which backend answered (issue 37): on a busy machine another program's server may
        # hold the port the user meant for the backend they started.
        on = f" on {error.request}" if error.request else ""
        yield Problem(f"Wrong SYNTH_API_KEY: the backend at {check.backend_base} rejected {check.key_hint}{on} "
                      f"(HTTP {error.status}); it may not be the backend you started.",
                      "Set SYNTH_API_KEY to an API key of this backend's org, in the .env or the shell; if you "
                      f"started a backend, check that {check.backend_base} is the address it printed.")
    elif error is not None:
        yield Problem(error.message, error.hint)
    elif check.result is not None and (check.result.status >= 400 or check.result.body is None):
        yield Problem(f"Backend verification failed: {_verify_http_failure(check.result)}.",
                      _verify_http_fix(check.result.status))


def _task_app_problems(check: TaskAppCheck) -> Iterable[Problem]:
    if check.error is not None:
        yield Problem(f"The task app check did not finish: {check.error}.", _BUG_FIX)
        return
    if check.timed_out or check.report is None:
        yield Problem(f"The task app at {check.task_url} did not answer within {check.timeout_s:g} s.",
                      "It is slow or hung: check its logs, or that TASK_APP_URL points at it.")
        return
    failure = check.report.first_failure
    if failure is None:
        return
    if failure.status is None and "refused" in failure.reason:
        yield Problem(f"The task app at {check.task_url} is offline (connection refused).",
                      f"Start the task app, or fix TASK_APP_URL (now {check.task_url}).")
    elif failure.status is None:
        yield Problem(f"The task app at {check.task_url} did not answer {failure.endpoint}: {failure.reason}.",
                      failure.fix)
    else:
        yield Problem(f"Task app {failure.endpoint}: {failure.reason}", failure.fix)


def _verification_problems(backend: BackendCheck, task_app: TaskAppCheck) -> Iterable[Problem]:
    """The backend answered, but none of the keys it holds got past the task app's auth."""
    result = backend.result
    if result is None or result.status >= 400 or result.body is None or result.any_ok:
        return
    if unreachable_by_backend(result):
        if not task_app.ok:
            yield Problem("The backend could not reach the task app either.",
                          "Fix the task app problem above first, then retry.")
            return
        error = next(str(a.get("error")) for a in result.attempts)
        yield Problem(
            f"The backend could not reach the task app at {task_app.task_url} ({_short(error)}), though it "
            "answers from this machine.",
            "The backend must be able to reach that address: a loopback or private URL works only with a backend "
            "on this machine. Use the task app's public URL, or --backend local.")
    elif task_app.ok:
        why = ("it has no ENVIRONMENT_API_KEY stored for your org" if not result.attempts and not result.candidates
               else "every stored key it tried was rejected, while your own key works")
        yield Problem(
            f"The backend holds no key this task app accepts: {why}.",
            "Upload this task app's ENVIRONMENT_API_KEY to the backend (synth-ai setup), or point "
            "TASK_APP_URL at the task app your uploaded key belongs to.")
    else:
        yield Problem("The backend's verification failed too: none of the keys it holds was accepted.",
                      "Fix the task app problem above first, then retry.")


def unreachable_by_backend(result: VerifyResult) -> bool:
    """Every attempt the backend reports ended without an HTTP status: it never reached the
    task app, so this is not an auth problem."""
    attempts = result.attempts
    return bool(attempts) and all(a.get("status") is None and a.get("error") for a in attempts)


# --------------------------------------------------------------------------- the full report


def _model_section(check: ModelCheck) -> dict[str, Any]:
    section: dict[str, Any] = {"model": check.model, "tried": check.tried,
                               "elapsed_ms": round(check.elapsed_s * 1000), "timeout_s": check.timeout_s}
    if check.timed_out:
        section["error"] = _no_answer(check.timeout_s)
    if check.error is not None:
        section["error"] = {"type": type(check.error).__name__, "status": check.error.status,
                            "message": check.error.message, "hint": check.error.hint}
    if check.result is not None:
        result = check.result
        section["ok"] = result.ok
        section["answer"] = result.body if result.body is not None else {
            "problems": [asdict(p) for p in result.problems]}
    return section


def diagnostics_payload(backend: BackendCheck | None, task_app: TaskAppCheck | None,
                        verdict: OverallVerdict | None, model: ModelCheck | None = None) -> dict[str, Any]:
    """Everything the checks saw, for the ``d`` view and for pasting into a bug report."""
    payload: dict[str, Any] = {}
    if backend is not None:
        section: dict[str, Any] = {"backend": backend.backend_base, "endpoint": VERIFY_ENDPOINT,
                                   "synth_api_key": backend.key_hint, "elapsed_ms": round(backend.elapsed_s * 1000),
                                   "timeout_s": backend.timeout_s}
        if backend.timed_out:
            section["error"] = _no_answer(backend.timeout_s)
        if backend.error is not None:
            section["error"] = {"type": type(backend.error).__name__, "status": backend.error.status,
                                "message": backend.error.message, "hint": backend.error.hint,
                                "body": backend.error.body}
        if backend.result is not None:
            section["status"] = backend.result.status
            result = backend.result
            section["body"] = result.body if result.body is not None else result.preview_source.text
        payload["backend_verify"] = section
    if task_app is not None:
        section = {"task_url": task_app.task_url, "environment_api_key": task_app.key_hint,
                   "elapsed_ms": round(task_app.elapsed_s * 1000), "timeout_s": task_app.timeout_s}
        if task_app.report is None:
            section["error"] = _no_answer(task_app.timeout_s)
        else:
            section["ok"] = task_app.report.ok
            section["detail"] = task_app.report.detail
            section["attempts"] = [_rounded(asdict(a)) for a in task_app.report.attempts]
        payload["task_app_health"] = section
    if model is not None:
        payload["model_check"] = _model_section(model)
    if verdict is not None:
        payload["verdict"] = {"ready": verdict.ready,
                              "problems": [{"message": p.message, "fix": p.fix} for p in verdict.problems]}
    return payload


def _rounded(attempt: dict[str, Any]) -> dict[str, Any]:
    if isinstance(attempt.get("latency_ms"), float):
        attempt["latency_ms"] = round(attempt["latency_ms"], 1)
    return attempt


def diagnostics_text(payload: dict[str, Any], secrets: Sequence[str]) -> str:
    """The copyable report: full secrets masked, and reported key prefixes cut to 4 characters."""
    return redact(json.dumps(mask_prefixes(payload), indent=2, default=str, ensure_ascii=False), secrets)
