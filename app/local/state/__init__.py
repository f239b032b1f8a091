"""What the embedded backend keeps on disk: jobs and events (SQLite), rollouts, the journal, checkpoints."""
