"""What the embedded backend keeps of a rollout for the inspector (docs/wire-contract.md#rollouts).

A turn is recorded when the task app calls the chat endpoint with the rollout's correlation id:
the observation the policy saw (the last user message's text and images), the tools offered,
and the answer chosen. When the task app's /rollout answer arrives, each kept turn is matched
to the step the answer reports for it (by the tool-call id the backend gave the answer, else
by position) for what the task app applied, the turn's reward and done.

Everything is bounded here, before anything is stored: text by TEXT_MAX_CHARS and friends,
images by count and size, turns per rollout by TURNS_MAX. Secrets are scrubbed from every
string just before a rollout is stored (`Scrubber`).

Which train rollouts are kept (`StepSample`): per step the best and the worst (by reward; ties
go to the lower index) and, when `inspect_per_step` allows more, rollouts at evenly spaced
indexes, so a step's typical episodes are there too. Every eval episode is kept. The SQLite
side (the per-job byte cap, oldest dropped first) is app/local/state/rollout_store.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from app.core.redact import PREFIX_CHARS, scrub_key_fragments
from app.core.runs.rollouts import finite_number

DEFAULT_PER_STEP = 4  # train rollouts kept per step: the best, the worst and 2 evenly spaced
MAX_PER_STEP = 256
DEFAULT_MAX_BYTES = 20 << 20  # per job, compressed bodies plus a fixed cost per row
MAX_MAX_BYTES = 1 << 30

TEXT_MAX_CHARS = 4_000  # an observation
ARGUMENTS_MAX_CHARS = 1_000  # the chosen arguments, as JSON
APPLIED_MAX_CHARS = 500
SCHEMA_MAX_CHARS = 1_000  # a larger argument schema is left out
TOOL_NAME_MAX_CHARS = 100
TOOLS_MAX = 32
IMAGES_MAX = 4  # per turn
IMAGE_MAX_CHARS = 512 * 1024  # a data URL of about 380 kB of image
URL_MAX_CHARS = 2_000
TURNS_MAX = 500  # per rollout; later turns are counted, not kept
# Per rollout in flight, what its kept turns may hold (mostly images) before later turns keep
# none: up to max_concurrent_rollouts rollouts are recorded at once.
ROLLOUT_MEMORY_CHARS = 4 << 20

PHASES = {"rl": "train", "eval": "eval"}


def bounded(text: str, limit: int) -> str:
    """`text` cut to about `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… [{len(text) - limit:,} more characters]"


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)


def _strict_json(value: Any) -> str | None:
    """`value` as JSON that any client can parse (no NaN or Infinity, which Python's parser
    lets into a request and the API's answers cannot carry), or None."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str, allow_nan=False)
    except (ValueError, RecursionError):
        return None


# -- a chat turn ----------------------------------------------------------------------------


def _image_url(part: dict[str, Any]) -> Any:
    url = part.get("image_url")
    if isinstance(url, dict):
        url = url.get("url")
    return url


def observation_of(messages: list[Any]) -> tuple[str, list[str], int]:
    """(text, images, images left out) of the last user message: OpenAI content parts of type
    text and image_url (or input_image); an image is a data:image URL or an http(s) URL."""
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        content = message.get("content")
        if not isinstance(content, list):
            return str(content or ""), [], 0
        texts: list[str] = []
        images: list[str] = []
        omitted = 0
        for part in content:
            if not isinstance(part, dict):
                continue
            if isinstance(part.get("text"), str):
                texts.append(part["text"])
            url = _image_url(part) if part.get("type") in ("image_url", "input_image") else None
            if url is None:
                continue
            usable = isinstance(url, str) and (
                (url.startswith("data:image/") and len(url) <= IMAGE_MAX_CHARS)
                or (url.startswith(("http://", "https://")) and len(url) <= URL_MAX_CHARS))
            if usable and len(images) < IMAGES_MAX:
                images.append(url)
            else:
                omitted += 1
        return "\n".join(texts), images, omitted
    return "", [], 0


def _tools(body: dict[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            names.append(bounded(function["name"], TOOL_NAME_MAX_CHARS))
    return names[:TOOLS_MAX]


def _schema(body: dict[str, Any], tool: str | None) -> Any:
    for entry in body.get("tools") or []:
        function = entry.get("function") if isinstance(entry, dict) else None
        if isinstance(function, dict) and function.get("name") == tool:
            text = _strict_json(function.get("parameters"))
            return function.get("parameters") if text is not None and len(text) <= SCHEMA_MAX_CHARS else None
    return None


def turn_chars(turn: dict[str, Any]) -> int:
    """About how much a recorded turn holds (its observation and images)."""
    return len(turn["observation"]) + sum(len(image) for image in turn["images"])


def within_budget(turn: dict[str, Any], used: int) -> dict[str, Any]:
    """The turn, its images left out (and counted) when keeping them would pass the rollout's
    ROLLOUT_MEMORY_CHARS."""
    if used + turn_chars(turn) <= ROLLOUT_MEMORY_CHARS or not turn["images"]:
        return turn
    return {**turn, "images": [], "images_omitted": turn["images_omitted"] + len(turn["images"])}


def chat_turn(body: dict[str, Any], tool: str | None, arguments: Any, call_id: str) -> dict[str, Any]:
    """The record of one chat answer (a checked chat body: bodies.ChatRequest validated it):
    the tool called (None for a text answer) with these arguments."""
    text, images, omitted = observation_of(body["messages"])
    args_text = _strict_json(arguments)
    kept_arguments: Any = arguments
    if args_text is None:
        kept_arguments = bounded(_compact(arguments), ARGUMENTS_MAX_CHARS)
    elif len(args_text) > ARGUMENTS_MAX_CHARS:
        kept_arguments = bounded(args_text, ARGUMENTS_MAX_CHARS)
    return {
        "call_id": call_id,
        "observation": bounded(text, TEXT_MAX_CHARS),
        "images": images,
        "images_omitted": omitted,
        "tools": _tools(body),
        "tool": tool,
        "arguments": kept_arguments,
        "arguments_schema": _schema(body, tool),
    }


# -- what the task app reports per step -----------------------------------------------------


@dataclass(frozen=True)
class StepReport:
    call_ids: frozenset[str]
    reward: float | None
    done: bool | None
    applied: str | None


def _at(value: Any, dotted: str) -> Any:
    for name in dotted.split("."):
        value = value.get(name) if isinstance(value, dict) else None
    return value


def _call_ids(calls: Any, key: str) -> set[str]:
    return {c[key] for c in calls if isinstance(c, dict) and isinstance(c.get(key), str)} if isinstance(
        calls, list) else set()


def describe_applied(info: Any) -> str | None:
    """What a step's `info` says was applied, as `key=value` pairs (its `meta` left out: the
    SDK's apps put the inference URL there)."""
    if not isinstance(info, dict):
        return None
    parts = [f"{key}={_compact(value)}" for key, value in list(info.items())[:20] if key != "meta"]
    return bounded(" ".join(parts), APPLIED_MAX_CHARS) if parts else None


def read_step_reports(answer: Any) -> list[StepReport]:
    """The per-step reports of a /rollout answer of either generation: 0.2's
    `trajectories[0].steps[]` (tool_calls, reward, done, info), else a v3 trace's events
    (`trace.event_history[]` or `trace.session_trace.event_history[]`: tool calls, reward or
    `reward_info.event_rewards[i]`, `metadata.done`, `metadata.info`). Odd shapes are skipped."""
    trajectories = _at(answer, "trajectories")
    if isinstance(trajectories, list):
        for trajectory in trajectories:
            steps = _at(trajectory, "steps")
            if isinstance(steps, list) and steps:
                return [StepReport(frozenset(_call_ids(s.get("tool_calls"), "id")), finite_number(s.get("reward")),
                                   s["done"] if isinstance(s.get("done"), bool) else None,
                                   describe_applied(s.get("info")))
                        for s in steps if isinstance(s, dict)]
    history = _at(answer, "trace.event_history")
    if not isinstance(history, list):
        history = _at(answer, "trace.session_trace.event_history")
    rewards = _at(answer, "reward_info.event_rewards")
    rewards = rewards if isinstance(rewards, list) else []
    reports: list[StepReport] = []
    for event in history if isinstance(history, list) else []:
        if not isinstance(event, dict) or not isinstance(event.get("llm_response"), dict):
            continue
        ids = _call_ids(_at(event, "llm_response.message.tool_calls"), "id")
        records = event.get("call_records")
        for record in records if isinstance(records, list) else []:
            if isinstance(record, dict):
                ids |= _call_ids(record.get("output_tool_calls"), "call_id")
        reward = finite_number(event.get("reward"))
        if reward is None and len(reports) < len(rewards):
            reward = finite_number(rewards[len(reports)])
        done = _at(event, "metadata.done")
        reports.append(StepReport(frozenset(ids), reward, done if isinstance(done, bool) else None,
                                  describe_applied(_at(event, "metadata.info"))))
    return reports


def match_turns(turns: list[dict[str, Any]], reports: list[StepReport], used: frozenset[str]) -> list[dict[str, Any]]:
    """The chat turns the episode used, each with its step's report. When the answer names its
    tool calls, turns it does not name (a retried chat call's spare answer) are left out and
    reports are matched by call id; otherwise turns and reports are matched in order."""
    kept = [t for t in turns if not used or t["call_id"] in used]
    by_id = {call_id: report for report in reports for call_id in report.call_ids}
    matched = []
    for position, turn in enumerate(kept):
        report = by_id.get(turn["call_id"]) if by_id else (reports[position] if position < len(reports) else None)
        record = {k: v for k, v in turn.items() if k != "call_id"}
        record.update(index=position + 1, applied=report.applied if report else None,
                      reward=report.reward if report else None, done=bool(report and report.done))
        matched.append(record)
    if matched and not any(t["done"] for t in matched) and not reports:
        matched[-1]["done"] = True  # the task app reported no steps: its episode ended after the last turn
    return matched


# -- a whole rollout ------------------------------------------------------------------------


@dataclass
class KeptRollout:
    """A finished rollout as it is stored (before scrubbing)."""

    rollout_id: str
    phase: str  # "train" or "eval"
    step: int
    index: int
    seed: int | None
    reward: float
    turns: int
    trajectory: list[dict[str, Any]]
    turns_cut: int = 0


@dataclass
class StepSample:
    """Which train rollouts of one step are kept, chosen as they finish: the best, the worst,
    and `per_step - 2` at evenly spaced indexes (see the module docstring)."""

    per_step: int
    total: int
    best: KeptRollout | None = None
    worst: KeptRollout | None = None
    spaced: dict[int, KeptRollout] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # per_step spaced candidates, not per_step - 2: the best or the worst is often one of
        # them, and the next one then fills its place.
        spaced = max(0, min(self.per_step, self.total))
        self.indexes = {i * self.total // spaced for i in range(spaced)} if spaced else set()

    def wants_turns(self) -> bool:
        return self.per_step > 0

    def offer(self, rollout: KeptRollout) -> None:
        if self.per_step <= 0:
            return
        if self.best is None or (rollout.reward, -rollout.index) > (self.best.reward, -self.best.index):
            self.best = rollout
        if self.per_step >= 2 and (self.worst is None
                                   or (rollout.reward, rollout.index) < (self.worst.reward, self.worst.index)):
            self.worst = rollout
        if rollout.index in self.indexes:
            self.spaced[rollout.index] = rollout

    def chosen(self) -> list[KeptRollout]:
        """At most per_step rollouts, by index."""
        picked = {r.index: r for r in (self.best, self.worst) if r is not None}
        for index in sorted(self.spaced):
            if len(picked) >= self.per_step:
                break
            picked.setdefault(index, self.spaced[index])
        return [picked[i] for i in sorted(picked)]


# -- secrets --------------------------------------------------------------------------------


class Scrubber:
    """Removes every run of more than 4 characters of a held key from the strings of a record
    (app.core.redact.scrub_key_fragments), testing first with cheap substring searches so the
    common case, no key at all, costs little."""

    def __init__(self, keys: Callable[[], Iterable[str]]) -> None:
        self._keys = keys
        self._cached: tuple[str, ...] = ()
        self._grams: frozenset[str] = frozenset()

    def _current(self) -> tuple[tuple[str, ...], frozenset[str]]:
        keys = tuple(k for k in self._keys() if k)
        if keys != self._cached:
            width = PREFIX_CHARS + 1
            self._grams = frozenset(k[i:i + width] for k in keys for i in range(len(k) - width + 1))
            self._cached = keys
        return self._cached, self._grams

    def text(self, text: str) -> str:
        keys, grams = self._current()
        if not any(g in text for g in grams):
            return text
        return scrub_key_fragments(text, keys)

    def value(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, dict):
            return {self.text(str(k)): self.value(v) for k, v in value.items()}
        return value

    def trajectory(self, turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Every turn scrubbed. One search of the whole trajectory's JSON first: when it holds
        no fragment of a key (almost always), the turns are returned as they are. JSON escapes
        only quotes, backslashes and control characters, so that search is exact unless a key
        holds one of those; then every string is searched on its own."""
        keys, grams = self._current()
        if not grams:
            return turns
        if not any(ch in '"\\' or ord(ch) < 0x20 for key in keys for ch in key):
            text = json.dumps(turns, ensure_ascii=False)
            if not any(g in text for g in grams):
                return turns
        return [self.turn(t) for t in turns]

    def turn(self, turn: dict[str, Any]) -> dict[str, Any]:
        """A turn scrubbed; an image or URL that held a fragment of a key is left out (the
        scrubbed text would not be an image any more), and counted."""
        images = [image for image in turn.get("images") or [] if self.text(image) == image]
        dropped = len(turn.get("images") or []) - len(images)
        clean: dict[str, Any] = self.value({k: v for k, v in turn.items() if k != "images"})
        clean["images"] = images
        clean["images_omitted"] = int(turn.get("images_omitted") or 0) + dropped
        return clean
