"""The `lm` policy data-parallel: N rank processes (app/local/parallel/worker.py, each an LmPolicy
with its share of the batch) launched through `accelerate launch` (app/local/parallel/launch.py),
behind the same Policy seam as the one-process LmPolicy, so the job runner and the chat endpoint
do not change.

- act: a correlation id is served by the rank that owns it. A training rollout's id names its
  place in the step (`rl-<step>-<index>-…`): it goes to the rank that trains that place
  (index // per-device batch), so each rank's share of the step is its own episodes. Any other
  id (evaluation, a caller outside the job) goes to the least-loaded rank, for life.
- update: every rank gets its share at once, by global position (rank r: samples r*P … r*P+P-1,
  which is how TRL splits the batch); an episode another rank played is shipped (its token
  lists). TRL gathers every rank's rewards for the group advantages; DDP averages the
  gradients. The logs are gathered: rank 0's are the step's.
- save and load: every rank at once (a save is a collective under ZeRO-3/FSDP: the weights are
  gathered, each rank writes its optimizer shards; rank 0 writes the rest).
- a rank that dies (or hangs in a collective) fails the job naming it; close stops every rank.
docs/design/data-parallel.md.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

import httpx

from app.core.api.transport import ssl_context
from app.local.parallel import launch as dp_launch
from app.local.parallel.launch import RankGroup, RankInfo, build_launch, per_device_batch
from app.local.policies.base import (
    Act,
    ActOptions,
    Episode,
    Parallel,
    PolicyCannotAct,
    PolicyFailed,
    PolicyInfo,
    PolicySettings,
    UpdateStats,
    reward_spread,
)
from app.local.policies.lm.model import ModelUnavailable, resolve

ACT_TIMEOUT_S = 900.0  # one turn, waiting for the rank's model (its training step may hold it)
STEP_TIMEOUT_S = 3600.0
HUNG_GRACE_S = 15.0  # after one rank failed a step, the others still silent this long are hung
OWNERS_KEPT = 65536  # correlation ids remembered (a forgotten training one still finds its rank by its place)
_TRAIN_ROLLOUT = re.compile(r":rl-\d+-(\d+)-[0-9a-f]+$")


@dataclass(frozen=True)
class RankMemo:
    """What an answer leaves for update: which rank holds its tokens, under which ids."""

    rank: int
    cid: str
    call_id: str


def owner_by_position(correlation_id: str, per_device: int, world: int) -> int | None:
    """The rank that trains a training rollout's place in its step, from its correlation id;
    None for any other id."""
    match = _TRAIN_ROLLOUT.search(correlation_id)
    return None if match is None else (int(match.group(1)) // per_device) % world


def shares(groups: list[list[Episode]], world: int) -> list[list[tuple[int, Episode]]]:
    """Each rank's share of a step, by global position: [(position, episode)]."""
    flat = [e for group in groups for e in group]
    per = len(flat) // world
    return [list(enumerate(flat))[r * per:(r + 1) * per] for r in range(world)]


class DistributedLmPolicy:
    """base.Policy over N ranks; memos are RankMemo."""

    kind: ClassVar[str] = "lm"

    def __init__(self, settings: PolicySettings, parallel: Parallel, stop: threading.Event | None = None) -> None:
        self.settings = settings
        self.world = parallel.processes
        self.per_device = self._checked(settings, parallel)
        resolve(settings.model)  # a missing model fails here, at once, not in N ranks
        # 0700; on several machines inside the shared folder, where their ranks hosts find it
        self.rendezvous = Path(tempfile.mkdtemp(prefix=dp_launch.FOLDER_PREFIX, dir=parallel.shared_dir))
        self.token = secrets.token_urlsafe(32)
        launch = build_launch(parallel, self.rendezvous)
        self.group = RankGroup(self.world, self.rendezvous, launch)
        if self.group.machines > 1:  # what the other machines' ranks hosts start their ranks from
            dp_launch.write_for_other_machines(self.rendezvous, launch, self.token)
            print(f"Warning: {dp_launch.open_port_warning(launch)}.", file=sys.stderr, flush=True)
        (self.rendezvous / dp_launch.SETTINGS_FILE).write_text(  # last: a ranks host starts once it is there
            json.dumps({"settings": asdict(settings), "vllm_server": parallel.vllm_server,
                        "vllm_colocate": parallel.vllm_colocate}), encoding="utf-8")
        self.loaded_steps: list[int] | None = None  # each rank's loaded checkpoint's steps (a resumed job)
        self.owners: dict[str, int] = {}
        self.load_by_rank: Counter[int] = Counter()
        self.restart_warned = False  # each rank warns at its first episode restart; the job, once
        self.lock = threading.Lock()
        self.closed = threading.Event()
        self.watcher: threading.Thread | None = None
        self.http = httpx.Client(headers={dp_launch.TOKEN_HEADER: self.token}, timeout=httpx.Timeout(30.0),
                                 limits=httpx.Limits(max_connections=64, max_keepalive_connections=32), trust_env=False,
                                 verify=ssl_context())
        self.pool = ThreadPoolExecutor(max_workers=max(self.world, 2), thread_name_prefix="dp-rank")
        try:
            self.group.start(self.token)
            self.ranks: list[RankInfo] = self.group.wait_ready(stop=stop)
            self.info = self._get(0, "/describe")
        except BaseException as exc:
            self.close()
            if isinstance(exc, dp_launch.LaunchError):
                raise ModelUnavailable(str(exc)) from None
            raise

    @staticmethod
    def _checked(settings: PolicySettings, parallel: Parallel) -> int:
        if refused := dp_launch.check_flags("lm", parallel.processes, None):  # the backend's own flags' check
            raise ModelUnavailable(refused)
        try:
            return per_device_batch(settings.batch_size, settings.group_size, parallel.processes)
        except ValueError as exc:
            raise ModelUnavailable(str(exc)) from None

    # -- talking to ranks ---------------------------------------------------------------

    def _url(self, rank: int, path: str) -> str:
        return f"http://{self.ranks[rank].host}:{self.ranks[rank].port}{path}"

    def _get(self, rank: int, path: str) -> dict[str, Any]:
        return self._answer(rank, path, lambda: self.http.get(self._url(rank, path)))

    def _post(self, rank: int, path: str, body: dict[str, Any], timeout: float = STEP_TIMEOUT_S) -> dict[str, Any]:
        return self._answer(rank, path, lambda: self.http.post(self._url(rank, path), json=body, timeout=timeout))

    def _answer(self, rank: int, path: str, call: Callable[[], httpx.Response]) -> dict[str, Any]:
        try:
            if self.closed.is_set():
                raise RuntimeError("closed")
            resp = call()
        except RuntimeError:  # closed (the job ended): a late chat turn of its task app
            raise PolicyFailed(f"the job's {self.world} rank processes are stopped", {}) from None
        except httpx.HTTPError as exc:
            raise self._failure(f"rank {rank} did not answer {path} ({type(exc).__name__})") from None
        try:
            body = resp.json()
        except ValueError:  # a rank that broke mid-answer
            body = None
        if not isinstance(body, dict):
            raise self._failure(f"rank {rank} answered {path} with HTTP {resp.status_code} and no JSON object")
        if resp.status_code == 422 and "cannot_act" in body:
            raise PolicyCannotAct(body["cannot_act"])
        if resp.status_code != 200:
            failed = (f"rank {rank} (pid {self.ranks[rank].pid}) failed {path}: "
                      f"{body.get('error', resp.status_code)}")
            if self.group.machines > 1:  # a collective broken by another machine: that machine is the cause
                raise self._failure(failed, wait_s=3.0)
            raise PolicyFailed(failed, {"rank": rank, "pid": self.ranks[rank].pid})
        result: dict[str, Any] = body
        return result

    def _failure(self, fallback: str, wait_s: float = 12.0) -> PolicyFailed:
        """What broke the group (a rank's death, diagnosed), or `fallback` if nothing did."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            found = self.group.check()
            if found is not None:
                return PolicyFailed(found[0], found[1])
            if self.closed.is_set():
                break
            time.sleep(0.2)
        return PolicyFailed(fallback, {})

    def watch(self, failed: Callable[[str, dict[str, Any]], None]) -> None:
        """Call `failed(message, data)` once if a rank dies (or hangs) while the job runs;
        then stop every rank at once: calls waiting on them end now, not at their timeouts."""

        def run() -> None:
            while not self.closed.wait(0.5):
                found = self.group.check()
                if found is not None:
                    if not self.closed.is_set():
                        failed(*found)
                    self.group.stop()
                    return

        self.watcher = threading.Thread(target=run, name="dp-watch", daemon=True)
        self.watcher.start()

    # -- the seam -------------------------------------------------------------------------

    def describe(self) -> PolicyInfo:
        data = dict(self.info["data"])
        backend = self.ranks[0].backend
        data.update(world_size=self.world, backend=backend, per_device_batch=self.per_device,
                    ranks=[{"rank": r.rank, "pid": r.pid, "device": r.device, "threads": r.threads,
                            **({} if self.group.machines == 1 else {"machine": r.machine, "host": r.host}),
                            **({} if self.loaded_steps is None else {"loaded_step": self.loaded_steps[r.rank]})}
                           for r in self.ranks])
        label = f"{self.info['label']} × {self.world}"
        return PolicyInfo(kind=self.kind, label=label, stand_in=False, data={**data, "label": label}, message=(
            f"{self.info['message']}; data-parallel in {self.world} processes"
            f"{f' on {self.group.machines} machines' if self.group.machines > 1 else ''} ({backend}, "
            f"{self.per_device} episodes per process per step)"))

    def _owner(self, correlation_id: str) -> int:
        with self.lock:
            owner = self.owners.get(correlation_id)
            if owner is None:
                owner = owner_by_position(correlation_id, self.per_device, self.world)
                if owner is None:
                    owner = min(range(self.world), key=lambda r: (self.load_by_rank[r], r))
                self.owners[correlation_id] = owner
                self.load_by_rank[owner] += 1
                while len(self.owners) > OWNERS_KEPT:  # evaluations' ids are never trained: oldest go
                    del self.owners[next(iter(self.owners))]
            return owner

    def act(self, messages: Sequence[dict[str, Any]], tools: Sequence[Any] | None, tool_choice: Any,
            correlation_id: str, rng: Any, options: ActOptions | None = None) -> Act:
        rank = self._owner(correlation_id)
        asked = options or ActOptions()  # the rank honours them; a disconnect does not reach it
        answer = self._post(rank, "/act", {"cid": correlation_id, "messages": list(messages),
                                           "tools": list(tools) if tools is not None else None,
                                           "tool_choice": tool_choice, "seed": rng.getrandbits(63),
                                           "options": {k: v for k, v in vars(asked).items() if k != "cancel"}},
                            timeout=ACT_TIMEOUT_S)
        return Act(answer["message"], answer["call_id"], RankMemo(rank, correlation_id, answer["call_id"]),
                   **answer.get("usage", {}))

    def _item(self, rank: int, episode: Episode) -> dict[str, Any]:
        """An episode as rank `rank` trains it: its calls if it holds them, else its tokens."""
        memos = [m for m in episode.memos if isinstance(m, RankMemo)]
        if not memos:
            return {"calls": [], "score": episode.score}
        last = memos[-1]  # after a restart, the last sequence holds the episode (app/local/policies/lm/grpo_thread.py)
        calls = [m.call_id for m in memos if m.cid == last.cid]
        if last.rank == rank:
            return {"calls": calls, "score": episode.score}
        exported = self._post(last.rank, "/export", {"calls": calls})
        return {"sequence": exported["sequence"], "score": episode.score}

    def update(self, groups: list[list[Episode]]) -> UpdateStats:
        started = time.perf_counter()
        # Each rank sees its share, not the groups: it is told which of its episodes' groups scored
        # all alike, and whether any group of the step did not (grpo_thread.py: the zero-std step).
        alike = [len({e.score for e in group}) <= 1 for group in groups for _ in group]
        bodies = [{"episodes": [self._item(r, e) for _, e in share], "zero_std": [alike[p] for p, _ in share],
                   "learns": not all(alike)} for r, share in enumerate(shares(groups, self.world))]
        futures = [self.pool.submit(self._post, r, "/update", body) for r, body in enumerate(bodies)]
        answers = self._gather(futures)
        for cid in {m.cid for g in groups for e in g for m in e.memos if isinstance(m, RankMemo)}:
            with self.lock:
                self.owners.pop(cid, None)
        merged = self._merged(answers, time.perf_counter() - started)
        # A rank sees its share as one list, not the step's groups: the std is the step's groups'.
        # (frac_reward_zero_std stays rank 0's TRL figure: TRL groups every rank's rewards.)
        merged.extra["reward_std"] = reward_spread(groups, bessel=True)["reward_std"]
        return merged

    def _gather(self, futures: list[Future[dict[str, Any]]]) -> list[dict[str, Any]]:
        """Every rank's answer; the first failure (a dead rank, diagnosed) fails the step, and
        ranks still silent HUNG_GRACE_S after another failed are named as hung."""
        done, pending = wait(futures, timeout=STEP_TIMEOUT_S, return_when=FIRST_EXCEPTION)
        failed = next((f for f in done if f.exception() is not None), None)
        if failed is None and not pending:
            return [f.result() for f in futures]
        if failed is not None and pending:
            _, still = wait(pending, timeout=HUNG_GRACE_S)
            found = self.group.check()
            if found is not None:
                raise PolicyFailed(*found)
            if still:
                rank = futures.index(next(iter(still)))
                info = self.ranks[rank]
                raise PolicyFailed(f"rank {rank} (pid {info.pid}) hung: it did not join the step's collectives "
                                   f"within {dp_launch.collective_timeout_s()} s",
                                   {"rank": rank, "pid": info.pid, "hung": True})
        if failed is not None:
            exc = failed.exception()
            assert exc is not None
            raise exc
        raise PolicyFailed(f"a GRPO step took more than {STEP_TIMEOUT_S:.0f} s", {})

    def _merged(self, answers: list[dict[str, Any]], seconds: float) -> UpdateStats:
        """One step's figures from every rank's: counts summed, the entropy weighted by the sampled
        tokens each rank measured it over, rates summed (the ranks generate side by side)."""
        first = answers[0]
        extra: dict[str, float] = {k: float(v) for k, v in first["extra"].items() if isinstance(v, int | float)}
        for key in ("completion_tokens", "sampled_tokens", "forced_tokens", "model_turns", "entropy_tokens",
                    "episode_restarts", "unfinished_calls"):  # each rank's own count for the step: summed
            extra[key] = float(sum(a["extra"].get(key, 0.0) for a in answers))
        entropy = float(first["entropy"])
        if extra.get("entropy_tokens"):
            entropy = sum(float(a["entropy"]) * float(a["extra"].get("entropy_tokens", 0.0))
                          for a in answers if a["extra"].get("entropy_tokens")) / extra["entropy_tokens"]
        rates = [float(a["extra"].get("generation_tokens_per_s", 0.0)) for a in answers]
        extra["generation_tokens_per_s"] = round(sum(rates), 2)  # the ranks generate side by side
        for rank, answer in enumerate(answers):
            extra[f"rank{rank}_generation_tokens_per_s"] = rates[rank]
            extra[f"rank{rank}_allreduce_s"] = float(answer.get("allreduce_s", 0.0))
        extra["allreduce_s"] = round(statistics.fmean(float(a.get("allreduce_s", 0.0)) for a in answers), 4)
        extra["generation_seconds"] = max(float(a["extra"].get("generation_seconds", 0.0)) for a in answers)
        extra["world_size"] = float(self.world)
        extra["step_seconds"] = round(seconds, 3)
        events = [e for a in answers for e in a.get("events") or [] if isinstance(e, dict)][:1]
        if self.restart_warned:
            events = []
        self.restart_warned = self.restart_warned or bool(events)
        return UpdateStats(loss=float(first["loss"]), entropy=entropy, extra=extra, events=events)

    def save(self, folder: Path) -> None:
        """Every rank into the same folder (the checkpoint store's temporary one), at once."""
        futures = [self.pool.submit(self._post, r, "/save", {"folder": str(folder)}) for r in range(self.world)]
        self._gather(futures)

    def load(self, folder: Path) -> None:
        futures = [self.pool.submit(self._post, r, "/load", {"folder": str(folder)}) for r in range(self.world)]
        self.loaded_steps = [int(a["steps_done"]) for a in self._gather(futures)]

    def close(self) -> None:
        """Stop every rank (SIGTERM to the launcher's session, SIGKILL after a grace) and
        forget the rendezvous folder. Idempotent; blocking."""
        if self.closed.is_set():
            return
        self.closed.set()
        try:
            self.group.stop()
        finally:
            self.http.close()
            self.pool.shutdown(wait=False, cancel_futures=True)
            shutil.rmtree(self.rendezvous, ignore_errors=True)
