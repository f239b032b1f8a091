"""The `lm` policy in N processes: launching ranks under accelerate, a rank, other hosts, vLLM."""
