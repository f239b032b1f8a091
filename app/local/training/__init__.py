"""The RL loop: the trainer, admission of jobs and rollouts, the rollout contract, retries, capped answers."""
