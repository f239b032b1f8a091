"""[training] save_every and a checkpoint written off the step's record (issue 40 item 4,
docs/embedded-policy.md#checkpoints): observed through the order of what is stored, never time."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from app.local.servers import start_backend
from app.local.state.checkpoints import Checkpoints
from app.local.state.store import Store
from support.pilot_waits import poll_until

from ..conftest import API_KEY, ENV_KEY, api_client, create_job, events_of, payload, small_config, wait_terminal


def _config(**training: Any) -> dict[str, Any]:
    config = small_config(iterations_per_epoch=5, **training)
    del config["evaluation"]  # an evaluated step is saved before its evaluation: none here
    return config


def test_save_every_2_writes_steps_2_4_and_the_last_the_record_not_waiting(db_path: Path, taskapp: Any,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[int] = []
    gate = threading.Event()
    save = Checkpoints.save

    def held_save(self: Checkpoints, job_id: str, step: int, policy: Any) -> Path:
        written.append(step)
        if step == 2:
            assert gate.wait(60), "the test never let step 2's write go on"
        return save(self, job_id, step, policy)

    monkeypatch.setattr(Checkpoints, "save", held_save)
    with start_backend(api_key=API_KEY, db_path=db_path, env_api_keys=[ENV_KEY]) as backend, \
            api_client(backend) as api:
        job_id = create_job(api, payload(taskapp.url, _config(save_every=2)))
        step_2 = poll_until(lambda: next((e for e in events_of(api, job_id)
                                          if e["type"] == "rl.train.step" and e["data"]["step"] == 2), None),
                            timeout=60, what="step 2 recorded")
        # Step 2 is recorded (its event, its metrics) while its checkpoint is still being written:
        # the job resumes from the start until the write ends.
        assert step_2 and written == [2]
        # (what is recorded before it is the step-0 evaluation's, which saves no policy)
        recorded = Store(db_path).get_checkpoint(job_id)
        assert recorded is None or recorded["step"] == 0, recorded
        assert {p["step"] for p in api.get(f"/rl/jobs/{job_id}/metrics").json()["points"]} == {0, 1, 2}
        gate.set()
        job = wait_terminal(api, job_id, timeout=60)
    assert job["status"] == "succeeded", job
    assert written == [2, 4, 5]  # every 2 steps, and the last
    assert Store(db_path).get_checkpoint(job_id)["step"] == 5
    folder = Path(job["artifacts"]["model_path"])
    assert [p.name for p in folder.parent.iterdir()] == ["step-000005"]


def test_by_default_every_step_is_saved(db_path: Path, taskapp: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[int] = []
    save = Checkpoints.save

    def counted(self: Checkpoints, job_id: str, step: int, policy: Any) -> Path:
        written.append(step)
        return save(self, job_id, step, policy)

    monkeypatch.setattr(Checkpoints, "save", counted)
    with start_backend(api_key=API_KEY, db_path=db_path, env_api_keys=[ENV_KEY]) as backend, \
            api_client(backend) as api:
        job = wait_terminal(api, create_job(api, payload(taskapp.url, _config())), timeout=60)
    assert job["status"] == "succeeded", job
    assert written == [1, 2, 3, 4, 5]
