"""The job runner's step loop: one training step (its rollouts, the policy update, the step's
events and metrics in one transaction, its checkpoint written in the background) and the
evaluations after it; with `[training] async_generation`, the next step's rollouts played
during the update (`_train_ahead`).

`StepLoop` is a part of `JobRunner` (runner.py), cut out here; it plays rollouts through
`RolloutClient` (rollouts.py).
"""

from __future__ import annotations

import asyncio
import math
import time
import typing
from dataclasses import dataclass
from typing import Any

from app.core.runs.intervals import Interval, interval_data, mean_interval
from app.core.runs.series import shown_number
from app.local.policies.base import Episode, reward_spread
from app.local.state.checkpoints import Checkpoints
from app.local.training.job_run import JobRun
from app.local.training.rollout_record import StepSample
from app.local.training.rollouts import RolloutClient

# A policy's own numbers that are also metrics (a chart each on the dashboard, a column in the
# export): what a GRPO practitioner reads beside the score, loss and entropy (docs/embedded-policy.md#metrics).
GRID_STATS = ("reward_std", "kl", "clip_ratio", "completion_tokens", "generation_tokens_per_s", "step_seconds",
              "allreduce_s")  # allreduce_s: data-parallel jobs only (app/local/parallel/policy.py)


@dataclass(frozen=True)
class Played:
    """A step's rollouts, played, waiting for their update."""

    step: int
    episodes: list[Episode]
    started: float  # time.monotonic() as the rollouts began
    started_at: float  # time.time() then
    rollout_seconds: float
    off_policy: bool  # played while the previous step's update ran (async_generation)


async def _both(learning: asyncio.Task[None], playing: asyncio.Task[Played]) -> Played:
    """Step k's update and step k+1's rollouts, side by side: the rollouts once both ended. The
    first to fail stops the other (its error raised here); so does a cancel of the job."""
    try:
        await asyncio.wait({learning, playing}, return_when=asyncio.FIRST_EXCEPTION)
        for task in (learning, playing):
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise typing.cast(BaseException, task.exception())
        await learning  # a task cancelled on its own (a shutdown) raises its CancelledError here
        return await playing
    finally:
        stopped = [task for task in (learning, playing) if not task.done()]
        for task in stopped:
            task.cancel()
        if stopped:
            await asyncio.wait(stopped)


def _point(name: str, value: float, phase: str, n: int) -> dict[str, Any]:
    return {"name": name, "value": value, "phase": phase, "data": {"n": n}}


class StepLoop(RolloutClient):
    """The step half of `JobRunner`: what it uses of the job runner is declared here."""

    checkpoints: Checkpoints

    async def _train_step(self, run: JobRun, step: int) -> None:
        """Play a step's rollouts, update the policy, record the step (its events and metrics in
        one transaction) and, when due (`[training] save_every`), write its checkpoint in the
        background, the job resuming from it once written. The last step and an evaluated one
        are saved first and recorded with their checkpoint (with an evaluation, in two parts)."""
        await self._learn_step(run, await self._play_step(run, step, off_policy=False))

    async def _train_ahead(self, run: JobRun) -> None:
        """The steps with `[training] async_generation`: step k+1's rollouts play while step k's
        update runs (one step off-policy), and step k+1's update waits for step k's to be recorded.
        Never more than one step ahead; nothing is played past a step that is evaluated or the last
        one, so an evaluation never meets a model mid-update (docs/embedded-policy.md#async-generation)."""
        plan = run.plan
        played: Played | None = None
        while run.step < plan.total_steps:
            step = run.step + 1
            if played is None:
                played = await self._play_step(run, step, off_policy=False)
            if step == plan.total_steps or plan.eval_due(step):
                await self._learn_step(run, played)
                played = None
                continue
            learning = asyncio.create_task(self._learn_step(run, played), name=f"update-{run.job_id}-{step}")
            # What step `step` records as the seeds' RNG: as it was before the step played ahead drew.
            run.rng_ahead = run.rng.getstate()
            playing = asyncio.create_task(self._play_step(run, step + 1, off_policy=True),
                                          name=f"rollouts-{run.job_id}-{step + 1}")
            try:
                played = await _both(learning, playing)
            finally:
                run.rng_ahead = None

    async def _play_step(self, run: JobRun, step: int, *, off_policy: bool) -> Played:
        """A step's rollouts, played and kept for the inspector; `off_policy`: played while the
        previous step's update runs (async_generation)."""
        plan = run.plan
        started, started_at = time.monotonic(), time.time()
        seeds = [run.rng.randrange(1_000_000) for _ in range(plan.batch_size)]
        run.sample = StepSample(plan.inspect_per_step, plan.batch_size * plan.group_size)
        calling = run.calling_rollouts
        episodes = await self._play_all(run, "rl", step, [s for s in seeds for _ in range(plan.group_size)])
        self._require_policy_calls(run, step, len(episodes), run.calling_rollouts - calling)
        kept, run.sample = run.sample.chosen(), None
        await self._keep(run, kept)
        return Played(step, episodes, started, started_at, time.monotonic() - started, off_policy)

    async def _learn_step(self, run: JobRun, played: Played) -> None:
        """The update of a played step, its record, its checkpoint and its evaluation."""
        plan, job_id, step, episodes, started = run.plan, run.job_id, played.step, played.episodes, played.started
        epoch = (step - 1) // plan.iterations_per_epoch
        groups = [episodes[i:i + plan.group_size] for i in range(0, len(episodes), plan.group_size)]
        # In a thread: a large batch must not stall the event loop that answers every client.
        assert run.policy is not None  # _load_policy ran
        await self.checkpoint_written(run)  # the last checkpoint is written before the policy changes
        updating = time.monotonic()
        stats = await asyncio.to_thread(run.policy.update, groups)
        updated_at = time.time()
        # The rollout phase and the update apart, and the groups' spread; a policy's own figures
        # (the lm policy's GRPO step alone, its Bessel-corrected std) win. Event data only: the
        # metrics are the policy's own (GRID_STATS). docs/embedded-policy.md#metrics.
        timing = {"rollout_seconds": round(played.rollout_seconds, 3),
                  "step_seconds": round(time.monotonic() - updating, 3), **reward_spread(groups, bessel=False)}
        if plan.async_generation:  # whether the step was played one step off-policy, and when (unix
            # seconds) its rollouts began and its update ended: step k+1's begin before step k's end.
            timing.update(off_policy=played.off_policy, rollouts_started_at=round(played.started_at, 3),
                          update_ended_at=round(updated_at, 3))
        mean = sum(e.score for e in episodes) / len(episodes)
        loss = shown_number(stats.loss)  # an lm job's tiny loss in scientific notation, not "-0.0000"
        events = [{"type": "rl.train.step",
                   "message": f"Step {step}/{plan.total_steps}: mean score {mean:.3f}, loss {loss}, "
                              f"entropy {stats.entropy:.3f}" + ("; generated one step off-policy"
                                                                if played.off_policy else ""),
                   "data": {"step": step, "total_steps": plan.total_steps, "epoch": epoch, "mean_score": mean,
                            "loss": stats.loss, "entropy": stats.entropy, "rollouts": len(episodes),
                            # One memo per chat answer learned from; for the stand-in, one decision per
                            # tool argument (with the gridworld's one-choice tool, decisions == turns).
                            "decisions": sum(len(m) if isinstance(m, list) else 1
                                             for e in episodes for m in e.memos),
                            "turns": sum(e.turns or 0 for e in episodes),
                            "seconds": round(time.monotonic() - started, 3), **timing, **stats.extra}}]
        events += stats.events  # what the policy says about the step (an lm job's first episode restart)
        flat = self._flat_warning(run, step, episodes)
        if flat is not None:
            events.append(flat)
        n = len(episodes)
        own = {key: float(value) for key in GRID_STATS
               if isinstance(value := stats.extra.get(key), int | float) and math.isfinite(value)}
        points = [{**p, "epoch": epoch} for p in (
            _point("train.mean_score", mean, "train", n), _point("train.loss", stats.loss, "train", n),
            _point("train.entropy", stats.entropy, "train", n),
            *(_point(f"train.{key}", value, "train", n) for key, value in own.items()))]
        run.step, run.last_train_score = step, mean
        if run.first_score is None:
            run.first_score = mean
        if plan.eval_due(step) or step == plan.total_steps:  # saved before the evaluation, or to end the job
            await self.checkpoint_written(run)
            await asyncio.to_thread(self.checkpoints.save, job_id, step, run.policy)
        if plan.eval_due(step):
            run.eval_pending = points
            self.journal.commit_step(job_id, self._new(run, step, events), run.saved_state())
            self._progress(run, step, train_mean_score=mean)
            await self._evaluate_step(run, step, points)
        elif step == plan.total_steps:
            self._record(run, step, events, points, run.saved_state())
            await asyncio.to_thread(self.checkpoints.prune, job_id, step)
        else:
            # Recorded now, resumed from once written (docs/embedded-policy.md#checkpoints): the
            # next step's rollouts play while the policy is written.
            if plan.save_due(step):
                state = run.saved_state()
                await self.checkpoint_written(run)  # one write at a time, in step order
                # Started before the record, with no wait between: a job stopped after its record
                # finishes this write (runner._train), and resumes after the step it recorded last.
                run.writing = asyncio.create_task(self._write(run, step, state))
            self._record(run, step, events, points, None)

    def _new(self, run: JobRun, step: int, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A step's events, or none when it was recorded before the backend restarted and is
        played again from an older checkpoint (JobRun.recorded_step)."""
        return events if step > run.recorded_step else []

    def _record(self, run: JobRun, step: int, events: list[dict[str, Any]], points: list[dict[str, Any]],
                state: dict[str, Any] | None) -> None:
        replayed = step <= run.recorded_step
        self.journal.commit_step(run.job_id, [] if replayed else events, state,
                                 metrics=None if replayed else (step, points))
        self._progress(run, step, train_mean_score=run.last_train_score)

    async def _write(self, run: JobRun, step: int, state: dict[str, Any]) -> None:
        """Write the policy after `step`, then make it the one the job resumes from."""
        assert run.policy is not None
        await asyncio.to_thread(self.checkpoints.save, run.job_id, step, run.policy)
        self.journal.commit_step(run.job_id, [], state)
        await asyncio.to_thread(self.checkpoints.prune, run.job_id, step)

    @staticmethod
    async def checkpoint_written(run: JobRun) -> None:
        """Until the last checkpoint's write ended (its error, if any, raised here)."""
        writing = run.writing
        if writing is not None:
            await asyncio.shield(writing)  # cancelled here, the job's end waits for it again
            if run.writing is writing:
                run.writing = None

    async def _evaluate_step(self, run: JobRun, step: int, points: list[dict[str, Any]]) -> None:
        """The evaluation after a recorded step; then the step's metrics, all together
        (store.add_metrics says why)."""
        try:
            mean, interval, event = await self._evaluate(run, step)
        except BaseException:
            # The step trained (its event says so): its metrics are kept even when the
            # evaluation after it fails or the job is cancelled; not at a shutdown, after which
            # the evaluation is played again.
            if not run.stopping:
                run.eval_pending = None
                self.journal.commit_step(run.job_id, [], run.saved_state(), metrics=(step, points))
            raise
        run.eval_pending, run.eval_score, run.eval_ci = None, mean, _pair(interval)
        epoch = points[0]["epoch"] if points else 0
        eval_point = {**_eval_point(run, mean, interval), "epoch": epoch}
        self.journal.commit_step(run.job_id, [event], run.saved_state(), metrics=(step, [*points, eval_point]))
        self._progress(run, step, eval_mean_score=mean)
        await asyncio.to_thread(self.checkpoints.prune, run.job_id, step)

    async def _evaluate_baseline(self, run: JobRun) -> None:
        """The evaluation at step 0, before any update, on the same seeds as every later one: where
        the eval chart starts (docs/embedded-policy.md#evaluation). Recorded with the job's state
        (`baseline_done`), so a resumed job never plays it twice."""
        mean, interval, event = await self._evaluate(run, 0)
        run.baseline_done, run.baseline_score, run.baseline_ci = True, mean, _pair(interval)
        point = {**_eval_point(run, mean, interval), "epoch": 0}
        self.journal.commit_step(run.job_id, [event], run.saved_state(), metrics=(0, [point]))
        self._progress(run, 0, eval_mean_score=mean)

    async def _evaluate(self, run: JobRun, step: int) -> tuple[float, Interval | None, dict[str, Any]]:
        """One evaluation on the fixed eval seeds: an episode per instance, greedy; or, with
        `[evaluation] samples = k`, k sampled episodes per instance, each instance scored by its
        best (pass@k for 0/1 rewards). The mean of the instances' scores, its 95 % interval
        (app/core/runs/intervals.py) and the `rl.eval.summary` event."""
        plan = run.plan
        seeds = [plan.eval_seeds[i % len(plan.eval_seeds)] for i in range(plan.eval_instances)]
        k = max(plan.eval_samples, 1)
        episodes = await self._play_all(run, "eval", step, [s for s in seeds for _ in range(k)])
        scores = [max(e.score for e in episodes[i * k:(i + 1) * k]) for i in range(len(seeds))]
        mean = sum(scores) / len(scores)
        interval = mean_interval(scores)
        solved = sum(score > 0 for score in scores) / len(scores)
        what = f"pass@{k}" if plan.eval_samples else "mean score"
        spread = "" if interval is None else f" (95% CI {interval.low:.3f}-{interval.high:.3f})"
        when = "at step 0, before any update" if step == 0 else f"after step {step}"
        played = (f"{len(scores)} instances x {k} sampled episodes" if plan.eval_samples
                  else f"{len(scores)} greedy episodes")
        if plan.eval_by_default:
            played += " (no [evaluation] in the config: seeds " + ", ".join(map(str, plan.eval_seeds)) + \
                ", at step 0 and after the last step; [evaluation] chooses)"
        return mean, interval, {
            "type": "rl.eval.summary",
            "message": f"Eval {when}: {what} {mean:.3f}{spread} over {played} ({solved:.0%} scored above 0)",
            "data": {"step": step, "mean_score": mean, "seeds": sorted(set(seeds)), "instances": len(scores),
                     "episodes": len(episodes), "samples": plan.eval_samples, "greedy": not plan.eval_samples,
                     "success_rate": solved, **interval_data(interval)}}

    def _flat_warning(self, run: JobRun, step: int, episodes: list[Episode]) -> dict[str, Any] | None:
        """Rollouts that all score the same teach nothing (every advantage is 0): say so the
        first time, loudly, instead of looking like a healthy run."""
        scores = {e.score for e in episodes}
        if len(scores) != 1:
            return None
        run.flat_steps += 1
        if run.flat_steps != 1:
            return None
        score = scores.pop()
        if run.first_score is not None and score > run.first_score:  # it rose to here: likely solved
            why = ("If every rollout now solves the task, the run has little left to learn from it: a harder task "
                   "(or more of its variants) gives the policy something to compare")
        else:
            why = ("If this goes on, the task app may be rejecting the policy's actions, or its reward does not "
                   "depend on them: check the task app's log and its tool schema")
        return {"type": "rl.train.warning", "level": "warning", "data": {"step": step, "rollouts": len(episodes)},
                "message": f"Step {step}: every one of {len(episodes)} rollouts scored exactly {score:g}, so "
                           f"nothing was learned from it. {why}."}

    def _progress(self, run: JobRun, step: int, **scores: Any) -> None:
        job = self.journal.store.get_job(run.job_id)
        metadata = dict(job["metadata"]) if job else {}
        metadata.update(scores, step=step, total_steps=run.plan.total_steps, counters=run.counters())
        self.journal.store.set_metadata(run.job_id, metadata)



def _eval_point(run: JobRun, mean: float, interval: Interval | None) -> dict[str, Any]:
    """An evaluation's `eval.mean_score` point, its interval in its data (docs/wire-contract.md#metrics)."""
    point = _point("eval.mean_score", mean, "eval", run.plan.eval_instances)
    point["data"].update(interval_data(interval))
    return point


def _pair(interval: Interval | None) -> list[float] | None:
    return None if interval is None else [interval.low, interval.high]
