"""Figure 11: admission control under load (docs/architecture.md#admission).

Sixteen demo jobs submitted at once to one embedded backend while two CPU-bound processes
(`python -c 'while 1: pass'`) take the machine's cores: jobs must wait, not fail. Before
admission control, 30 jobs on a busy 2-core machine: 22 failed within a minute, each rollout
timing out after 120 s that included its wait behind the others. The backend and the task app
run as a user runs them (bench_soak.Servers: `synth-tui backend` and `synth-tui taskapp`), with
the default limits. Reported: jobs failed (goal: 0), jobs that were queued (said so in their
create answer), the largest queue position, the wall time from the submit to the last job's
end, and the `jobs --no-tui` table while the queue was there.

``--quick``: 4 jobs of 2 iterations, no CPU burners.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from app.commands.demo import demo_payload, load_demo_config
from benchmarks.bench_soak import TERMINAL, Servers, _command
from benchmarks.common import REPO, Figure, at_most, child_main, median, say

BURNERS = 2
JOBS = 16


def _burners(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(count)]


def _jobs_table(servers: Servers, folder: Path) -> str:
    done = subprocess.run(_command("jobs", "--no-tui", "--sort", "status", "--backend", servers.backend_url,
                                   "--env-file", str(folder / ".env")),
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    return done.stdout


def run(quick: bool) -> list[Figure]:
    count, burners = (4, 0) if quick else (JOBS, BURNERS)
    config = load_demo_config()
    if quick:
        config["training"].update(num_epochs=1, iterations_per_epoch=2)
    with tempfile.TemporaryDirectory(prefix="synth-tui-bench-admission-") as tmp:
        folder = Path(tmp)
        servers = Servers(folder)
        hogs = _burners(burners)
        try:
            payload = demo_payload(config, servers.taskapp_url)
            started = time.monotonic()
            with servers.client() as client:
                with ThreadPoolExecutor(count) as pool:
                    answers = list(pool.map(lambda _: client.post("/rl/jobs", json=payload).raise_for_status()
                                            .json(), range(count)))
                submitted = time.monotonic() - started
                queued = [a for a in answers if a["status"] == "queued" and "queue_position" in a]
                deepest = max((a["queue_position"] for a in queued), default=0)
                table = _jobs_table(servers, folder)
                say(f"admission: {count} jobs submitted in {submitted:.1f} s, {len(queued)} queued "
                    f"(deepest #{deepest})")
                say("admission: `synth-tui jobs --no-tui --sort status` meanwhile:\n" + table)
                outcomes: dict[str, dict] = {}
                ids = [a["job_id"] for a in answers]
                while len(outcomes) < count:
                    if time.monotonic() - started > 3600:
                        raise TimeoutError(f"{count - len(outcomes)} job(s) still not ended after an hour")
                    for job_id in ids:
                        if job_id not in outcomes:
                            job = client.get(f"/rl/jobs/{job_id}").json()
                            if job["status"] in TERMINAL:
                                outcomes[job_id] = job
                    time.sleep(0.5)
                wall = time.monotonic() - started
                results = []
                for job_id in ids:
                    events = client.get(f"/rl/jobs/{job_id}/events", params={"limit": 1000}).json()["events"]
                    types = [e["type"] for e in events]
                    waited = next((e["data"]["waited_seconds"] for e in events if e["type"] == "rl.job.admitted"), 0.0)
                    evals = [p["value"] for p in client.get(f"/rl/jobs/{job_id}/metrics", params={"limit": 1000})
                             .json()["points"] if p["name"] == "eval.mean_score"]
                    results.append({"status": outcomes[job_id]["status"], "error": outcomes[job_id].get("error"),
                                    "queued_event": "rl.job.queued" in types, "waited": waited,
                                    "retries": (events[-1]["data"] if events else {}).get("retries", 0),
                                    "final_eval": evals[-1] if evals else None})
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
            servers.stop()
    failed = [r for r in results if r["status"] != "succeeded"]
    for result in failed:
        say(f"  {result['status']}: {result['error']}")
    finals = [r["final_eval"] for r in results if r["final_eval"] is not None]
    longest = max(r["waited"] for r in results)
    say(f"admission: {count - len(failed)}/{count} succeeded in {wall:.1f} s; "
        f"{sum(r['queued_event'] for r in results)} waited in the queue (longest {longest:.0f} s); "
        f"{sum(r['retries'] for r in results)} rollout retries")
    return [
        Figure(f"admission: {count} demo jobs at once, {burners} CPU burners: jobs failed", len(failed), "",
               goal="0", met=at_most(len(failed), 0), note=f"{count - len(failed)}/{count} succeeded"),
        Figure("  jobs queued at submit (deepest position)", len(queued), "", note=f"deepest #{deepest}"),
        Figure(f"  wall from submit to the last job's end, {count} jobs", wall, "s",
               note=f"{sum(r['retries'] for r in results)} rollout retries in all"),
        Figure("  longest wait in the queue", longest, "s"),
        Figure("  final eval.mean_score (median over jobs)", median(finals), ""),
    ]


if __name__ == "__main__":
    child_main("bench_admission", run)
