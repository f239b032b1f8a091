"""One rank of a data-parallel `lm` job: `python -m app.local.parallel.worker --rendezvous DIR`,
started N times by `accelerate launch` (launch.py).

A rank pins itself to its share of the cores, makes the process group (gloo on CPU) with our
timeout, loads the model into app/local/policies/lm/policy.py's LmPolicy with its share of the batch,
and serves the backend on a loopback port of its own (every call carries the job's token):
  POST /act     one chat turn of a correlation id this rank owns -> {message, call_id}
  POST /export  the token sequences of episodes another rank trains on (they leave this rank)
  POST /update  this rank's share of the step (its global positions) -> the step's logs
  POST /save, POST /load   a checkpoint folder, on every rank at once (save: a collective under
                           ZeRO-3/FSDP, rank 0 writes the weights; load answers the steps its
                           checkpoint had done)
  GET  /describe           rank 0's PolicyInfo
Then it writes `rank-<r>.json` {rank, pid, port, device, threads, backend}. An orphan guard ends
the rank when its launcher or the backend is gone. docs/design/data-parallel.md.
"""

from __future__ import annotations

import argparse
import datetime
import hmac
import json
import math
import os
import random
import shutil
import sys
import threading
import time
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from app.local.parallel.launch import (
    BACKEND_PID_ENV,
    HOST_ENV,
    LOOPBACK,
    MACHINE_ENV,
    SETTINGS_FILE,
    TOKEN_ENV,
    TOKEN_HEADER,
    alive,
    collective_timeout_s,
    machine_exit_file,
    per_device_batch,
    vllm_plan,
)
from app.local.policies.base import ActOptions, Episode, PolicyCannotAct, PolicySettings, write_json_atomically

MEMOS_KEPT = 16384  # turns of episodes in flight on this rank (an abandoned one is dropped oldest first)


def pin_to_share(local_rank: int, local_world: int) -> list[int]:
    """Pin this rank to its share of the cores (before torch sizes its thread pool on them):
    2 ranks on 2 cores get 1 each. Oversubscribed intra-op threads were 3x slower."""
    cores = sorted(os.sched_getaffinity(0))
    share = max(1, len(cores) // local_world)
    mine = cores[local_rank * share:(local_rank + 1) * share] or cores
    os.sched_setaffinity(0, set(mine))
    return mine


class AllreduceClock:
    """The time this rank's gradient all-reduces take in a step. A DDP communication hook wraps
    the default allreduce hook: each bucket's time runs from the hook's call (the bucket is
    ready) to its future's completion, so it counts the wait for the slower rank too; a
    step's figure is the sum over its buckets (they may overlap the backward pass)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.lock = threading.Lock()

    def hook(self, state: Any, bucket: Any) -> Any:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        started = time.perf_counter()
        future = default_hooks.allreduce_hook(state, bucket)

        def done(fut: Any) -> Any:
            with self.lock:
                self.seconds += time.perf_counter() - started
            return fut.value()

        return future.then(done)

    def take(self) -> float:
        with self.lock:
            seconds, self.seconds = self.seconds, 0.0
        return seconds

    def install(self, trainer: Any) -> None:
        """Registered as the training starts (the model is wrapped in DDP by then)."""
        from transformers import TrainerCallback

        clock = self

        def on_train_begin(callback: Any, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            from torch.nn.parallel import DistributedDataParallel

            def hook(state: Any, bucket: Any) -> Any:
                return clock.hook(state, bucket)

            # DDP checks a hook's annotations against its own types: these (strings) would fail.
            hook.__annotations__ = {}
            wrapped = trainer.model_wrapped
            if isinstance(wrapped, DistributedDataParallel):
                wrapped.register_comm_hook(None, hook)

        trainer.add_callback(type("AllreduceTiming", (TrainerCallback,), {"on_train_begin": on_train_begin})())


class Rank:
    """This rank's policy and the memos of the turns it answered (by call id)."""

    def __init__(self, rank: int, policy: Any, clock: AllreduceClock) -> None:
        self.rank = rank
        self.policy = policy
        self.clock = clock
        self.memos: OrderedDict[str, tuple[str, Any]] = OrderedDict()  # call id -> (cid, TurnMemo)

    def act(self, body: dict[str, Any]) -> dict[str, Any]:
        act = self.policy.act(body["messages"], body.get("tools"), body.get("tool_choice"), body["cid"],
                              random.Random(int(body["seed"])), ActOptions(**(body.get("options") or {})))
        self.memos[act.call_id] = (body["cid"], act.memo)
        while len(self.memos) > MEMOS_KEPT:
            self.memos.popitem(last=False)
        return {"message": act.message, "call_id": act.call_id,
                "usage": {"prompt_tokens": act.prompt_tokens, "completion_tokens": act.completion_tokens,
                          "finish_reason": act.finish_reason, "logprobs": act.logprobs}}

    def _take(self, calls: list[str]) -> list[Any]:
        return [memo for call in calls if (kept := self.memos.pop(call, None)) is not None for memo in [kept[1]]]

    def export(self, body: dict[str, Any]) -> dict[str, Any]:
        """An episode's sequence for another rank: up to its last used turn, with each turn's
        end, tokens, seconds, sampled tokens and entropy sum (None: unknown). It leaves this rank."""
        memos = self._take(list(body["calls"]))
        if not memos:
            return {"sequence": None}
        sequence = memos[-1].sequence
        mine = [m for m in memos if m.sequence is sequence]
        end = max(m.end for m in mine)
        for key in [k for k, v in self.policy.episodes.items() if v is sequence]:
            del self.policy.episodes[key]
        return {"sequence": {"ids": sequence.ids[:end], "mask": sequence.mask[:end],
                             "logprobs": sequence.logprobs[:end], "prompt_len": sequence.prompt_len,
                             "turns": [[m.end, m.tokens, m.seconds, m.sampled,
                                        m.entropy_sum if math.isfinite(m.entropy_sum) else None] for m in mine]}}

    def update(self, body: dict[str, Any]) -> dict[str, Any]:
        from app.local.policies.lm.acting import EpisodeSequence, TurnMemo

        episodes = []
        for item in body["episodes"]:
            shipped = item.get("sequence")
            if shipped:
                sequence = EpisodeSequence(list(shipped["ids"]), list(shipped["mask"]), list(shipped["logprobs"]),
                                            int(shipped["prompt_len"]), "")
                memos: list[Any] = [TurnMemo(sequence, int(e), int(t), float(s), int(n),
                                             math.nan if h is None else float(h)) for e, t, s, n, h in shipped["turns"]]
            else:
                memos = self._take(list(item.get("calls") or []))
            episodes.append(Episode(memos, float(item["score"])))
        if "zero_std" in body:  # the step's groups, which this rank's share does not show
            self.policy.zero_std_share = [bool(v) for v in body["zero_std"]]
            self.policy.step_learns = bool(body["learns"])
        self.clock.take()
        stats = self.policy.update([episodes])
        return {"loss": stats.loss, "entropy": stats.entropy, "extra": stats.extra, "events": stats.events,
                "allreduce_s": round(self.clock.take(), 4)}

    def save(self, body: dict[str, Any]) -> dict[str, Any]:
        self.policy.save(Path(body["folder"]))
        return {}

    def load(self, body: dict[str, Any]) -> dict[str, Any]:
        self.policy.load(Path(body["folder"]))
        return {"steps_done": self.policy.steps_done}  # the backend shows what each rank loaded

    def describe(self) -> dict[str, Any]:
        info = self.policy.describe()
        return {"kind": info.kind, "label": info.label, "message": info.message, "data": info.data}


class RankHandler(BaseHTTPRequestHandler):
    """The rank's loopback server: every call carries the job's token (TOKEN_HEADER)."""

    rank: Rank
    token: str

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass

    def _reply(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        if hmac.compare_digest(self.headers.get(TOKEN_HEADER, ""), self.token):
            return True
        self._reply(401, {"error": "this rank answers its backend only"})
        return False

    def do_GET(self) -> None:
        if self._authorized():
            self._route(lambda _body: self.rank.describe() if self.path == "/describe" else None, read=False)

    def do_POST(self) -> None:
        if self._authorized():
            rank = self.rank
            routes: dict[str, Any] = {"/act": rank.act, "/export": rank.export, "/update": rank.update,
                                      "/save": rank.save, "/load": rank.load}
            self._route(routes.get(self.path) or (lambda _body: None), read=True)

    def _route(self, route: Any, read: bool) -> None:
        try:
            length = int(self.headers.get("Content-Length", 0)) if read else 0
            answer = route(json.loads(self.rfile.read(length) or b"{}") if length else {})
            if answer is None:
                self._reply(404, {"error": f"no {self.command} {self.path}"})
            else:
                self._reply(200, answer)
        except PolicyCannotAct as exc:
            self._reply(422, {"cannot_act": str(exc)})
        except Exception as exc:  # noqa: BLE001 - the backend fails the job with it, naming the rank
            self._reply(500, {"error": f"{type(exc).__name__}: {str(exc)[:500]}"})


def _orphan_guard(rank: int, rendezvous: Path, machine: int) -> None:
    """torchrun starts each rank in a session of its own: a launcher (or backend) killed with
    SIGKILL would leave the ranks running. A rank whose launcher, backend (on another machine:
    its ranks host) or job folder is gone exits. When the backend is gone, the first rank of its
    machine to see it removes the job's rendezvous folder, which the backend that made it can no
    longer do (the launcher may stop the other ranks first); another machine's ranks leave it."""
    parent = os.getppid()
    backend = int(os.environ.get(BACKEND_PID_ENV, "0") or 0)

    def watch() -> None:
        while True:
            time.sleep(0.5)
            backend_gone = bool(backend) and not alive(backend)  # a killed, unreaped backend is gone
            if backend_gone or os.getppid() != parent or not rendezvous.is_dir():
                print(f"rank {rank}: the launcher, the backend or the job's folder is gone; exiting",
                      file=sys.stderr, flush=True)
                if backend_gone and machine == 0:
                    shutil.rmtree(rendezvous, ignore_errors=True)
                elif backend_gone:  # another machine's ranks host was killed: the backend names the machine
                    _say_host_gone(rendezvous, machine, backend)
                os._exit(3)

    threading.Thread(target=watch, name="orphan-guard", daemon=True).start()


def _say_host_gone(rendezvous: Path, machine: int, host_pid: int) -> None:
    """What the ranks host would have written when its ranks end (machine-K.exit.json), had it not
    been killed: without it the job failed quoting gloo's broken connection (docs/hardening.md#8)."""
    said = rendezvous / machine_exit_file(machine)
    if rendezvous.is_dir() and not said.exists():
        try:
            write_json_atomically(said, {"machine": machine, "exitcode": None, "cause": None,
                                         "why": f"its ranks host (pid {host_pid}) is gone"})
        except OSError:
            pass


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m app.local.parallel.worker")
    parser.add_argument("--rendezvous", required=True, type=Path)
    args = parser.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    token = os.environ.pop(TOKEN_ENV, "")
    if not token:
        raise SystemExit(f"{TOKEN_ENV} is not set: a rank serves only the backend that started it")
    machine = int(os.environ.get(MACHINE_ENV, "0") or 0)
    host = os.environ.get(HOST_ENV) or LOOPBACK  # another machine's rank serves where the backend reaches it
    _orphan_guard(rank, args.rendezvous, machine)
    mine = pin_to_share(local_rank, local_world)

    from accelerate import PartialState

    from app.local.policies.lm.policy import LmPolicy

    # The process group, made now with OUR timeout: on CPU, TrainingArguments does not pass
    # ddp_timeout to accelerate (its use_cpu branch drops it), so a rank whose peer hangs would
    # wait torch's default 30 minutes in a collective. Made first, the backend is known early.
    timeout = collective_timeout_s()
    state = PartialState(cpu=os.environ.get("ACCELERATE_USE_CPU") == "true",
                         timeout=datetime.timedelta(seconds=timeout))
    data = json.loads((args.rendezvous / SETTINGS_FILE).read_text(encoding="utf-8"))
    settings = PolicySettings(**data["settings"])
    policy = LmPolicy(settings, vllm=vllm_plan(data.get("vllm_server"), data.get("vllm_colocate")))
    policy.main_process = rank == 0  # writes the checkpoint's files; the others join its collectives
    policy.grpo_overrides = {"per_device_train_batch_size": per_device_batch(settings.batch_size,
                                                                             settings.group_size, world),
                             "ddp_timeout": timeout}
    clock = AllreduceClock()
    policy.trainer_hooks.append(clock.install)
    import torch

    handler = type("Handler", (RankHandler,), {"rank": Rank(rank, policy, clock), "token": token})
    server = ThreadingHTTPServer((host, 0), handler)
    info = {"rank": rank, "world_size": world, "pid": os.getpid(), "port": server.server_address[1],
            "host": host, "machine": machine,
            "device": str(policy.loaded.device), "threads": torch.get_num_threads(), "cores": mine,
            "backend": str(state.backend)}
    write_json_atomically(args.rendezvous / f"rank-{rank}.json", info)
    server.serve_forever()


if __name__ == "__main__":
    main()
