"""TRL's private names the embedded backend relies on, in one place. Written against TRL 1.16.0.

Nothing here imports TRL: each function takes the TRL object it works on.
tests/compat/test_trl_names.py fails, naming the version this was written against, when TRL changes
or removes one of them.
"""

from __future__ import annotations

from typing import Any

WRITTEN_FOR = "TRL 1.16.0"


def mark_weights_synced(trainer: Any) -> None:
    """Tell GRPOTrainer the generation server already has this step's weights, so its own sync
    for the step is skipped: it syncs only while ``state.global_step`` differs from its
    ``_last_loaded_step``."""
    trainer._last_loaded_step = trainer.state.global_step


def synced_step(trainer: Any) -> int:
    """The step whose weights GRPOTrainer takes the generation server to have (``_last_loaded_step``)."""
    return int(trainer._last_loaded_step)
