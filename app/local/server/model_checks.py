"""The model checks a backend runs (model_check.py): each in a daemon thread of its own, one per
key at a time, and the answers of finished ones kept. docs/wire-contract.md#model-verification.

Why a thread of its own, not asyncio.to_thread: the executor's threads are joined when the
event loop or the interpreter ends, so a check reading a large .gguf file held a stopping
backend (Ctrl+C) for a minute or more (issue 37). A daemon thread is never waited for; the
route waits for the check's future and for the backend's stop together (`wait_for_check`).

A key is the model as it is on disk (its resolved path, modification time and size; for a
folder, its entries' too), the template, the learning rate, the trainer mode and the backend's
trainer: a retry after a timeout answers from the check that went on, and a model changed on
disk is checked again.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

KEPT_ANSWERS = 64  # finished checks kept per backend, the oldest dropped first


class BackendStopping(Exception):
    """The backend began to stop while a request waited for its model check."""


def model_signature(model: str) -> Hashable:
    """The model as it is on disk now: a path's resolved form, modification time and size (a
    folder's entries too); the text itself for a Hugging Face id or a path that does not exist."""
    path = Path(model).expanduser()
    try:
        stat = path.stat()
        entries: tuple[tuple[str, int, int], ...] = ()
        if path.is_dir():
            entries = tuple(sorted((p.name, s.st_mtime_ns, s.st_size) for p in path.iterdir()
                                   for s in (p.stat(),)))
        return str(path.resolve()), stat.st_mtime_ns, stat.st_size, entries
    except OSError:  # not a path here (an id), or one that cannot be read: the check says which
        return model


def check_key(model: str, chat_template: str | None, learning_rate: float | None, trainer_mode: str | None,
              policy_kind: str) -> Hashable:
    return model_signature(model), chat_template, learning_rate, trainer_mode, policy_kind


class ModelChecks:
    """The checks running (one future per key) and the answers of finished ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[Hashable, Future[Any]] = {}
        self._answers: OrderedDict[Hashable, Any] = OrderedDict()

    def start(self, key: Hashable, work: Callable[[], Any], keep: Callable[[Any], bool]) -> Future[Any]:
        """The future of the check of `key`: a finished one's answer, the one running, or a new
        one in a daemon thread. `keep(answer)` says whether its answer may be reused (a model
        that was not found may be fetched before the next check)."""
        with self._lock:
            if key in self._answers:
                self._answers.move_to_end(key)
                done: Future[Any] = Future()
                done.set_result(self._answers[key])
                return done
            if key in self._running:
                return self._running[key]
            future: Future[Any] = Future()
            self._running[key] = future
        threading.Thread(target=self._run, args=(key, work, keep, future), name="model-check", daemon=True).start()
        return future

    def _run(self, key: Hashable, work: Callable[[], Any], keep: Callable[[Any], bool], future: Future[Any]) -> None:
        future.set_running_or_notify_cancel()
        try:
            answer = work()
        except BaseException as exc:  # noqa: BLE001 - the waiting route raises it (a 500 naming it)
            with self._lock:
                self._running.pop(key, None)
            future.set_exception(exc)
            return
        with self._lock:
            self._running.pop(key, None)
            if keep(answer):
                self._answers[key] = answer
                while len(self._answers) > KEPT_ANSWERS:
                    self._answers.popitem(last=False)
        future.set_result(answer)


async def wait_for_check(future: Future[Any], timeout: float, stopping: asyncio.Event | None) -> Any | None:
    """The check's answer; None when it did not finish within `timeout` seconds (it goes on);
    BackendStopping as soon as `stopping` is set. The future is never cancelled: other
    requests may wait for the same check."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def settle() -> None:
        if not done.done():
            done.set_result(None)

    def finished(_: Future[Any]) -> None:
        try:
            loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the loop has closed: nobody waits any more
            pass

    future.add_done_callback(finished)
    waiters: set[asyncio.Future[Any]] = {done}
    stop = asyncio.ensure_future(stopping.wait()) if stopping is not None else None
    if stop is not None:
        waiters.add(stop)
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if stop is not None:
            stop.cancel()
    if future.done():
        return future.result()
    if stopping is not None and stopping.is_set():
        raise BackendStopping
    return None
