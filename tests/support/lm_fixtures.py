"""Payloads for the `lm` policy's tests and benchmarks: jobs on the press task app
(app/local/taskapps/press.py) that train a model folder, such as the tiny model of
app/local/policies/lm/tiny_model.py (the `tiny_model` fixture)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from app.commands.demo import demo_payload, load_demo_config


def press_payload(task_url: str, model: Path, mode: str, *, steps: int, lr: float, seed: int = 3) -> dict[str, Any]:
    """A job on the press app training the tiny model. The client's validation knows only the
    hosted service's model ids, so the payload is built for one and then pointed at the folder
    (the backend takes any [model] base: docs/embedded-policy.md#the-lm-policy)."""
    config = copy.deepcopy(load_demo_config())
    config["model"].update(trainer_mode=mode)
    config["rollout"].update(env_name="press-button", max_turns=2, max_concurrent_rollouts=8)
    config["training"].update(num_epochs=1, iterations_per_epoch=steps, batch_size=2, group_size=8, max_turns=2,
                              learning_rate=lr, seed=seed)
    del config["evaluation"]
    payload = demo_payload(config, task_url)
    payload["data"]["base_model"] = payload["data"]["config"]["model"]["base"] = str(model)
    return payload
