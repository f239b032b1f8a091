"""The model a payload names, as the backend's model check (POST /rl/verify_model) is asked
about it: read from the payload the session prepared, by the session and the verification screen.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class AskedModel:
    """The model a payload names, as the backend's model check is asked about it."""

    model: str
    is_base: bool  # data.base_model (a base id), not data.model (which may be fine-tuned)
    chat_template: str | None = None
    learning_rate: float | None = None
    trainer_mode: str | None = None  # "full" or "lora"; the backend's trainer says which it knows


def asked_model(payload: Mapping[str, Any]) -> AskedModel:
    """The model, template and learning rate the payload sends (read tolerantly: a payload is
    built by this client, but a saved one may be edited)."""
    def table(value: Any) -> Mapping[str, Any]:
        return value if isinstance(value, Mapping) else {}

    data = table(payload.get("data"))
    config = table(data.get("config"))
    templates = [table(config.get(name)).get("chat_template") for name in ("model", "policy")]
    template = next((t.strip() for t in templates if isinstance(t, str) and t.strip()), None)
    modes = [table(config.get(name)).get("trainer_mode") for name in ("policy", "model")]
    mode = next((m.strip() for m in modes if isinstance(m, str) and m.strip()), None)
    rate = table(config.get("training")).get("learning_rate")
    learning_rate = float(rate) if isinstance(rate, (int, float)) and not isinstance(rate, bool) else None
    model = data.get("model") or data.get("base_model") or ""
    return AskedModel(str(model), not data.get("model"), template, learning_rate, mode)
