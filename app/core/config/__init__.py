"""RL training configs: finding, reading, validating and summarising them, and the job body
built from one. ``app.core.config.rl`` is the public face the front ends import; it loads
pydantic, so this package's own import stays empty for the first screen's sake."""
