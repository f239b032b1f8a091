"""What a call to the Synth backend returns (docs/wire-contract.md): a decoded answer, a
verification's findings, a page of jobs, a created job. Plain data, no I/O; apart from the
client so that screens and services can hold them without importing it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.core.api.wire import JobStatus
from app.core.api.wire_answers import ModelCheckAnswer


@dataclass(frozen=True)
class RlSupport:
    """What the probe learned: RL jobs are offered; the generations the backend named
    (empty: it did not say) and how that was learned, in words."""

    generations: frozenset[str]
    how: str



@dataclass
class ApiResponse:
    """A decoded answer: HTTP status, parsed JSON (or the text preview) and its raw text."""

    status: int
    body: Any
    text: str
    headers: Mapping[str, str] = field(default_factory=dict)

    def preview(self, limit: int) -> str:
        if isinstance(self.body, (dict, list)):
            return json.dumps(self.body, indent=2)[:limit]
        return json.dumps({"status": self.status, "text": self.text[:400]}, indent=2)[:limit]


@dataclass
class VerifyResult:
    status: int
    body: Any
    preview_source: ApiResponse
    # The masks of this machine's keys the body's reported prefixes were shown as (redact.key_prefix).
    held_masks: tuple[str, ...] = ()

    @property
    def any_ok(self) -> bool:
        return isinstance(self.body, dict) and bool(self.body.get("any_ok"))

    @property
    def candidates(self) -> list[Any]:
        return list(self.body.get("candidates_first15") or []) if isinstance(self.body, dict) else []

    @property
    def attempts(self) -> list[dict[str, Any]]:
        if not isinstance(self.body, dict):
            return []
        return [a for a in self.body.get("attempts") or [] if isinstance(a, dict)]


@dataclass(frozen=True)
class ModelFinding:
    message: str
    fix: str | None = None


@dataclass
class ModelVerifyResult:
    """What a backend's model check said (docs/wire-contract.md#model-verification), read
    tolerantly; or, for a backend without one, the hosted service's list (`by_list`)."""

    ok: bool
    trains: str | None = None  # "lm", "tabular"; None: the backend did not say
    problems: list[ModelFinding] = field(default_factory=list)
    warnings: list[ModelFinding] = field(default_factory=list)
    parameters: int | None = None
    bytes: int | None = None
    template: str | None = None
    path: str | None = None
    body: Any = None
    by_list: bool = False
    finished: bool = True  # False: the backend's check did not finish in its bound (its warning says so)

    @classmethod
    def from_body(cls, body: Any) -> ModelVerifyResult:
        answer = ModelCheckAnswer.read(body)
        if answer is None:
            return cls(False, body=body, problems=[ModelFinding(
                "the backend's model check answered without a verdict (no boolean `ok`)",
                "This backend's /rl/verify_model is not the one docs/wire-contract.md describes; the full "
                "diagnostics (d) show its answer.")])
        problems = [ModelFinding(p.message, p.fix) for p in answer.problems]
        warnings = [ModelFinding(w.message, w.fix) for w in answer.warnings]
        if not answer.ok and not problems:
            problems = [ModelFinding("the backend's model check failed without saying why")]
        return cls(answer.ok, answer.trains or None, problems, warnings, answer.parameters, answer.bytes,
                   answer.template, answer.path, body, finished=answer.finished)


@dataclass(frozen=True)
class JobList:
    """Every job a backend listed, newest first as it sent them (docs/wire-contract.md#job-list)."""

    jobs: list[JobStatus]
    pages: int
    # True when the listing stopped at max_jobs while the backend may hold more.
    capped: bool = False
    # Why the listing stopped early or left something out, in words for the user; None: it did not.
    note: str | None = None


@dataclass
class CreateResult:
    status: int
    body: Any
    response: ApiResponse
    idempotency_key: str | None
    job_id: str | None = field(default=None)


# --------------------------------------------------------------------------- the client
