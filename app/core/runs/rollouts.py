"""The rollouts a backend kept for a job, read for the inspector and `synth-tui rollouts`
(docs/wire-contract.md#rollouts). No Textual.

Reading is tolerant: an item of a page that is not a usable rollout summary is skipped, a turn
with odd fields gets defaults, so a backend that sends something unexpected shows fewer rows
rather than ending the screen. A backend without the rollout routes (the hosted service today)
is named as such: RolloutsNotServed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from app.core.api.client import SynthClient
from app.core.api.errors import BadResponseError, NotFoundError, RejectedError
from app.core.errors import ExitCode, SynthTuiError

MAX_PAGES = 1_000
STALE_PAGES = 3  # pages in a row with no new rollout end a listing (a backend that ignores `after`)
MAX_ROLLOUTS = 100_000  # summaries read for one listing
ID_MAX_CHARS = 256
TEXT_MAX_CHARS = 20_000  # a turn's observation, as shown
SHORT_MAX_CHARS = 2_000  # an action, what was applied, a tool name
IMAGE_MAX_CHARS = 8 << 20


class RolloutsNotServed(SynthTuiError):
    """The backend answers for the job but has no rollouts to show (no rollout routes)."""

    exit_code = ExitCode.BACKEND


@dataclass(frozen=True)
class RolloutSummary:
    rollout_id: str
    step: int
    phase: str  # "train" or "eval"
    index: int
    seed: int | None
    reward: float
    turns: int
    created_at: str | None = None


@dataclass(frozen=True)
class RolloutTurn:
    index: int
    observation: str
    images: tuple[str, ...]  # data:image/... base64 URLs or http(s) URLs, as the task app sent them
    tools: tuple[str, ...]
    action: str  # e.g. 'move(direction="up")'
    applied: str | None
    reward: float | None
    done: bool
    images_omitted: int = 0  # too large, too many, or holding a fragment of a key
    tool: str | None = None


@dataclass(frozen=True)
class Rollout:
    summary: RolloutSummary
    turns: tuple[RolloutTurn, ...]
    turns_cut: int = 0  # turns past the backend's per-rollout bound, not kept


# -- tolerant reading -----------------------------------------------------------------------


def _int(value: Any, default: int | None = None) -> int | None:
    if isinstance(value, bool):
        return default
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return default


def finite_number(value: Any) -> float | None:
    """A real, finite number as a float (no bool, no NaN, no infinity), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _text(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else ("" if value is None else json.dumps(value, default=str))
    return text if len(text) <= limit else text[:limit] + "…"


def summary_from(item: Any) -> RolloutSummary | None:
    """A summary from one item of a page, or None when it is not usable (no id, step or reward)."""
    if not isinstance(item, Mapping):
        return None
    rollout_id = item.get("rollout_id", item.get("id"))
    step = _int(item.get("step"))
    reward = finite_number(item.get("reward", item.get("score")))
    if not isinstance(rollout_id, str) or not rollout_id or len(rollout_id) > ID_MAX_CHARS:
        return None
    if step is None or step < 0 or reward is None:
        return None
    phase = item.get("phase")
    phase = phase if isinstance(phase, str) and phase else "train"
    turns = _int(item.get("turns"), 0)
    created = item.get("created_at")
    return RolloutSummary(rollout_id=rollout_id, step=step, phase=_text(phase, 20), index=_int(item.get("index"), 0)
                          or 0, seed=_int(item.get("seed")), reward=reward, turns=max(turns or 0, 0),
                          created_at=created if isinstance(created, str) else None)


def action_text(tool: Any, arguments: Any) -> str:
    """What the policy chose, as a call: `move(direction="up")`; a plain answer as its text."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            pass
    if not isinstance(tool, str) or not tool:
        if isinstance(arguments, Mapping) and set(arguments) == {"content"}:
            return _text(arguments["content"], SHORT_MAX_CHARS)
        return _text(arguments, SHORT_MAX_CHARS) if arguments not in (None, {}) else ""
    if isinstance(arguments, Mapping):
        inner = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False, default=str)}" for k, v in arguments.items())
    else:
        inner = "" if arguments is None else _text(arguments, SHORT_MAX_CHARS)
    return _text(f"{tool}({inner})", SHORT_MAX_CHARS)


def turn_from(item: Any, position: int) -> RolloutTurn | None:
    if not isinstance(item, Mapping):
        return None
    images = item.get("images")
    tools = item.get("tools")
    action = item.get("action")
    if not isinstance(action, str):
        action = action_text(item.get("tool"), item.get("arguments"))
    applied = item.get("applied")
    tool = item.get("tool")
    return RolloutTurn(
        index=_int(item.get("index"), position) or position,
        observation=_text(item.get("observation"), TEXT_MAX_CHARS),
        images=tuple(i for i in images if isinstance(i, str) and len(i) <= IMAGE_MAX_CHARS)
        if isinstance(images, list) else (),
        tools=tuple(_text(t, SHORT_MAX_CHARS) for t in tools if isinstance(t, str)) if isinstance(tools, list) else (),
        action=_text(action, SHORT_MAX_CHARS),
        applied=None if applied is None else _text(applied, SHORT_MAX_CHARS),
        reward=finite_number(item.get("reward")),
        done=item.get("done") is True,
        images_omitted=max(_int(item.get("images_omitted"), 0) or 0, 0),
        tool=tool if isinstance(tool, str) else None,
    )


def rollout_from(body: Any, rollout_id: str) -> Rollout:
    """A whole rollout from the backend's answer; BadResponseError when it is not one."""
    if not isinstance(body, Mapping):
        raise BadResponseError(f"The backend's answer for rollout {rollout_id!r} is not a JSON object.", None)
    # The id asked for; a step or reward that cannot be read shows as 0 (the turns are what is wanted).
    fields = {**body, "rollout_id": rollout_id}
    step = _int(fields.get("step"))
    if step is None or step < 0:
        fields["step"] = 0
    if finite_number(fields.get("reward", fields.get("score"))) is None:
        fields["reward"] = 0.0
    summary = summary_from(fields)
    if summary is None:  # only an unusable id, which get_rollout checks before asking
        raise BadResponseError(f"The backend's answer for rollout {rollout_id!r} is not a rollout.", None)
    items: Any = body.get("trajectory")
    if not isinstance(items, list):
        items = body.get("turns")
    if not isinstance(items, list):
        items = []
    turns = tuple(t for t in (turn_from(item, n) for n, item in enumerate(items, 1)) if t is not None)
    if not isinstance(body.get("turns"), int):
        summary = RolloutSummary(**{**summary.__dict__, "turns": len(turns)})
    return Rollout(summary, turns, turns_cut=max(_int(body.get("turns_cut"), 0) or 0, 0))


def by_reward(summaries: Iterable[RolloutSummary]) -> list[RolloutSummary]:
    """Best first; equal rewards by step, phase and index."""
    return sorted(summaries, key=lambda s: (-s.reward, s.step, s.phase, s.index))


def rollout_steps(summaries: Iterable[RolloutSummary]) -> list[int]:
    """The steps that have rollouts, ascending."""
    return sorted({s.step for s in summaries})


# -- the calls ------------------------------------------------------------------------------


def _not_served(job_id: str) -> RolloutsNotServed:
    return RolloutsNotServed(
        f"This backend does not serve the rollouts of its jobs (job {job_id} is there, but "
        "GET .../jobs/{job_id}/rollouts is not).",
        "The embedded backend keeps them (`synth-tui backend`, `synth-tui demo`, --backend local); "
        "the hosted service does not offer them.")


async def list_rollouts(client: SynthClient, job_id: str, *, step: int | None = None,
                        phase: str | None = None) -> list[RolloutSummary]:
    """Every kept rollout of a job (all pages), best first. RolloutsNotServed when the backend
    has the job but no rollout routes; NotFoundError when it has no such job."""
    seen: dict[str, RolloutSummary] = {}
    after: str | None = None
    stale = 0
    for _ in range(MAX_PAGES):
        try:
            body = await client.rollouts_page(job_id, step=step, phase=phase, after=after)
        except NotFoundError:
            if after is None:
                await client.get_job(job_id)  # raises NotFoundError for a job the backend does not know
                raise _not_served(job_id) from None
            raise
        except RejectedError as exc:
            if exc.status in (405, 501):
                raise _not_served(job_id) from None
            raise
        page = body if isinstance(body, Mapping) else {"rollouts": body}
        items = page.get("rollouts")
        items = items if isinstance(items, list) else []
        fresh = 0
        for item in items:
            summary = summary_from(item)
            if summary is not None and summary.rollout_id not in seen:
                seen[summary.rollout_id] = summary
                fresh += 1
        stale = 0 if fresh else stale + 1
        cursor = page.get("next_after")
        if (stale >= STALE_PAGES or not isinstance(cursor, str) or not cursor or cursor == after
                or len(seen) >= MAX_ROLLOUTS):
            break
        after = cursor
    return by_reward(seen.values())


async def get_rollout(client: SynthClient, job_id: str, rollout_id: str) -> Rollout:
    """One kept rollout with its turns."""
    if not rollout_id or len(rollout_id) > ID_MAX_CHARS or not rollout_id.isprintable():
        raise SynthTuiError(f"{rollout_id[:40]!r} is not a rollout id (`synth-tui rollouts {job_id}` lists them).")
    try:
        body = await client.rollout(job_id, rollout_id)
    except NotFoundError as exc:
        raise NotFoundError(
            f"Rollout {rollout_id!r} of job {job_id} is not on this backend: it was never kept, or was dropped "
            "to keep the job's rollouts within their size cap, or the backend does not serve rollouts.",
            f"`synth-tui rollouts {job_id}` lists the rollouts it has.", status=exc.status, body=exc.body) from None
    return rollout_from(body, rollout_id)
