"""The embedded backend, its job runner and the reference task app (one machine, same API)."""
