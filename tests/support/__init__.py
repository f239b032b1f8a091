"""Helpers the tests share, imported as `support.NAME` (tests/ is on pytest's path): the two tiers
(tiers.py), provisioning (provision.py), the in-process command line (cli.py), loopback fakes of
the backend and task apps (fakes.py, seeded_backend.py, chaos_proxy.py), hostile inputs, waits
on conditions (pilot_waits.py), the screen as text, the lm fixtures and models, the browser
harness (serve_harness.py). docs/testing.md#layout."""
