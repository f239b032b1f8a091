"""Async HTTP client for the Synth backend (docs/wire-contract.md#endpoints-and-auth), hosted or embedded:
its endpoints (the RL probe, verification, a job's create, status, events, metrics, rollouts,
cancel, the job list and the event stream) on top of app.core.api.transport.

Every failure becomes a typed :class:`app.core.api.errors.ApiError` with a human message and a
fix; secrets are redacted from anything an error carries. Reads are retried with backoff and
jitter; a job create is retried only when it carries an Idempotency-Key (so a retry can never
create a second job).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from app.core.api.errors import (
    PAYLOAD_REFUSED_STATUSES,
    BackendTimeout,
    BackendUnreachable,
    BadResponseError,
    ConflictError,
    NotFoundError,
    PayloadRefused,
    RejectedError,
    RlNotOffered,
    ServerError,
    StreamUnavailable,
    unsendable_url,
)
from app.core.api.failures import describe_exception, error_detail
from app.core.api.job_paging import JOB_PAGE_SIZE, MAX_LISTED_JOBS
from app.core.api.results import ApiResponse, CreateResult, JobList, ModelVerifyResult, RlSupport, VerifyResult
from app.core.api.transport import ApiTransport
from app.core.api.wire import (
    KNOWN_GENERATIONS,
    RL_CONTRACT_HEADER,
    JobEvent,
    JobStatus,
    MetricPoint,
    check_job_id,
    job_id_problem,
)
from app.core.api.wire_answers import EventPage, JobAction, JobPage, MetricsPage
from app.core.redact import mask_prefixes, mask_secret
from app.core.text import counted

PAGE_LIMIT = 200
ROLLOUT_PAGE_LIMIT = 200  # rollout summaries per request (the embedded backend sends up to 500)


class SynthClient(ApiTransport):
    """One backend, one key. Use as ``async with SynthClient(base, key) as client``."""

    # -- job paths: /rl first, /learning only after a 404 -------------------------

    async def _job_request(self, job_id: str, suffix: str, *, what: str, params: Mapping[str, Any] | None = None,
                           retries: int | None = None) -> ApiResponse:
        known = self._job_prefix.get(job_id)
        prefixes = [known] if known else ["/rl/jobs", "/learning/jobs"]
        errors: list[NotFoundError] = []
        for prefix in prefixes:
            try:
                response = await self.request("GET", job_path(prefix, job_id, suffix), what=what,
                                              params=params, retries=retries)
            except NotFoundError as exc:
                errors.append(exc)
                continue
            self._job_prefix.setdefault(job_id, prefix)
            return response
        if len(errors) == 1:
            raise errors[0]
        raise self._job_not_found(job_id, suffix, what, errors[0])

    def _job_not_found(self, job_id: str, suffix: str, what: str, first: NotFoundError) -> NotFoundError:
        """Both job paths answered 404: the error names only the path the user's command asked for
        (/rl/jobs, the one the user's backend is meant to serve), never the older fallback tried
        behind it, and says plainly what is missing."""
        asked = f"{urlsplit(self.base_url).path.rstrip('/')}{job_path('/rl/jobs', job_id, suffix)}"
        return NotFoundError(
            f"Job {job_id} was not found ({what}): GET {asked} answered 404 ({first.body_summary() or 'no detail'}). "
            f"The backend at {self.base_url} has no job {job_id}, or no RL "
            "jobs at all.",
            "Check the job id (`synth-tui jobs` lists the jobs a backend has) and that --backend points at the "
            "service that ran it.", status=404, body=first.body)

    # -- endpoints -----------------------------------------------------------------

    async def probe_rl(self) -> RlSupport:
        """One cheap request that says whether this backend offers RL jobs at all, and which
        contract generations it says it speaks. Today's hosted service may answer 404 here: RL
        jobs left the public SDK after 0.5.0 (docs/compatibility.md)."""
        try:
            response = await self.request("GET", "/rl/jobs", what="the RL job list", params={"limit": 1})
        except NotFoundError as exc:
            raise RlNotOffered(
                f"The backend at {self.base_url} answers, but offers no RL jobs: GET {self.base_url}/rl/jobs "
                f"answered 404 ({exc.body_summary()}). Synth's public SDK stopped creating RL jobs after 0.5.0, "
                "and today's hosted service may not offer them to you.",
                "Train on this machine with the embedded backend: add --backend local (it trains any "
                "conforming task app), or point --backend at a backend that offers /api/rl/jobs.",
                status=404, body=exc.body, request=exc.request) from None
        except RejectedError as exc:
            if exc.status == 405:  # the path exists, only listing is not allowed
                return RlSupport(frozenset(), "GET /rl/jobs answered 405: the RL job routes exist")
            raise
        said = response.headers.get(RL_CONTRACT_HEADER, "")
        generations = frozenset(g.strip() for g in said.split(",") if g.strip() in KNOWN_GENERATIONS)
        how = (f"the backend says it speaks {', '.join(sorted(generations))} ({RL_CONTRACT_HEADER})"
               if generations else "the backend does not say which contract generation it speaks")
        return RlSupport(generations, how)

    async def verify_task_app(self, task_url: str, held_keys: Sequence[str] = ()) -> VerifyResult:
        """``POST /rl/verify_task_app``. HTTP errors come back as a result, not an exception,
        so the caller can show the backend's report (the SDK prints it too). Reported key
        prefixes are cut to four characters: a "first 15" of a short key is the whole key; one
        that starts a key of ``held_keys`` (the task app's keys this machine holds) is shown as
        that key's mask, as the env review shows it."""
        try:
            response = await self.request("POST", "/rl/verify_task_app", what="task app verification",
                                          json_body={"endpoint_base_url": task_url})
            status, body = response.status, response.body
        except (RejectedError, ServerError, ConflictError, NotFoundError) as exc:
            status, body = exc.status or 0, exc.body
        body = mask_prefixes(body, held_keys)
        text = json.dumps(body) if isinstance(body, (dict, list)) else str(body or "")
        return VerifyResult(status=status, body=body, preview_source=ApiResponse(status, body, text),
                            held_masks=tuple(mask_secret(key) for key in held_keys))

    async def verify_model(self, model: str, *, chat_template: str | None = None, learning_rate: float | None = None,
                           trainer_mode: str | None = None) -> ModelVerifyResult | None:
        """``POST /rl/verify_model``: the backend's own check of the model a config names
        (docs/wire-contract.md#model-verification). None when the backend has no such route (the
        hosted service answers 404): the caller applies the hosted service's list instead."""
        body: dict[str, Any] = {"model": model}
        if chat_template:
            body["chat_template"] = chat_template
        if learning_rate is not None:
            body["learning_rate"] = learning_rate
        if trainer_mode:
            body["trainer_mode"] = trainer_mode
        try:
            response = await self.request("POST", "/rl/verify_model", what="the model check", json_body=body)
        except NotFoundError:
            return None
        except RejectedError as exc:
            if exc.status == 405:  # a backend that serves the path for something else
                return None
            raise
        return ModelVerifyResult.from_body(response.body)

    async def create_job(self, payload: Mapping[str, Any], *, idempotency_key: str | None) -> CreateResult:
        """``POST /rl/jobs``. Retried only with an Idempotency-Key: without one a retry after a
        lost answer could create a second job."""
        headers = {"Content-Type": "application/json"}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        try:
            response = await self.request("POST", "/rl/jobs", what="job creation", json_body=dict(payload),
                                          headers=headers, retries=None if idempotency_key else 0)
        except RejectedError as exc:
            if exc.status not in PAYLOAD_REFUSED_STATUSES:
                raise
            detail = error_detail(exc.body, str(exc.body or ""))
            raise PayloadRefused(
                f"The backend at {self.base_url} refused the job's payload (HTTP {exc.status}): {detail}"
                f"{'' if detail.endswith(('.', '?', '!')) else '.'}",
                "Fix the config (or the flag) it names, then run again: the same payload is refused again, so a "
                "retry cannot help.", status=exc.status, body=exc.body) from None
        body = response.body
        job_id = None
        if isinstance(body, dict):
            job_id = body.get("job_id") or body.get("id")
        job_id = str(job_id) if job_id else None
        problem = job_id_problem(job_id) if job_id else None
        if problem:
            # Every later request puts the id in a path: a strange one is refused, not followed.
            error = BadResponseError(
                f"The backend answered job creation with an unusable job id ({problem}).",
                "Check that --backend points at the Synth API; the job may exist: see the backend's job list.",
                status=response.status, body=response.text[:400])
            error.transient = False
            raise error
        return CreateResult(status=response.status, body=body, response=response,
                            idempotency_key=idempotency_key, job_id=job_id)

    async def get_job(self, job_id: str, *, retries: int | None = None) -> JobStatus:
        response = await self._job_request(job_id, "", what=f"status of job {job_id}", retries=retries)
        if not isinstance(response.body, dict):
            raise BadResponseError(f"The status of job {job_id} is not a JSON object.", None,
                                   status=response.status, body=response.text[:400])
        status = JobStatus.model_validate(response.body)
        if not status.job_id:
            status.job_id = job_id
        return status

    async def events(self, job_id: str, since_seq: int, *, limit: int = PAGE_LIMIT,
                     retries: int | None = None) -> list[JobEvent]:
        response = await self._job_request(job_id, "/events", what=f"events of job {job_id}",
                                           params={"since_seq": since_seq, "limit": limit}, retries=retries)
        return EventPage.model_validate(response.body).events

    async def metrics(self, job_id: str, after_step: int, *, limit: int = PAGE_LIMIT,
                      retries: int | None = None) -> list[MetricPoint]:
        response = await self._job_request(job_id, "/metrics", what=f"metrics of job {job_id}",
                                           params={"after_step": after_step, "limit": limit}, retries=retries)
        return MetricsPage.model_validate(response.body).points

    async def rollouts_page(self, job_id: str, *, step: int | None = None, phase: str | None = None,
                            limit: int = ROLLOUT_PAGE_LIMIT, after: str | None = None,
                            retries: int | None = None) -> Any:
        """One page of the rollouts a backend kept for a job (docs/wire-contract.md#rollouts): the
        body as sent, read by app.core.runs.rollouts. NotFoundError when the job, or the route, is not there."""
        params: dict[str, Any] = {"limit": limit}
        if step is not None:
            params["step"] = step
        if phase:
            params["phase"] = phase
        if after:
            params["after"] = after
        response = await self._job_request(job_id, "/rollouts", what=f"rollouts of job {job_id}", params=params,
                                           retries=retries)
        return response.body

    async def rollout(self, job_id: str, rollout_id: str, *, retries: int | None = None) -> Any:
        """One kept rollout with its turns (docs/wire-contract.md#rollouts): the body as sent."""
        response = await self._job_request(job_id, f"/rollouts/{quote(rollout_id, safe='')}",
                                           what=f"rollout {rollout_id!r} of job {job_id}", retries=retries)
        return response.body

    async def cancel_job(self, job_id: str) -> JobAction:
        """What the backend said of the cancel (the hosted service may say little: every field may be None)."""
        prefix = self._job_prefix.get(job_id, "/rl/jobs")
        response = await self.request("POST", job_path(prefix, job_id, "/cancel"), what=f"cancel of job {job_id}",
                                      json_body={}, retries=1)
        return JobAction.model_validate(response.body)

    async def list_jobs(self, *, limit: int = 50, status: str | None = None) -> list[JobStatus]:
        params: dict[str, Any] = {"limit": limit}
        if status:
            params["status"] = status
        response = await self.request("GET", "/rl/jobs", what="job list", params=params)
        return JobPage.model_validate(response.body).jobs

    async def list_all_jobs(self, *, max_jobs: int = MAX_LISTED_JOBS, page_size: int = JOB_PAGE_SIZE,
                            status: str | None = None, retries: int | None = None) -> JobList:
        """Every job, page by page (docs/wire-contract.md#job-list): ``after`` is the cursor the
        backend named (``next_cursor``), else the id of the last job of the page before. Stops
        at a page that is short (or says ``has_more: false``), empty, or brings no new job (a
        backend that ignores ``after`` sends the first page again), and at ``max_jobs``."""
        jobs: list[JobStatus] = []
        seen: set[str] = set()
        after: str | None = None
        pages = skipped = 0
        note: str | None = None
        capped = False
        while True:
            params: dict[str, Any] = {"limit": page_size}
            if status:
                params["status"] = status
            if after:
                params["after"] = after
            response = await self.request("GET", "/rl/jobs", what="job list", params=params, retries=retries)
            pages += 1
            page = JobPage.model_validate(response.body)
            items = page.jobs
            fresh, unusable = _new_usable_jobs(items, seen)
            skipped += unusable
            if pages > 1 and items and not fresh and not skipped:
                note = ("the backend sent the same jobs again for the next page (it ignores `after`): "
                        "only its first page is listed")
            room = max_jobs - len(jobs)
            jobs.extend(fresh[:room])
            if len(fresh) > room:
                capped = True
            more = _more_pages(page, page_size)
            if not fresh or not more:
                break
            if len(jobs) >= max_jobs:
                capped = True
                break
            cursor = page.next_cursor
            after = str(cursor) if cursor is not None and cursor != "" else items[-1].job_id
        if capped:
            note = f"only the newest {max_jobs:,} jobs are listed; the backend may hold more"
        if skipped:
            note = "; ".join(filter(None, [note, f"{counted(skipped, 'job')} with an unusable id left out"]))
        return JobList(jobs, pages, capped, note)

    async def stream_events(self, job_id: str, since_seq: int) -> AsyncIterator[JobEvent]:
        """Server-sent events for a job (``Accept: text/event-stream``), from ``since_seq``:
        at ``/events/stream`` (where SDK 0.4+ streamers look), else at ``/events`` (0.2.x
        backends negotiate there). The path that worked is remembered for the job.

        Raises StreamUnavailable when the backend offers no stream (the caller then polls);
        ends when the server closes the stream.
        """
        prefix = self._job_prefix.get(job_id, "/rl/jobs")
        known = self._stream_suffix.get(job_id)
        suffixes = [known] if known else ["/events/stream", "/events"]
        for suffix in suffixes:
            try:
                async for event in self._stream_at(job_id, job_path(prefix, job_id, suffix), since_seq):
                    self._stream_suffix[job_id] = suffix
                    yield event
                self._stream_suffix.setdefault(job_id, suffix)
                return
            except (StreamUnavailable, NotFoundError, RejectedError):
                # Raised before the first event: try the older path, or give up on streams.
                if suffix == suffixes[-1]:
                    raise StreamUnavailable(f"The backend offers no event stream for job {job_id}.", None) from None

    async def _stream_at(self, job_id: str, path: str, since_seq: int) -> AsyncIterator[JobEvent]:
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        self.request_count += 1
        try:
            async with self._http.stream("GET", path, params={"since_seq": since_seq}, headers=headers,
                                         timeout=httpx.Timeout(30.0, connect=5.0, read=60.0)) as response:
                if response.status_code != 200 or "text/event-stream" not in response.headers.get("content-type", ""):
                    await response.aread()
                    self._decode(response, what=f"event stream of job {job_id}", expect_json=False)
                    raise StreamUnavailable(f"The backend offers no event stream for job {job_id}.", None,
                                            status=response.status_code)
                async for data in sse_data_lines(response.aiter_lines()):
                    try:
                        payload = json.loads(data)
                    except ValueError:
                        continue
                    if isinstance(payload, dict):
                        yield JobEvent.model_validate(payload)
        except httpx.InvalidURL as exc:
            raise unsendable_url(f"the event stream of job {job_id}", exc) from None
        except httpx.TimeoutException:
            raise BackendTimeout(f"The event stream of job {job_id} went quiet.", None) from None
        except httpx.TransportError as exc:
            raise BackendUnreachable(
                f"The event stream of job {job_id} broke: {self._clean(describe_exception(exc))}.", None) from None


# --------------------------------------------------------------------------- helpers


def _new_usable_jobs(items: list[JobStatus], seen: set[str]) -> tuple[list[JobStatus], int]:
    """The jobs of a page not listed before, and how many were left out for an id that could
    not be attached to (it goes into paths); ``seen`` gains the new ones."""
    fresh: list[JobStatus] = []
    unusable = 0
    for job in items:
        if job.job_id in seen:
            continue
        if job_id_problem(job.job_id):
            unusable += 1
            continue
        seen.add(job.job_id)
        fresh.append(job)
    return fresh, unusable


def _more_pages(page: JobPage, page_size: int) -> bool:
    """Whether a job-list page says more follow: its ``has_more`` or ``next_cursor`` when it
    sends one, else a full page (docs/wire-contract.md#job-list)."""
    if page.has_more is not None:
        return page.has_more
    if "next_cursor" in page.model_fields_set:
        return bool(page.next_cursor)
    return len(page.jobs) >= page_size


def job_path(prefix: str, job_id: str, suffix: str = "") -> str:
    """``prefix/<job id>suffix`` with the id checked and quoted: it is one path segment."""
    return f"{prefix}/{quote(check_job_id(job_id), safe='')}{suffix}"


async def sse_data_lines(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """Yield the ``data:`` payload of each server-sent event (multi-line data joined by \\n)."""
    buffer: list[str] = []
    async for line in lines:
        if line == "":
            if buffer:
                yield "\n".join(buffer)
                buffer = []
            continue
        if line.startswith(":"):
            continue
        if line.startswith("data:"):
            buffer.append(line[5:].lstrip(" ") if line.startswith("data: ") else line[5:])
    if buffer:
        yield "\n".join(buffer)
