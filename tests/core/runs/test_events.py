"""The embedded backend's policy event read as the dashboard's badge (app/core/runs/events.py)."""

from __future__ import annotations

from typing import Any

from app.core.api.wire import JobEvent
from app.core.runs.events import policy_badge


def _badge(**data: Any) -> tuple[str, bool] | None:
    return policy_badge([JobEvent(seq=1, type="rl.train.policy", message="", data=data)])


def test_the_badge_says_when_the_next_steps_rollouts_play_during_the_update():
    """Issue 40: `[training] async_generation` shows beside the policy's kind in the job header
    (widgets/job_header.py); without it, and for a stand-in, the badge is as before."""
    assert _badge(policy="lm", stand_in=False) == ("lm", False)
    assert _badge(policy="lm", stand_in=False, async_generation=True) == ("lm async", False)
    assert _badge(policy="lm", stand_in=False, world_size=2, async_generation=True) == ("lm × 2 async", False)
    assert _badge(policy="lm", stand_in=False, async_generation=False) == ("lm", False)
    stand_in = _badge(policy="tabular", label="tabular stand-in", stand_in=True, async_generation=True)
    assert stand_in == ("tabular stand-in", True)
