"""The embedded backend, its trainer and the reference task app (one machine, same API)."""
