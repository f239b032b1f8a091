"""The embedded backend's RL loop: rollouts from the task app, a GRPO-style update, events.

Each job runs as an asyncio task on the backend's event loop, so cancel is immediate and the
policy is served by the backend's own chat endpoint while the task app plays episodes.

Per iteration: `batch_size` groups, each of `group_size` rollouts on one seed (so
batch_size × group_size episodes; the hosted example config has episodes_per_batch =
batch_size × group_size), at most `rollout.max_concurrent_rollouts` in flight. Then one
policy-gradient step with group-relative advantages (policy.py). Evaluation: at step 0
(before any update), every `every_n_iters` iterations and after the last one, `instances`
episodes cycling over the eval seeds, in mode "eval", greedy; or k sampled episodes per
instance, scored pass@k, with `[evaluation] samples = k` (steps.py; docs/embedded-policy.md#evaluation).

Every rollout gets its own RNG seeded from (job seed, mode, step, index), so a job with
`[training] seed` set is reproducible whatever order the concurrent turns arrive in.

Before the first rollout the job learns which rollout contract generation the task app speaks
(0.2 or 0.4/0.5) from its /openapi.json, else from the refusal of a body in the other one
(rollout_contract.py, docs/rollout-contracts.md), and says so in an `rl.taskapp.contract` event.

This module is the job's life: start, resume, the wait for a slot, the policy's loading, cancel,
abort and shutdown, and the job's end. The rest of `JobRunner` is cut into its parts: the plan
(plan.py), the job's state (job_run.py), the step loop (steps.py, `StepLoop`) and the rollouts
with their retries and the contract learning (rollouts.py, `RolloutClient`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from app.core.runs.intervals import Interval, change, change_words
from app.local import policies
from app.local.policies import heap
from app.local.policies.base import (
    Parallel,
    Policy,
    PolicyFailed,
    PolicySettings,
    Watched,
    read_manifest,
)
from app.local.policies.lm.model import ModelUnavailable, learning_rate_warning
from app.local.server.model_check import loading_words
from app.local.state.checkpoints import Checkpoints
from app.local.state.journal import Journal
from app.local.training.admission import Admission
from app.local.training.job_run import JobRun, policy_settings
from app.local.training.plan import TrainingPlan
from app.local.training.rollout_contract import TaskAppError
from app.local.training.rollout_record import Scrubber
from app.local.training.steps import StepLoop


class PolicyUnavailable(Exception):
    """The job's policy cannot be loaded (say, the model is missing); the message says how to fix it."""


def _interval(pair: list[float] | None) -> Interval | None:
    return None if not pair else Interval(pair[0], pair[1], "")


def _load_saved(folder: Any, settings: PolicySettings, parallel: Parallel,
                stop: threading.Event | None = None) -> tuple[Policy, str | None]:
    return policies.load(folder, settings, parallel, stop), None


async def _in_own_thread(fn: Callable[[], None]) -> None:
    """Run `fn` in a thread of its own, not the default executor: chat turns blocked on a
    broken policy (a stopped rank) can fill that pool, and closing is what unblocks them."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()

    def finished() -> None:
        if not done.done():
            done.set_result(None)

    def run() -> None:
        try:
            fn()
        finally:
            try:
                loop.call_soon_threadsafe(finished)
            except RuntimeError:  # the loop closed meanwhile (the backend stopped): nobody waits
                pass

    threading.Thread(target=run, name="close-policy", daemon=True).start()
    await done


def _release_heap() -> None:
    heap.release_freed_memory()


def _close_when_loaded(loading: asyncio.Future[tuple[Policy, str | None]]) -> None:
    if not loading.cancelled() and loading.exception() is None:
        threading.Thread(target=loading.result()[0].close, name="close-late-policy", daemon=True).start()


class JobRunner(StepLoop):
    def __init__(self, journal: Journal, env_api_keys: Sequence[str], http: httpx.AsyncClient,
                 checkpoints: Checkpoints, other_secrets: Sequence[str] = (), *,
                 policy_kind: str = policies.DEFAULT_POLICY, infra_events: bool = False,
                 admission: Admission | None = None, parallel: Parallel = policies.ONE_PROCESS) -> None:
        self.journal = journal
        # How many jobs train at once and how many rollouts are in flight across them.
        self.admission = admission or Admission()
        self.env_api_keys = [k for k in env_api_keys if k]
        self.http = http
        self.checkpoints = checkpoints
        self.policy_kind = policy_kind
        self.parallel = parallel  # the lm policy's processes (`--processes N`): docs/design/data-parallel.md
        # The hosted service's hatchet.* and rl.runtime.modal.* chatter, imitated only when asked
        # (`synth-tui backend --infra-events`): here it would describe nothing real.
        self.infra_events = infra_events
        self.runs: dict[str, JobRun] = {}
        # Kept rollouts never hold a key: the task-app keys held now and the backend's own key.
        self.scrubber = Scrubber(lambda: [*self.env_api_keys, *other_secrets])

    def start(self, job_id: str, plan: TrainingPlan, api_base: str) -> None:
        """Train a job; `api_base` is the backend's `{base}/api/v1`, which the task app reaches."""
        loader = partial(policies.make_policy, self.policy_kind, policy_settings(job_id, plan), self.parallel)
        self._launch(JobRun(job_id, plan, api_base.rstrip("/"), None, loader))

    def resume(self, job_id: str, plan: TrainingPlan, api_base: str) -> None:
        """Go on with a job a previous run of the backend left queued or running: from the
        checkpoint of its last recorded step, or from the start when it recorded none. A job
        whose checkpoint cannot be read is failed, saying why."""
        store = self.journal.store
        state = store.get_checkpoint(job_id)
        settings = policy_settings(job_id, plan)
        policy: Policy | None = None
        loader: Callable[..., tuple[Policy, str | None]] | None = None
        kind: str | None = None
        try:
            if state is None or int(state["step"]) == 0:
                # No step recorded (at most the step-0 evaluation, which saves no policy): the
                # policy starts again from the beginning, as it was evaluated.
                loader = partial(policies.make_policy, self.policy_kind, settings, self.parallel)
            else:
                folder = self.checkpoints.step_dir(job_id, int(state["step"]))
                kind = read_manifest(folder)["kind"]
                if kind == "tabular":
                    policy = policies.load(folder, settings)
                else:  # a model: loaded in a thread as the job starts (_load_policy)
                    loader = partial(_load_saved, folder, settings, self.parallel)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            store.fail_interrupted(job_id, f"its checkpoint could not be read ({type(exc).__name__}: {exc})")
            return
        run = JobRun(job_id, plan, api_base.rstrip("/"), policy, loader)
        if kind is not None:
            run.lm = kind == "lm"
        job = store.get_job(job_id)
        if state is not None:
            run.restore(state)
        elif job is not None and job["status"] == "queued":
            self._launch(run)  # it never started: a plain start
            return
        run.resumed = state or {"step": 0}
        run.recorded_step = store.last_recorded_step(job_id)  # the steps after the checkpoint are replayed
        # Rollouts kept for what will be played again would show twice in the inspector.
        store.rollouts.forget_replayed(job_id, run.step, eval_too=run.eval_pending is not None or (
            run.step == 0 and not run.baseline_done))  # a step-0 evaluation cut short
        self._launch(run)

    def _launch(self, run: JobRun) -> None:
        self.runs[run.job_id] = run
        # Its place in the queue is taken now, in the order jobs are launched (admission.py).
        self.admission.enqueue(run.job_id, self._device_known(run))
        run.task = asyncio.get_running_loop().create_task(self._train(run), name=f"train-{run.job_id}")
        # Whatever ends the task (even a cancel before its first line ran) frees its slot.
        run.task.add_done_callback(partial(self._task_done, run.job_id))

    def _task_done(self, job_id: str, _task: asyncio.Task[None]) -> None:
        self.admission.release(job_id)

    async def cancel(self, job_id: str) -> None:
        run = self.runs.get(job_id)
        if run is not None and run.task is not None and not run.task.done():
            run.cancel_requested = True
            run.task.cancel()
            await asyncio.wait([run.task], timeout=1.0)
        # Also covers a task cancelled before its first line ran (no handler ever executed).
        self.runs.pop(job_id, None)
        self.journal.finish(job_id, "cancelled", "rl.job.cancelled", "Job cancelled by request")

    def abort(self, job_id: str, reason: str) -> None:
        """Fail a running job at once (say, the task app asks for what the policy cannot do)."""
        run = self.runs.get(job_id)
        if run is not None and run.task is not None and not run.task.done() and run.abort_reason is None:
            run.abort_reason = reason
            run.task.cancel()

    def stop_all(self) -> list[asyncio.Task[None]]:
        """Server shutdown: stop training without recording anything more, so the next start
        of the backend resumes these jobs from their last recorded step."""
        tasks = []
        for run in self.runs.values():
            if run.task is not None and not run.task.done():
                run.stopping = True
                run.task.cancel()
                tasks.append(run.task)
        return tasks

    # -- the loop -----------------------------------------------------------------------

    async def _train(self, run: JobRun) -> None:
        j, job_id = self.journal, run.job_id
        try:
            await self._run_job(run)
        except asyncio.CancelledError:
            if not self._end_cancelled(run):
                raise  # server shutdown: see stop_all
        except (TaskAppError, PolicyUnavailable, PolicyFailed) as exc:
            j.finish(job_id, "failed", "rl.job.failed", str(exc), level="error",
                     data={"step": run.step, **run.counters(), **getattr(exc, "data", {})}, error=str(exc))
        except Exception as exc:  # a bug here must still end the job, not leave it running
            message = f"Internal error in the embedded backend at step {run.step + 1}: {type(exc).__name__}: {exc}"
            j.finish(job_id, "failed", "rl.job.failed", message, level="error",
                     data={"step": run.step}, error=message)
        finally:
            self.runs.pop(job_id, None)
            try:  # a checkpoint being written is finished before the policy closes
                await asyncio.shield(self.checkpoint_written(run))
            except BaseException:  # noqa: BLE001 - the job has ended; the previous checkpoint is whole
                pass
            if run.policy is not None:
                try:  # the lm policy's training thread ends here, whatever ended the job
                    await asyncio.shield(_in_own_thread(run.policy.close))
                except BaseException:  # noqa: BLE001 - a second cancel while closing: the thread is a daemon
                    pass
                # The closed policy (a model, its trainer, its caches) collected and the freed heap
                # returned, so the next job does not start on this one's peak (policies/heap.py).
                run.policy = None
                try:
                    await asyncio.shield(_in_own_thread(_release_heap))
                except BaseException:  # noqa: BLE001 - as above: the memory is only given back later
                    pass

    async def _run_job(self, run: JobRun) -> None:
        """The job from its slot to its last step (or the steps a resumed job has left)."""
        j, job_id, plan = self.journal, run.job_id, run.plan
        await self._wait_for_slot(run)
        if run.resumed is None:
            if not j.set_running(job_id):
                return
            await self._load_policy(run)
            self._announce(run)
        else:
            await self._load_policy(run)
            self._announce_resume(run)
        if not self.env_api_keys:
            raise TaskAppError(
                "The embedded backend holds no ENVIRONMENT_API_KEY, so it cannot call the "
                "task app; restart it with the key the task app expects"
            )
        if not run.contract_announced:
            await self._learn_contract(run)
        if run.step == 0 and plan.eval_instances and not run.baseline_done:
            await self._evaluate_baseline(run)  # where the model started (steps.py)
        if run.eval_pending is not None:  # resumed between a step's training and its evaluation
            await self._evaluate_step(run, run.step, run.eval_pending)
        if plan.async_generation:
            await self._train_ahead(run)  # one step off-policy (steps.py)
        while run.step < plan.total_steps:
            await self._train_step(run, run.step + 1)
            if self.infra_events and run.step % 5 == 0:
                j.event(job_id, "hatchet.worker.heartbeat",
                        "Embedded stand-in for the Hatchet worker heartbeat", data={"step": run.step})
        if self.infra_events:
            j.event(job_id, "rl.runtime.modal.stopped", "In-process stand-in for the Modal runtime stopped")
        self._complete(run)

    def _end_cancelled(self, run: JobRun) -> bool:
        """End a job whose task was cancelled: aborted (failed) or cancelled by request. False
        when neither: the server is stopping, and the job stays for the next start."""
        j, job_id = self.journal, run.job_id
        if run.abort_reason is not None:
            j.finish(job_id, "failed", "rl.job.failed", run.abort_reason, level="error",
                     data={"step": run.step, **run.counters()}, error=run.abort_reason)
            return True
        if not run.cancel_requested:
            return False
        when = (f"during step {run.step + 1}/{run.plan.total_steps}" if run.admitted
                else "while it waited in the queue")
        j.finish(job_id, "cancelled", "rl.job.cancelled", f"Job cancelled by request {when}",
                 data={"step": run.step, **run.counters()})
        return True

    async def _wait_for_slot(self, run: JobRun) -> None:
        """Wait for one of the backend's job slots (and a device for an `lm` job), saying so
        in an event when the job has to wait and again when it starts (admission.py)."""
        admission, job_id = self.admission, run.job_id
        device = await self._needs_device(run)
        waited_since: float | None = None

        def waiting(ahead: int, for_device: bool) -> None:
            nonlocal waited_since
            waited_since = time.monotonic()
            if run.resumed is not None:  # a job left running waits again: it is queued meanwhile
                self.journal.store.requeue(job_id)
            place = "first in the queue" if ahead == 0 else f"{ahead} job{'s' * (ahead != 1)} ahead in the queue"
            why = admission.why_waiting(ahead, for_device)
            self.journal.event(job_id, "rl.job.queued", f"Waiting for a slot: {place}; {why}",
                               data={"queue_position": ahead + 1, "ahead": ahead, "max_jobs": admission.max_jobs,
                                     "running": admission.running, "waits_for_device": for_device})

        await admission.admit(job_id, device=device, on_wait=waiting)
        run.admitted = True
        if waited_since is not None:
            waited = time.monotonic() - waited_since
            run.started = time.monotonic()  # its counters' seconds count from now, not from the wait
            self.journal.event(job_id, "rl.job.admitted",
                               f"A slot is free after {waited:.0f} s in the queue: the job starts",
                               data={"waited_seconds": round(waited, 3), "max_jobs": admission.max_jobs})

    def _device_known(self, run: JobRun) -> bool | None:
        """Whether the job trains a language model (one per device), when that is known without
        looking for the model: from its checkpoint when resumed, else from the backend's
        --trainer; `auto` with the trainer extra installed: None (_needs_device looks)."""
        if run.policy is not None:
            return run.policy.kind == "lm"
        if run.lm is not None:
            return run.lm
        if self.policy_kind != "auto":
            return self.policy_kind == "lm"
        return False if policies.trainer_extra_missing() else None

    async def _needs_device(self, run: JobRun) -> bool:
        """_device_known, or for `auto` with the trainer extra: whether the model is here."""
        known = self._device_known(run)
        if known is not None:
            return known
        settings = policy_settings(run.job_id, run.plan)
        return await asyncio.to_thread(lambda: policies.lm_unavailable(settings) is None)

    async def _load_policy(self, run: JobRun) -> None:
        """The job's policy (the lm policy loads its model: seconds, in a thread). A model that
        cannot be had fails the job at once, saying how to get it; `auto` falling back to the
        stand-in says why in a warning event."""
        if run.policy is not None or run.loader is None:
            return
        if self.parallel.processes > 1:  # ranks take a while to start: the log says what it waits for
            self.journal.event(run.job_id, "rl.train.policy.starting", self._starting_ranks(), data={
                "processes": self.parallel.processes, "several_machines": bool(self.parallel.shared_dir)})
        loading_since = await self._announce_loading(run)
        stop = threading.Event()
        loading = asyncio.ensure_future(asyncio.to_thread(run.loader, stop=stop))
        try:
            policy, run.policy_warning = await asyncio.shield(loading)
        except asyncio.CancelledError:
            # The thread goes on loading: whatever it makes is closed (the ranks of a
            # data-parallel policy would otherwise outlive the job); ranks still starting stop now.
            stop.set()
            loading.add_done_callback(_close_when_loaded)
            raise
        except ModelUnavailable as exc:
            raise PolicyUnavailable(f"The policy cannot be loaded: {exc}") from None
        except (OSError, ValueError, KeyError, TypeError, RuntimeError, ImportError) as exc:
            raise PolicyUnavailable(f"The policy cannot be loaded ({type(exc).__name__}: {str(exc)[:300]})") from None
        run.policy = policy
        if loading_since is not None and policy.kind == "lm":
            seconds = time.monotonic() - loading_since
            self.journal.event(run.job_id, "rl.train.policy.loaded", f"Loaded {run.plan.model} in {seconds:.0f} s",
                               data={"model": run.plan.model, "seconds": round(seconds, 3)})
        if isinstance(policy, Watched):  # a rank that dies mid-job fails it at once, naming the rank
            loop = asyncio.get_running_loop()

            def broke(message: str, data: dict[str, Any]) -> None:
                loop.call_soon_threadsafe(self.policy_broke, run.job_id, message, data)

            policy.watch(broke)
        if run.policy_warning:
            self.journal.event(run.job_id, "rl.train.policy.fallback", run.policy_warning, level="warning",
                               data={"policy": policy.kind, "requested": self.policy_kind})

    async def _announce_loading(self, run: JobRun) -> float | None:
        """An event before a language model loads (seconds to minutes, in silence otherwise):
        which and how large; returns when it started, or None when no model is loaded."""
        if self.policy_kind == "tabular" or run.lm is False:
            return None
        settings = policy_settings(run.job_id, run.plan)
        found = await asyncio.to_thread(policies.lm_footprint, settings)
        if found is None:  # the stand-in trains (auto), or the load fails at once, saying why
            return None
        if not isinstance(found, Path):  # policies.DOWNLOAD
            self.journal.event(run.job_id, "rl.train.policy.loading",
                               f"Downloading {run.plan.model} into the Hugging Face cache, then loading it: the first "
                               "step waits for it", data={"model": run.plan.model, "path": None, "bytes": None})
            return time.monotonic()
        words, size = await asyncio.to_thread(loading_words, found)
        self.journal.event(run.job_id, "rl.train.policy.loading",
                           f"Loading {run.plan.model} ({words}): the first step waits for it",
                           data={"model": run.plan.model, "path": str(found), "bytes": size})
        return time.monotonic()

    def _starting_ranks(self) -> str:
        words = (f"Starting the {self.parallel.processes} rank processes (each imports torch and loads the model; "
                 "the first step waits for all of them)")
        if self.parallel.shared_dir:
            words += (f"; the other machines' ranks are started there by `synth-tui ranks-host --shared-dir "
                      f"{self.parallel.shared_dir} --machine-rank K`, which must be running on each")
        return words

    def policy_broke(self, job_id: str, message: str, data: dict[str, Any]) -> None:
        """The job's policy broke (a rank of a data-parallel policy died): an event, and the
        job fails with the message (once, whoever noticed first)."""
        run = self.runs.get(job_id)
        if run is None or run.task is None or run.task.done() or run.abort_reason:
            return
        self.journal.event(run.job_id, "rl.train.worker.failed", message, level="error", data=data)
        self.abort(run.job_id, message)

    def _complete(self, run: JobRun) -> None:
        """The job succeeded; its completion event says so at warning level when it learned
        nothing or ended worse than it began (docs/embedded-policy.md#saying-when-nothing-is-learned),
        and says the change from the step-0 evaluation (docs/embedded-policy.md#evaluation)."""
        step, eval_score = run.step, run.eval_score
        final = eval_score if eval_score is not None else run.last_train_score
        # Where it began: the step-0 evaluation, for an eval score (same seeds, same way of acting).
        baseline = eval_score is not None and run.baseline_score is not None
        start = run.baseline_score if baseline else run.first_score
        got_worse = start is not None and final is not None and final < start
        summary = {"steps": step, "final_eval_mean_score": eval_score, "flat_steps": run.flat_steps,
                   "first_step_mean_score": run.first_score, "baseline_eval_mean_score": run.baseline_score,
                   "got_worse": got_worse, **run.counters()}
        score = "" if eval_score is None else f"; final eval mean score {eval_score:.3f}"
        if baseline and eval_score is not None and run.baseline_score is not None:
            moved = change(run.baseline_score, _interval(run.baseline_ci), eval_score, _interval(run.eval_ci))
            summary["eval_change"] = moved.delta
            summary["eval_change_ci95"] = None if moved.low is None else [moved.low, moved.high]
            score = f"; {change_words('eval', moved)}"
        finish = partial(self.journal.finish, run.job_id, "succeeded", "rl.job.completed", data=summary)
        if run.flat_steps == step:
            # Never a quiet success: the job ran, but no step had anything to learn from.
            finish(f"Training finished after {step} steps{score}, but LEARNED NOTHING: in every step all "
                   "rollouts scored the same", level="warning")
        elif got_worse and final is not None and start is not None:
            which = "final eval mean score" if eval_score is not None else "last step's mean score"
            began = "step-0 evaluation's mean score" if baseline else "first step's mean score"
            finish(f"Training finished after {step} steps, but the policy GOT WORSE: its {which} {final:.3f} is "
                   f"below the {began} {start:.3f}", level="warning")
        else:
            finish(f"Training finished after {step} steps{score}")

    def _announce(self, run: JobRun) -> None:
        j, job_id, plan = self.journal, run.job_id, run.plan
        j.event(job_id, "rl.train.started",
                f"Training {plan.model}: {plan.epochs} epoch(s) x {plan.iterations_per_epoch} iteration(s), "
                f"{plan.batch_size} group(s) of {plan.group_size} rollouts per iteration",
                data={"model": plan.model, "epochs": plan.epochs, "iters_per_epoch": plan.iterations_per_epoch,
                      "batch_size": plan.batch_size, "group_size": plan.group_size,
                      "total_steps": plan.total_steps, "task_app_url": plan.task_url})
        self._announce_policy(run)
        self._warn_learning_rate(run)
        if self.infra_events:
            j.event(job_id, "hatchet.submission.attempt",
                    "Embedded backend: no Hatchet queue, the job runs in this process", data={"attempt": 1})
            j.event(job_id, "rl.runtime.modal.started", "In-process stand-in for the Modal runtime started")

    def _announce_policy(self, run: JobRun) -> None:
        """The `rl.train.policy` event and the job's badge: at the start, and again when a
        resumed job loaded its policy (a data-parallel one runs in new rank processes)."""
        assert run.policy is not None  # _load_policy ran
        info = run.policy.describe()
        mode = {"async_generation": True} if run.plan.async_generation else {}  # the dashboard's badge says so
        self.journal.event(run.job_id, "rl.train.policy", info.message, level="warning" if info.stand_in else "info",
                           data={**info.data, "seed": run.seed, **mode})
        for warning in info.warnings:  # say, a resumed checkpoint without its optimizer state
            self.journal.event(run.job_id, "rl.train.policy.warning", warning, level="warning")
        badge = {"kind": info.kind, "label": info.label, "stand_in": info.stand_in}
        if run.policy_warning:
            badge["why"] = run.policy_warning
        self._progress(run, run.step, policy=badge)

    def _warn_learning_rate(self, run: JobRun) -> None:
        """A pretrained model given the tiny model's learning rate is wrecked in a few steps: say so."""
        assert run.policy is not None
        info = run.policy.describe()
        parameters = info.data.get("parameters") if info.kind == "lm" else None
        warning = learning_rate_warning(run.plan.learning_rate, parameters if isinstance(parameters, int) else None)
        if warning is not None:
            self.journal.event(run.job_id, "rl.train.policy.warning", f"The {warning}.", level="warning",
                               data={"learning_rate": run.plan.learning_rate, "parameters": parameters})

    def _announce_resume(self, run: JobRun) -> None:
        j, job_id, total = self.journal, run.job_id, run.plan.total_steps
        j.set_running(job_id)  # a job left queued; one left running stays so
        events = j.store.events(job_id, since_seq=0, limit=100_000)
        run.contract_announced = any(e["type"] == "rl.taskapp.contract" for e in events)
        replayed = max(run.recorded_step - run.step, 0)  # recorded after the last checkpoint ([training] save_every)
        if run.step == 0:
            where = f"from the start (no step had been {'saved' if replayed else 'recorded'})"
        elif run.eval_pending is not None:
            where = f"with the evaluation after step {run.step}/{total} (the step itself was recorded)"
        else:
            where = f"after step {run.step}/{total}, from its checkpoint"
        if replayed:
            where += (f"; step {run.step + 1} (recorded, not saved) is played again" if replayed == 1 else
                      f"; steps {run.step + 1}-{run.recorded_step} (recorded, not saved) are played again")
        j.event(job_id, "rl.train.resumed", f"The embedded backend restarted; the job resumes {where}",
                data={"step": run.step, "total_steps": total, "eval_pending": run.eval_pending is not None,
                      "replayed_steps": replayed})
        self._announce_policy(run)

