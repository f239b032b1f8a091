"""The embedded backend's verify routes: POST /api/rl/verify_task_app (every key the backend
holds, with every header style, on the task app's /health and /task_info) and
POST /api/rl/verify_model (can a job of this backend train the model; model_check.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx
from fastapi import APIRouter, HTTPException

from app.core.api.failures import describe_http_error, response_detail
from app.core.api.wire_answers import ModelCheckAnswer, VerifyAnswer
from app.core.redact import held_key_prefix, scrub_key_fragments
from app.local.server.api_schemas import BODY_ERRORS, error_responses
from app.local.server.backend_state import Backend, BackendState
from app.local.server.bodies import VerifyModelRequest, VerifyRequest
from app.local.server.model_check import check_model_bounded
from app.local.server.model_checks import BackendStopping
from app.local.training.answers import NOT_COMPRESSED, SMALL_ANSWER_BYTES, AnswerTooLarge, send_capped

VERIFY_TIMEOUT = httpx.Timeout(10.0, connect=5.0)
HEADER_STYLES: dict[str, Callable[[str], dict[str, str]]] = {
    "X-API-Key": lambda key: {"X-API-Key": key},
    "X-API-Keys": lambda key: {"X-API-Keys": key},
    "Authorization: Bearer": lambda key: {"Authorization": f"Bearer {key}"},
}

verify = APIRouter(prefix="/rl")  # under /api


@verify.post("/verify_task_app", response_model=VerifyAnswer, responses=error_responses(401, *BODY_ERRORS))
async def verify_task_app(body: VerifyRequest, b: Backend) -> dict[str, Any]:
    return await _verify(b, body.endpoint_base_url)


@verify.post("/verify_model", response_model=ModelCheckAnswer, responses=error_responses(401, *BODY_ERRORS))
async def verify_model(body: VerifyModelRequest, b: Backend) -> dict[str, Any]:
    """Can a job of this backend train the model, as named (docs/wire-contract.md#model-verification)?
    Answered within model_check.MODEL_CHECK_TIMEOUT_S, and at once (503) when the backend
    begins to stop; the weights are not loaded."""
    try:
        return await check_model_bounded(body.model.strip(), (body.chat_template or "").strip() or None,
                                         body.learning_rate, b.policy_kind, trainer_mode=body.trainer_mode,
                                         checks=b.model_checks, stopping=b.stopping)
    except BackendStopping:
        raise HTTPException(503, "The backend is stopping: the model check ends with it") from None


async def _verify(b: BackendState, url: str) -> dict[str, Any]:
    """Try every key the backend holds with every header style on /health and /task_info."""
    if not b.env_api_keys:
        return {"any_ok": False, "endpoint_base_url": url, "candidates_first15": [], "attempts": [],
                "detail": "The embedded backend holds no ENVIRONMENT_API_KEY to try; start it with the key "
                          "the task app expects"}
    base = url.rstrip("/")

    async def attempt(endpoint: str, index: int, key: str, style: str) -> dict[str, Any]:
        started = time.perf_counter()
        result: dict[str, Any] = {"endpoint": endpoint, "header": style, "key_index": index,
                                  "key_prefix": held_key_prefix(key)}
        try:
            # Read up to SMALL_ANSWER_BYTES: a status and a detail are all that is kept (app/local/training/answers.py).
            request = b.http.build_request("GET", base + endpoint, timeout=VERIFY_TIMEOUT,
                                           headers={**HEADER_STYLES[style](key), **NOT_COMPRESSED})
            resp = await send_capped(b.http, request, SMALL_ANSWER_BYTES)
            result.update(status=resp.status_code, ok=resp.status_code == 200, error=None)
            if resp.status_code != 200:
                # A foreign task app may echo part of the key it was sent: never relay that.
                result["detail"] = scrub_key_fragments(response_detail(resp, 200), b.env_api_keys)
        except httpx.HTTPError as exc:
            result.update(status=None, ok=False, error=f"{type(exc).__name__}: {describe_http_error(exc)}")
        except AnswerTooLarge as exc:
            result.update(status=None, ok=False, error=f"the answer {exc.words()}")
        result["latency_ms"] = round((time.perf_counter() - started) * 1000, 1)
        return result

    combos = [(index, key, style) for index, key in enumerate(b.env_api_keys) for style in HEADER_STYLES]
    attempts = await asyncio.gather(
        *(attempt(endpoint, *combo) for combo in combos for endpoint in ("/health", "/task_info"))
    )
    # A combination passes when both endpoints answered 200 to the same key and header.
    passing = {(a["key_index"], a["header"]) for a in attempts if a["ok"] and a["endpoint"] == "/health"}
    passing &= {(a["key_index"], a["header"]) for a in attempts if a["ok"] and a["endpoint"] == "/task_info"}
    return {"any_ok": bool(passing), "endpoint_base_url": url,
            "candidates_first15": [held_key_prefix(k) for k in b.env_api_keys], "attempts": attempts}

