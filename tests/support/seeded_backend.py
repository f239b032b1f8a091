"""An embedded backend on a loopback port whose database holds finished jobs written beforehand:
a job list to read without training anything (the jobs view's tests)."""

from __future__ import annotations

from pathlib import Path

from app.commands.demo import demo_payload, load_demo_config
from app.local.servers import ServerHandle, start_backend
from app.local.state.store import Store
from support.secrets_for_tests import random_key

API_KEY = random_key("sk_test_", 24)
STATUSES = ("succeeded", "failed", "cancelled")


def seed_jobs(db: Path, count: int) -> list[str]:
    """``count`` finished jobs (job_seed000 the oldest), each with three steps of train.mean_score
    (its last: 0.3 + i/100) and train.loss; the ids newest first, as the backend lists them."""
    store = Store(db)
    try:
        payload = demo_payload(load_demo_config(), "http://127.0.0.1:9/")
        for i in range(count):
            job_id = f"job_seed{i:03d}"
            store.create_job(job_id, payload, f"hash{i}", None)
            store.set_running(job_id)
            store.finish_job(job_id, STATUSES[i % 3], event_type="rl.job.completed", message="done")
            for step in (1, 2, 3):
                store.add_metrics(job_id, step, [{"name": "train.mean_score", "value": round(0.1 * step + i / 100, 4)},
                                                 {"name": "train.loss", "value": 1.0}])
    finally:
        store.close()
    return [f"job_seed{i:03d}" for i in reversed(range(count))]


def start_seeded_backend(db: Path, count: int) -> tuple[ServerHandle, list[str]]:
    ids = seed_jobs(db, count)
    return start_backend(api_key=API_KEY, db_path=db, env_api_keys=[]), ids
