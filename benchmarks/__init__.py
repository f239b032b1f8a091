"""Performance benchmarks (run by hand, not timed tests)."""
