"""Figure 7: ten demo jobs at once on one embedded backend, three rounds in a row.

The backend and the task app run as the user runs them (`synth-tui backend --env-file` and
`synth-tui taskapp --env-file`, separate processes on free loopback ports). Each round creates
10 jobs of the demo config at once and waits for all of them. Before the hardening work, 3 to 4
of 10 failed with a dropped connection on a rollout hop. Reported: jobs that succeeded (goal:
all), the round's wall time against one job alone measured in the same run (the baseline), the
retries the trainer needed, and the median final eval score.

``--quick``: one round of 3 jobs of 2 iterations.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from app.commands.demo import demo_payload, load_demo_config
from benchmarks.common import REPO, Figure, at_most, child_main, median, say

TERMINAL = {"succeeded", "failed", "cancelled"}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _command(*args: str) -> list[str]:
    script = Path(sys.executable).with_name("synth-tui")
    return [str(script) if script.exists() else sys.executable, *([] if script.exists() else ["-m", "app.cli"]), *args]


class Servers:
    """The backend and the task app as two `synth-tui` processes, keys in a 0600 .env; each
    process's stderr in a file of `folder` (log_tail). `backend_args`, `taskapp_args`: more of
    their command lines (bench_rollout_phase: `--trainer lm`, `--game press`)."""

    def __init__(self, folder: Path, backend_args: Sequence[str] = (), taskapp_args: Sequence[str] = (),
                 up_within_s: float = 30.0) -> None:
        self.api_key, self.env_key = f"sk_soak_{secrets.token_hex(12)}", secrets.token_hex(32)
        env_file = folder / ".env"
        env_file.write_text(f"SYNTH_API_KEY={self.api_key}\nENVIRONMENT_API_KEY={self.env_key}\n")
        env_file.chmod(0o600)
        self.backend_port, self.taskapp_port = _free_port(), _free_port()
        env = {k: v for k, v in os.environ.items() if k not in ("SYNTH_API_KEY", "ENVIRONMENT_API_KEY")}
        env["SYNTH_TUI_STATE_DIR"] = str(folder / "state")
        # This checkout's code, not the one the venv's script was installed from (a worktree's run).
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])
        self.logs = [folder / "taskapp.log", folder / "backend.log"]
        taskapp = _command("taskapp", "--port", str(self.taskapp_port), "--env-file", str(env_file), *taskapp_args)
        backend = _command("backend", "--port", str(self.backend_port), "--env-file", str(env_file),
                           "--db", str(folder / "soak.sqlite3"), *backend_args)
        self.procs = []
        for command, log in zip((taskapp, backend), self.logs, strict=True):
            with log.open("wb") as err:
                self.procs.append(subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=err))
        self.backend_url = f"http://127.0.0.1:{self.backend_port}"
        self.taskapp_url = f"http://127.0.0.1:{self.taskapp_port}"
        self._wait_until_up(up_within_s)

    def _wait_until_up(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for url in (self.taskapp_url + "/", self.backend_url + "/api/health"):
            while True:
                try:
                    if httpx.get(url, timeout=1.0).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                    tail = self.log_tail()
                    self.stop()
                    raise RuntimeError(f"{url} did not come up\n{tail}")
                time.sleep(0.1)

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of each process's stderr, for a benchmark that failed."""
        return "\n".join(f"-- {log.name}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
                         for log in self.logs if log.exists())

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.backend_url + "/api", timeout=30.0,
                            headers={"Authorization": f"Bearer {self.api_key}"})

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def run_jobs(servers: Servers, payload: dict, count: int, timeout_s: float = 900.0) -> tuple[float, list[dict]]:
    """Create `count` jobs at once; (wall seconds until the last ended, each job's outcome)."""
    started = time.monotonic()
    with servers.client() as client:
        with ThreadPoolExecutor(count) as pool:
            job_ids = list(pool.map(lambda _: client.post("/rl/jobs", json=payload).raise_for_status()
                                    .json()["job_id"], range(count)))
        outcomes: dict[str, dict] = {}
        while len(outcomes) < count:
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"{count - len(outcomes)} job(s) still running after {timeout_s:.0f}s")
            for job_id in job_ids:
                if job_id not in outcomes:
                    job = client.get(f"/rl/jobs/{job_id}").json()
                    if job["status"] in TERMINAL:
                        outcomes[job_id] = job
            time.sleep(0.2)
        wall = time.monotonic() - started
        results = []
        for job_id, job in outcomes.items():
            events = client.get(f"/rl/jobs/{job_id}/events", params={"limit": 1000}).json()["events"]
            last = events[-1]["data"] if events else {}
            evals = [p["value"] for p in client.get(f"/rl/jobs/{job_id}/metrics", params={"limit": 1000})
                     .json()["points"] if p["name"] == "eval.mean_score"]
            results.append({"status": job["status"], "error": job.get("error"), "retries": last.get("retries", 0),
                            "final_eval": evals[-1] if evals else None})
    return wall, results


def run(quick: bool) -> list[Figure]:
    rounds, per_round = (1, 3) if quick else (3, 10)
    config = load_demo_config()
    if quick:
        config["training"].update(num_epochs=1, iterations_per_epoch=2)
    with tempfile.TemporaryDirectory(prefix="synth-tui-bench-soak-") as tmp:
        servers = Servers(Path(tmp))
        try:
            payload = demo_payload(config, servers.taskapp_url)
            alone, _ = run_jobs(servers, payload, 1)
            say(f"soak: one job alone {alone:.1f} s")
            walls, outcomes = [], []
            for number in range(rounds):
                wall, results = run_jobs(servers, payload, per_round)
                walls.append(wall)
                outcomes += results
                failed = [r for r in results if r["status"] != "succeeded"]
                say(f"soak: round {number + 1}: {per_round - len(failed)}/{per_round} succeeded in {wall:.1f} s, "
                    f"{sum(r['retries'] for r in results)} retries")
                for result in failed:
                    say(f"  {result['status']}: {result['error']}")
        finally:
            servers.stop()
    succeeded = sum(r["status"] == "succeeded" for r in outcomes)
    total = len(outcomes)
    round_wall = median(walls)
    finals = [r["final_eval"] for r in outcomes if r["final_eval"] is not None]
    return [
        Figure(f"soak: {per_round} demo jobs at once on one backend, {rounds} rounds: jobs failed", total - succeeded,
               "", goal="0", met=at_most(total - succeeded, 0), note=f"{succeeded}/{total} succeeded"),
        Figure(f"  soak round wall, {per_round} jobs (median of {rounds})", round_wall, "s", baseline=alone,
               baseline_label="one job alone", samples=walls,
               note=f"{sum(r['retries'] for r in outcomes)} rollout retries in all"),
        Figure("  soak final eval.mean_score (median over jobs)", median(finals), ""),
    ]


if __name__ == "__main__":
    child_main("bench_soak", run)
