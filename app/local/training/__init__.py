"""The RL loop: the job runner, admission of jobs and rollouts, the rollout contract, retries, capped answers."""
