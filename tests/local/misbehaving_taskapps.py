"""Task apps that misbehave in one named way each, for the tests of what the rollout hop says
(training/test_local_rollout_hop.py): real loopback servers, started with `with ...() as server:`.

- `huge_answer_taskapp`: answers /rollout (and /health, /task_info, /openapi.json) with valid
  JSON of `size` bytes, made as it is sent
  (one chunk, sent again and again: the app never holds the answer), with or without a
  Content-Length.
- `hanging_up_taskapp`: accepts each connection and closes it without a byte of answer.
- `policy_shy_taskapp`: plays its rollouts without calling the policy at all (or, with
  `call_every=2`, in every other rollout only) and scores a constant.
- `history_editing_taskapp`: rewrites its first turn's system message before its second turn,
  so each episode's sequence restarts (the `lm` policy's tests).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

from app.local.servers import ServerHandle, _bind
from app.local.taskapps.kit import add_rollout_route, ask_policy, base_taskapp, chat_url, rollout_response

CHUNK = 1 << 20


def huge_answer_taskapp(size: int, *, declare_length: bool) -> ServerHandle:
    """Every answer huge: POST /rollout, and GET /health, /task_info and /openapi.json."""
    head = b'{"metrics": {"mean_return": 1.0, "num_steps": 1}, "junk": "'
    tail = b'"}'
    filler = b"x" * CHUNK
    app = FastAPI(openapi_url=None)

    @app.post("/rollout")
    @app.get("/health")
    @app.get("/task_info")
    @app.get("/openapi.json")
    async def rollout(request: Request) -> StreamingResponse:
        async def body() -> Any:
            yield head
            left = size - len(head) - len(tail)
            while left > 0:
                if await request.is_disconnected():  # the reader hung up: stop making it
                    return
                piece = filler if left >= CHUNK else filler[:left]
                left -= len(piece)
                yield piece
            yield tail

        headers = {"Content-Length": str(size)} if declare_length else {}
        return StreamingResponse(body(), media_type="application/json", headers=headers)

    return ServerHandle("huge-answer task app", app, _bind("127.0.0.1", 0)).start("/docs")  # 404: it answers


@contextmanager
def hanging_up_taskapp() -> Iterator[str]:
    """The URL of a server that reads each request and closes the connection unanswered."""
    listener = _bind("127.0.0.1", 0)
    listener.listen(64)
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                conn.settimeout(2)
                try:
                    conn.recv(65536)
                except OSError:
                    pass
                conn.shutdown(socket.SHUT_RDWR)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()


PICK_TOOL = {"type": "function", "function": {"name": "pick", "parameters": {
    "type": "object", "properties": {"n": {"enum": [1, 2, 3]}}, "required": ["n"]}}}


def policy_shy_taskapp(env_api_keys: Sequence[str], *, call_every: int = 0, score: float = 0.5) -> ServerHandle:
    """`call_every=0`: no rollout calls the policy; `call_every=k`: every k-th rollout does
    (one turn), the others do not."""
    app, authed = base_taskapp(app_id="policy-shy", title="a task app that does not ask the policy",
                               version="0.1.0", env_api_keys=env_api_keys)
    played = [0]

    @app.get("/task_info", dependencies=authed)
    async def task_info() -> dict[str, Any]:
        return {"taskset": {"id": "policy-shy"}}

    async def play(policy: Any, req: Any) -> dict[str, Any]:
        played[0] += 1
        tool_calls: list[Any] = []
        if call_every and played[0] % call_every == 0:
            body = {"model": "policy", "messages": [{"role": "user", "content": "Pick one."}],
                    "tools": [PICK_TOOL], "tool_choice": "required"}
            tool_calls = await ask_policy(policy, chat_url(req.policy.config.inference_url), body, "turn 1")
        steps = [{"obs": {"text": "pick"}, "tool_calls": tool_calls, "reward": score, "done": True,
                  "truncated": False, "info": {}}]
        return rollout_response(req, env_id=f"policy-shy:{req.env.seed}", steps=steps, score=score,
                                final={"observation": {"text": "done"}, "reward": score}, details={},
                                system_prompt="")

    add_rollout_route(app, authed, "0.2", play)
    return ServerHandle("policy-shy task app", app, _bind("127.0.0.1", 0)).start("/docs")


def history_editing_taskapp(env_api_keys: Sequence[str]) -> ServerHandle:
    """Two turns whose second request rewrites the first one's system message (as a task app that
    re-serializes or trims its history does): every episode's sequence restarts at its second
    turn. Scores 1 when the first call picks 1, so groups differ."""
    app, authed = base_taskapp(app_id="history-editing", title="a task app that edits its history",
                               version="0.1.0", env_api_keys=env_api_keys)

    @app.get("/task_info", dependencies=authed)
    async def task_info() -> dict[str, Any]:
        return {"taskset": {"id": "history-editing"}}

    async def play(policy: Any, req: Any) -> dict[str, Any]:
        url = chat_url(req.policy.config.inference_url)
        messages: list[dict[str, Any]] = [{"role": "system", "content": "Pick a number."},
                                          {"role": "user", "content": "Pick one."}]
        steps, score = [], 0.0
        for turn in (1, 2):
            body = {"model": "policy", "messages": messages, "tools": [PICK_TOOL], "tool_choice": "required"}
            tool_calls = await ask_policy(policy, url, body, f"turn {turn}")
            if turn == 1:
                score = float('"n": 1' in str(tool_calls))
            steps.append({"obs": {"text": "pick"}, "tool_calls": tool_calls, "reward": score, "done": turn == 2,
                          "truncated": False, "info": {}})
            messages = [{"role": "system", "content": "Pick a number again."}, *messages[1:],
                        {"role": "assistant", "content": None, "tool_calls": tool_calls},
                        {"role": "tool", "tool_call_id": (tool_calls or [{}])[0].get("id", ""), "content": "Again."}]
        return rollout_response(req, env_id=f"history-editing:{req.env.seed}", steps=steps, score=score,
                                final={"observation": {"text": "done"}, "reward": score}, details={},
                                system_prompt="")

    add_rollout_route(app, authed, "0.2", play)
    return ServerHandle("history-editing task app", app, _bind("127.0.0.1", 0)).start("/docs")
