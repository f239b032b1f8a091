"""Presenting events and metrics: the SDK's ``cli`` lines (docs/wire-contract.md#stream-lines) and the noise rule."""

from __future__ import annotations

import re
from datetime import datetime

from app.core.api.wire import JobEvent, JobStatus, MetricPoint, shown_status
from app.core.runs.series import shown_number

NOISE_MARKERS = ("hatchet", "modal")

_MODEL_URL = re.compile(
    r"s3://[^\s\"']+?/([^/\s\"']+\.(?:tar\.gz|zip|pt|pth|safetensors|ckpt|bin))\b"
    r"|https?://[^\s\"']*(?:wasabi|s3)[^\s\"']*/([^/\s\"']+\.(?:tar\.gz|zip|pt|pth|safetensors|ckpt|bin))\b"
)


def is_noise(event: JobEvent) -> bool:
    """Hatchet/Modal infrastructure chatter.

    Differs from the SDK on purpose: it searches the type, the message *and* the JSON data,
    so any event whose data mentions a ``*.modal.run`` task URL vanishes too. We look at the
    type, where the infrastructure events say what they are.
    """
    kind = event.type.lower()
    return any(marker in kind for marker in NOISE_MARKERS)


def mask_model_urls(text: str) -> str:
    """S3/Wasabi model URLs are shown as ``s3://***/***/[<file>]``, as the SDK does."""
    return _MODEL_URL.sub(lambda m: f"s3://***/***/[{m.group(1) or m.group(2)}]", text)


def clock(now: datetime | None = None) -> str:
    return (now or datetime.now()).strftime("%H:%M:%S")


def status_line(status: JobStatus, now: datetime | None = None) -> str:
    # An embedded backend's queued job also says its place in the queue: status=queued #2.
    return f"[{clock(now)}] status={shown_status(status.status or 'unknown', status.queue_position)}"


def event_line(event: JobEvent, now: datetime | None = None) -> str:
    level = f" ({event.level})" if event.level else ""
    line = f"[{clock(now)}] [{event.seq}] {event.type}{level}: {mask_model_urls(event.message)}"
    return line.rstrip(": ")


def metric_line(point: MetricPoint, now: datetime | None = None) -> str:
    # As the events and the dashboard write it: a loss of 1.49e-08 never reads "0.0000".
    value = "nan" if point.value is None else shown_number(point.value)
    n = point.data.get("n")
    suffix = f" n={n}" if n is not None else ""
    return f"[{clock(now)}] [metric] {point.name}={value} (step={point.step}){suffix}"


POLICY_EVENT = "rl.train.policy"  # the embedded backend's: which policy trains (docs/embedded-policy.md)


def policy_badge(events: list[JobEvent]) -> tuple[str, bool] | None:
    """What trains the job, from the embedded backend's policy event: ("lm", False) when the
    model the config names is trained (("lm × 2", False) in 2 data-parallel processes; ("lm async",
    False) when its next step's rollouts play during the update, `[training] async_generation`);
    ("tabular stand-in", True) when a stand-in trains in its
    place; None when no event says (the hosted service sends none)."""
    for event in reversed(events):
        if event.type != POLICY_EVENT:
            continue
        stand_in = event.data.get("stand_in") is True
        kind, label = event.data.get("policy"), event.data.get("label")
        text = label if stand_in and isinstance(label, str) and label else kind
        world = event.data.get("world_size")
        if not stand_in and isinstance(text, str) and isinstance(world, int) and world > 1:
            text = f"{text} × {world}"  # data-parallel: "lm × 2"
        if not stand_in and isinstance(text, str) and event.data.get("async_generation") is True:
            text = f"{text} async"  # [training] async_generation: one step off-policy
        if isinstance(text, str) and text:
            return text[:40], stand_in
    return None


# The embedded backend's sign of life within a long step: `Step 1: 4/16 rollouts done`
# (docs/wire-contract.md#event-types). A step's or evaluation's own event ends what it said.
ROLLOUT_PROGRESS_EVENT = "rl.train.rollouts"
_PHASE_ENDS = ("rl.train.step", "rl.eval.summary")


def rollout_progress(events: list[JobEvent]) -> str | None:
    """What the latest of `events` says of the rollouts in flight: "step 1: 4/16 rollouts done"
    ("eval after step 1: …" for an evaluation), "" when a step, an evaluation or the job has
    ended since, None when these events say nothing of it."""
    for event in reversed(events):
        if event.type in _PHASE_ENDS or event.type.startswith("rl.job."):
            return ""
        if event.type == ROLLOUT_PROGRESS_EVENT:
            return _progress_words(event)
    return None


def _progress_words(event: JobEvent) -> str:
    step, done, total = (event.data.get(key) for key in ("step", "done", "total"))
    if not all(isinstance(n, int) and not isinstance(n, bool) for n in (step, done, total)):
        return event.message[:60]
    what = "eval after step" if event.data.get("phase") == "eval" else "step"
    return f"{what} {step}: {done}/{total} rollouts done"
