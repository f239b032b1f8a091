"""Each job's saved policy, one folder per step, in the backend's state folder.

    <folder of the SQLite file>/checkpoints/<job_id>/step-000003/policy.json

A step's folder is written under a temporary name and renamed into place, so it is whole or
absent. Which step counts is what the database says (Store.commit_step records the state that
resumes after it once the folder is written: with the step's events for the last step and an
evaluated one, after them otherwise); only then are the older folders removed. A backend
killed between the two finds the committed folder still there and an uncommitted newer one,
which is written again when that step is replayed. Every `[training] save_every` steps only
(app/local/training/steps.py). docs/embedded-policy.md#checkpoints.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path

from app.core.atomic import replace_durably
from app.local.policies.base import Policy


class Checkpoints:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def job_dir(self, job_id: str) -> Path:
        return self.root / job_id

    def step_dir(self, job_id: str, step: int) -> Path:
        return self.job_dir(job_id) / f"step-{step:06d}"

    def save(self, job_id: str, step: int, policy: Policy) -> Path:
        """Write the policy after `step` (blocking: call it in a thread)."""
        job_dir = self.job_dir(job_id)
        job_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.root.chmod(0o700)
        tmp = job_dir / f".tmp-{step:06d}-{secrets.token_hex(4)}"
        tmp.mkdir(mode=0o700)
        policy.save(tmp)
        _make_private(tmp)  # a policy's files (weights, tokenizer, JSON) follow the umask
        target = self.step_dir(job_id, step)
        if target.exists():  # written before a kill, never committed: this replay replaces it
            shutil.rmtree(target)
        replace_durably(tmp, target)  # then job_dir fsynced: the rename survives a crash
        return target

    def prune(self, job_id: str, keep: int) -> None:
        """Remove every folder of the job but the committed step's (blocking)."""
        job_dir = self.job_dir(job_id)
        if not job_dir.is_dir():
            return
        for child in job_dir.iterdir():
            if child.name != f"step-{keep:06d}":
                shutil.rmtree(child, ignore_errors=True)


def _make_private(folder: Path) -> None:
    """Folders 0700 and files 0600 under `folder`, before it is renamed into view: a saved
    policy is a user's fine-tuned model, readable by no one else on the machine."""
    for parent, dirs, files in os.walk(folder):
        os.chmod(parent, 0o700)
        for name in files:
            os.chmod(os.path.join(parent, name), 0o600)
        for name in dirs:
            os.chmod(os.path.join(parent, name), 0o700)
