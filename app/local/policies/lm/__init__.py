"""The `lm` policy: the model's loading, chat templates, the policy itself (torch), the tiny model."""
