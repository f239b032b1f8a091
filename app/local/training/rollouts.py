"""The job runner's rollouts: a step's rollouts played against the task app at most
`max_concurrent` at a time, POST /rollout with its retries, and the contract learning.

Before the first rollout a job learns which rollout contract generation the task app speaks
(0.2 or 0.4/0.5) from its /openapi.json, else from the refusal of a body in the other one
(rollout_contract.py, docs/rollout-contracts.md), and says so in an `rl.taskapp.contract` event.
A rollout that gets no answer fails the job with a message that says how many requests were
sent and what to change. `RolloutClient` is a part of `JobRunner` (runner.py), cut out here.
"""

from __future__ import annotations

import asyncio
import json
import random
import secrets
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

import httpx

from app.core.api.failures import describe_http_error, response_detail
from app.core.api.retry import Attempts
from app.core.config.trainable import MAX_ANSWER_BYTES
from app.core.redact import printable, scrub_key_fragments
from app.local.policies.base import Episode
from app.local.state.journal import Journal
from app.local.state.store import utc_now
from app.local.training.admission import Admission
from app.local.training.answers import NOT_COMPRESSED, AnswerDeadline, AnswerTooLarge, send_within, show_bytes
from app.local.training.job_run import JobRun, OpenRollout
from app.local.training.plan import TrainingPlan
from app.local.training.retry import ROLLOUT_BACKOFF, send_with_retries
from app.local.training.rollout_contract import (
    GENERATION_NAMES,
    RolloutAsk,
    TaskAppError,
    fetch_openapi,
    generation_from_openapi,
    read_answer,
    refusal_asks_for,
    rollout_body,
)
from app.local.training.rollout_record import (
    PHASES,
    KeptRollout,
    Scrubber,
    match_turns,
    read_step_reports,
)

RETRY_EVENTS_SHOWN = 5
# A rollout still unanswered at this share of `[rollout] timeout_s` is named in a warning event,
# once; at most SLOW_EVENTS_SHOWN of a step's rollouts are (docs/hardening.md section 3).
SLOW_AT = 0.5
SLOW_EVENTS_SHOWN = 5
SLOW_ROLLOUT_EVENT = "rl.rollout.slow"
# httpx's own read timeout, a backstop behind the deadline (answers.send_within) that cuts first.
READ_TIMEOUT_AFTER_DEADLINE_S = 5.0
# A phase's rollouts done so far, said at most this often (never for a phase done sooner): a
# real model on a CPU takes minutes a step, and a job that says nothing looks frozen (issue 37).
ROLLOUT_PROGRESS_EVERY_S = 10.0
ROLLOUT_PROGRESS_EVENT = "rl.train.rollouts"
TASK_APP_GONE_HINT = "Check that the task app is running and reachable at that address; its log says why it failed."
TASK_APP_CLOSED_HINT = ("The task app closed the connection without an answer; its log says why (it may have "
                        "crashed or restarted).")
NO_POLICY_CALL_DOC = "docs/embedded-policy.md#a-task-app-that-never-calls-the-policy"
LARGE_ANSWER_IN_THREAD = 1 << 20  # bytes: a larger answer is parsed off the event loop every client shares

class RolloutClient:
    """The rollout half of `JobRunner`: what it uses of the job runner is declared here."""

    journal: Journal
    http: httpx.AsyncClient
    env_api_keys: list[str]
    scrubber: Scrubber
    admission: Admission

    async def _play_all(self, run: JobRun, mode: str, step: int, seeds: list[int]) -> list[Episode]:
        """Every rollout of a step, at most max_concurrent at a time. A fixed pool of workers
        takes them in turn: thousands of waiting tasks would slow the event loop every client
        shares, and a cancel would have to unwind them all."""
        episodes: list[Episode | None] = [None] * len(seeds)
        queue = iter(enumerate(seeds))
        progress = _RolloutProgress(len(seeds), time.monotonic())

        async def worker() -> None:
            for index, seed in queue:
                # One of the backend's rollout slots, taken before the rollout is sent: its time
                # limit then counts from the send, not from the wait (admission.py).
                async with self.admission.rollout_slot():
                    episodes[index] = await self._rollout(run, mode, step, index, seed)
                if progress.one_done(time.monotonic(), ROLLOUT_PROGRESS_EVERY_S):
                    self._note_progress(run, mode, step, progress)

        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(min(run.plan.max_concurrent, len(seeds))):
                    group.create_task(worker())
        except BaseExceptionGroup as failed:
            # The first failure cancelled the others; report that one, not a group.
            raise failed.exceptions[0] from None
        return [e for e in episodes if e is not None]

    def _note_progress(self, run: JobRun, mode: str, step: int, progress: _RolloutProgress) -> None:
        """`Step 1: 4/16 rollouts done`: the dashboard's sign of life within a long step
        (docs/wire-contract.md#event-types)."""
        what = f"Step {step}" if mode == "rl" else f"Eval after step {step}" if step else "Eval at step 0"
        self.journal.event(run.job_id, ROLLOUT_PROGRESS_EVENT,
                           f"{what}: {progress.done}/{progress.total} rollouts done",
                           data={"step": step, "phase": PHASES.get(mode, mode), "done": progress.done,
                                 "total": progress.total})

    def _headers(self) -> dict[str, str]:
        return {"X-API-Key": self.env_api_keys[0], "X-API-Keys": ",".join(self.env_api_keys)}

    async def _learn_contract(self, run: JobRun) -> None:
        """Which contract generation to speak, from the task app's /openapi.json when it says;
        otherwise 0.2 until a rollout is refused for lacking a field of the other one."""
        doc = await fetch_openapi(self.http, run.plan.task_url, self._headers())
        generation = generation_from_openapi(doc)
        if generation is not None:
            run.contract = generation
            self._announce_contract(run, "from /openapi.json", "openapi")

    def _announce_contract(self, run: JobRun, how: str, source: str) -> None:
        run.contract_announced = True
        self.journal.event(run.job_id, "rl.taskapp.contract",
                           f"The task app speaks rollout contract {run.contract} "
                           f"({GENERATION_NAMES[run.contract]}), learned {how}",
                           data={"contract": run.contract, "source": source, "task_app_url": run.plan.task_url})

    async def _rollout(self, run: JobRun, mode: str, step: int, index: int, seed: int) -> Episode:
        plan = run.plan
        # The policy reads from the id whether to act greedily (policies/base.acts_greedily): an
        # evaluation's are `eval-…`, unless `[evaluation] samples` asks for sampled ones (`evalk-…`).
        tag = "evalk" if mode == "eval" and plan.eval_samples else mode
        rollout_id = f"{tag}-{step}-{index}-{secrets.token_hex(6)}"
        where = (f"seed {seed}, iteration {step}" if mode == "rl" else f"eval seed {seed}, after iteration {step}"
                 if step else f"eval seed {seed}, before any update")
        url = f"{plan.task_url}/rollout"
        ask = RolloutAsk(job_id=run.job_id, rollout_id=rollout_id, mode=mode, seed=seed, env_name=plan.env_name,
                         policy_name=plan.policy_name, model=plan.model, max_turns=plan.max_turns, ops=plan.ops,
                         timeout_s=plan.rollout_timeout_s, api_base=run.api_base)
        rollout = OpenRollout(random.Random(f"{run.seed}:{mode}:{step}:{index}"))
        rollout.record = plan.inspect_max_bytes > 0 and (
            mode == "eval" or (run.sample is not None and run.sample.wants_turns()))
        run.open_rollouts[rollout_id] = rollout
        which = (f"Rollout {index} of step {step}" if mode == "rl" else f"Eval rollout {index} after step {step}")
        slow = loop_later(plan.rollout_timeout_s * SLOW_AT, self._note_slow, run, mode, step, f"{which} ({where})")
        try:
            resp = await self._post_rollout(run, url, ask, where)
        finally:
            slow.cancel()
            run.open_rollouts.pop(rollout_id, None)
        if rollout.memos:
            run.calling_rollouts += 1
        try:
            answer = await _parsed(resp)
        except (ValueError, RecursionError):
            raise TaskAppError(f"POST {url} failed: the answer is not JSON: {resp.text[:80]!r} ({where})") from None
        try:
            outcome = read_answer(answer)
        except TaskAppError as exc:
            raise TaskAppError(f"POST {url} failed: {exc} ({where})") from None
        if not run.contract_announced:
            self._announce_contract(run, f"by default: /openapi.json did not say, and a {run.contract} rollout "
                                         "was accepted", "default")
        run.rollouts += 1
        if rollout.record:
            trajectory = match_turns(rollout.turns, read_step_reports(answer), outcome.tool_call_ids)
            kept = KeptRollout(rollout_id, PHASES.get(mode, mode), step, index, seed, outcome.score,
                               outcome.turns if outcome.turns is not None else len(trajectory), trajectory,
                               rollout.turns_cut)
            if mode == "eval":
                await self._keep(run, [kept])
            elif run.sample is not None:
                run.sample.offer(kept)
        return Episode(rollout.used_memos(outcome.tool_call_ids), outcome.score, turns=outcome.turns)

    async def _keep(self, run: JobRun, kept: list[KeptRollout]) -> None:
        """Store rollouts for the inspector, scrubbed of every key (compressed and written in a
        thread: a large one must not stall the event loop every client shares)."""
        if not kept or run.plan.inspect_max_bytes <= 0:
            return
        store, scrub, cap = self.journal.store.rollouts, self.scrubber, run.plan.inspect_max_bytes

        def write() -> str | None:
            for rollout in kept:
                summary = {"rollout_id": rollout.rollout_id, "phase": rollout.phase, "step": rollout.step,
                           "index": rollout.index, "seed": rollout.seed, "reward": rollout.reward,
                           "turns": rollout.turns}
                record = {"turns_kept": len(rollout.trajectory), "turns_cut": rollout.turns_cut,
                          "trajectory": scrub.trajectory(rollout.trajectory)}
                try:
                    store.add(run.job_id, summary, record, max_bytes=cap, created_at=utc_now())
                except (sqlite3.Error, ValueError, RecursionError) as exc:
                    # What the inspector keeps never fails the training: it is said once, then skipped.
                    return f"{type(exc).__name__}: {exc}"
            return None

        problem = await asyncio.to_thread(write)
        if problem is not None and not run.inspect_warned:
            run.inspect_warned = True
            self.journal.event(run.job_id, "rl.rollouts.warning",
                               f"A rollout could not be kept for the inspector ({problem}); training goes on, "
                               "and such rollouts are left out", level="warning", data={"step": kept[0].step})

    async def _post_rollout(self, run: JobRun, url: str, ask: RolloutAsk, where: str) -> httpx.Response:
        """POST /rollout in the job's generation, retried on transient failures with the same
        body (the task app answers a repeat from its first run), its answer read up to
        `[rollout] max_answer_bytes` (answers.py). A 400/422 that asks for a field of the other
        generation switches the job to it, and this rollout is sent once more. Any other failure
        is a TaskAppError that says how many requests were sent and why none was answered."""
        plan, headers = run.plan, {**self._headers(), **NOT_COMPRESSED}

        def retried(attempt: int, why: str) -> None:
            # `why` may quote the task app's answer: scrubbed of every key, made safe for a terminal.
            self._note_retry(run, f"POST {url} ({where}), attempt {attempt} of {ROLLOUT_BACKOFF.attempts}: "
                                  f"{printable(self.scrubber.text(why))}; retrying")

        switched = False
        while True:
            sent = run.contract
            body = rollout_body(sent, ask)
            attempts = Attempts()

            async def send(body: dict[str, Any] = body) -> httpx.Response:
                # timeout_s is a deadline for the whole answer, not per read (send_within).
                timeout = httpx.Timeout(plan.rollout_timeout_s,
                                        read=plan.rollout_timeout_s + READ_TIMEOUT_AFTER_DEADLINE_S)
                request = self.http.build_request("POST", url, json=body, headers=headers, timeout=timeout)
                return await send_within(self.http, request, plan.max_answer_bytes, plan.rollout_timeout_s)

            try:
                resp = await send_with_retries(send, backoff=ROLLOUT_BACKOFF, on_retry=retried, attempts=attempts)
            except httpx.HTTPError as exc:
                raise TaskAppError(_transport_failure(plan, url, exc, attempts.made, where)) from None
            except AnswerTooLarge as exc:
                raise TaskAppError(
                    f"The task app's answer to POST {url} {exc.words()} ([rollout] max_answer_bytes = "
                    f"{plan.max_answer_bytes:,}) ({where}). Make the task app answer less (a rollout's answer "
                    "needs its score, turns and tool calls), or raise [rollout] max_answer_bytes "
                    f"(at most {show_bytes(MAX_ANSWER_BYTES)}).") from None
            if resp.status_code < 400:
                return resp
            if not switched and resp.status_code < 500:
                asked = _refusal_of(sent, resp)
                if asked is not None:
                    generation, field_name = asked
                    switched = True
                    if run.contract == sent:  # the first rollout to learn it says so; the others follow
                        run.contract = generation
                        self._announce_contract(run, f"after a {resp.status_code} that asked for {field_name}",
                                                "refusal")
                    continue
            detail = scrub_key_fragments(response_detail(resp), self.env_api_keys) or "no reason given"
            raise TaskAppError(f"POST {url} failed {_tries(attempts.made)}: HTTP {resp.status_code}: {detail} "
                               f"({where}). {_status_hint(resp.status_code, attempts.made)}")

    def _require_policy_calls(self, run: JobRun, step: int, rollouts: int, calling: int) -> None:
        """A step none of whose rollouts called the policy fails the job: nothing the policy
        did could have made its scores (docs/embedded-policy.md#a-task-app-that-never-calls-the-policy)."""
        if rollouts and not calling:
            raise TaskAppError(
                f"No rollout called the policy in step {step} ({rollouts} rollouts): the task app must call the "
                "chat endpoint it is given for each rollout (policy.config.inference_url of the /rollout request) "
                f"to choose its actions, or there is nothing to learn; see {NO_POLICY_CALL_DOC}")

    def _note_slow(self, run: JobRun, mode: str, step: int, which: str) -> None:
        """`Rollout 3 of step 1 (seed 3, iteration 1): no answer after 8 s of 15 s`, said once a
        rollout, for at most SLOW_EVENTS_SHOWN of a step's: which rollout holds the step up."""
        said = run.slow_noted.get((mode, step), 0)
        if said >= SLOW_EVENTS_SHOWN:
            return
        run.slow_noted[(mode, step)] = said + 1
        limit = run.plan.rollout_timeout_s
        more = " (further slow rollouts of this step are not said)" if said + 1 == SLOW_EVENTS_SHOWN else ""
        self.journal.event(run.job_id, SLOW_ROLLOUT_EVENT,
                           f"{which}: no answer after {limit * SLOW_AT:g} s of {limit:g} s ([rollout] timeout_s); "
                           f"it is cut at {limit:g} s{more}", level="warning",
                           data={"step": step, "phase": PHASES.get(mode, mode), "after_s": limit * SLOW_AT,
                                 "timeout_s": limit})

    def _note_retry(self, run: JobRun, message: str) -> None:
        """Retries are counted in every step's data; the first few are also events, so a
        flaky task app shows in the log without flooding it."""
        run.retries += 1
        if run.retries <= RETRY_EVENTS_SHOWN:
            more = " (further retries are counted in the step data)" if run.retries == RETRY_EVENTS_SHOWN else ""
            self.journal.event(run.job_id, "rl.rollout.retry", message + more, level="warning",
                               data={"retries": run.retries})


@dataclass
class _RolloutProgress:
    """How many of a phase's rollouts are done, and when that was last said."""

    total: int
    last_said: float  # time.monotonic(); the phase's start at first
    done: int = 0

    def one_done(self, now: float, every_s: float) -> bool:
        """Count a finished rollout; True when it is time to say so (not for the last one:
        the step's own event follows at once)."""
        self.done += 1
        if self.done >= self.total or now - self.last_said < every_s:
            return False
        self.last_said = now
        return True


def _refusal_of(sent: str, resp: httpx.Response) -> tuple[str, str] | None:
    """(generation, field) when a 4xx refuses a body of generation `sent` for lacking a field
    of the other one (rollout_contract.refusal_asks_for)."""
    try:
        refusal = resp.json()
    except (ValueError, RecursionError):
        return None
    return refusal_asks_for(sent, resp.status_code, refusal)


async def _parsed(resp: httpx.Response) -> Any:
    """The answer's JSON; a large one parsed in a thread."""
    if len(resp.content) > LARGE_ANSWER_IN_THREAD:
        return await asyncio.to_thread(json.loads, resp.content)
    return resp.json()


def loop_later(delay_s: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
    """`callback(*args)` after `delay_s` on the running loop, unless cancelled first."""
    return asyncio.get_running_loop().call_later(delay_s, callback, *args)


def _tries(made: int) -> str:
    return "after 1 attempt" if made == 1 else f"after {made} attempts"


def _status_hint(status: int, made: int) -> str:
    if status >= 500:
        each = " each time" if made > 1 else ""
        return f"The task app failed to answer{each}; its log says why."
    return "The task app refused the request; its log says why."


def _transport_failure(plan: TrainingPlan, url: str, exc: httpx.HTTPError, made: int, where: str) -> str:
    """Why a rollout got no answer, with the number of requests truly sent and what to change.
    No library internals: describe_http_error leaves them out."""
    fewer = f"[rollout] max_concurrent_rollouts (now {plan.max_concurrent})"
    if isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout):
        # A deadline for the whole answer (answers.send_within); httpx's own timeouts are per read.
        doing = ("no whole answer" if isinstance(exc, AnswerDeadline)
                 else "no answer" if isinstance(exc, httpx.ReadTimeout) else "the request could not be sent")
        why = f"{doing} within {plan.rollout_timeout_s:g} s (the task app is slow or overloaded)"
        hint = (f"Give each rollout more time with [rollout] timeout_s (now {plan.rollout_timeout_s:g}), or send "
                f"fewer at once with {fewer}.")
    elif isinstance(exc, httpx.PoolTimeout):
        why = f"no free connection to the task app within {plan.rollout_timeout_s:g} s (too many requests at once)"
        hint = f"Send fewer rollouts at once with {fewer}, or run fewer jobs on this backend at once."
    elif isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        why, hint = describe_http_error(exc), TASK_APP_CLOSED_HINT
    else:
        why, hint = describe_http_error(exc), TASK_APP_GONE_HINT
    return f"POST {url} failed {_tries(made)}: {why} ({where}). {hint}"
