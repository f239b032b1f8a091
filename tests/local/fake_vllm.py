"""vLLM's server as TRL 1.16's VLLMClient speaks to it, on loopback: /health, /v1/models,
/v1/completions (token ids back, `token_id:<id>` logprob keys), /reset_prefix_cache.

What it answers is set per test: `FakeVllm.answer(prompt_ids) -> (completion ids, logprobs)`;
`FakeVllm.seen` records every request. The weight push (NCCL) is not served: it needs GPUs."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar


def fixed_answer(prompt: list[int]) -> tuple[list[int], list[float]]:
    return [7, 8, 2], [-0.5, -0.25, -0.125]


class FakeVllm(BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    answer: ClassVar[Callable[[list[int]], tuple[list[int], list[float]]]] = staticmethod(fixed_answer)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        pass

    def _reply(self, body: dict[str, Any], code: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append((self.path, {}))
        self._reply({"data": [{"id": "tiny"}]} if self.path == "/v1/models" else {})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        self.seen.append((self.path, body))
        if self.path != "/v1/completions":
            return self._reply({"success": True})
        try:
            completion, logprobs = type(self).answer(body["prompt"][0])
        except Exception as exc:  # noqa: BLE001 - a test's answer that refuses: vLLM's error shape
            return self._reply({"error": {"message": str(exc)}}, 500)
        return self._reply({"choices": [{
            "prompt_token_ids": body["prompt"][0], "token_ids": completion,
            "logprobs": {"tokens": [f"token_id:{t}" for t in completion], "token_logprobs": logprobs,
                         "top_logprobs": [{f"token_id:{t}": lp} for t, lp in zip(completion, logprobs,
                                                                                    strict=True)]}}]})


@contextmanager
def serving(answer: Callable[[list[int]], tuple[list[int], list[float]]] = fixed_answer) -> Iterator[str]:
    """The fake on a free loopback port; yields its base URL."""
    FakeVllm.seen = []
    FakeVllm.answer = staticmethod(answer)
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeVllm)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def trls_client(url: str, monkeypatch: Any) -> Any:
    """TRL's real VLLMClient on `url`, its vLLM-installed check lifted (vLLM needs a GPU).

    Its session retries a 500 three times with waits of 2, 4 and 8 s (urllib3's Retry): a test
    of a server that fails a turn waited them out, about 10 s. The same retries here, with
    waits of milliseconds."""
    from trl.generation import vllm_client

    monkeypatch.setattr(vllm_client, "is_vllm_available", lambda *a, **k: True)
    client = vllm_client.VLLMClient(base_url=url, connection_timeout=5)
    for adapter in client.session.adapters.values():
        adapter.max_retries = adapter.max_retries.new(backoff_factor=0.001)
    return client
