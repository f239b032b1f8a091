"""Task apps written on synth-ai 0.5.0's own task-app framework, for the embedded backend's tests.

Every other task app of this repository is built on our kit (app/local/taskapps/kit.py); these
are built the way a user of the SDK builds one: a `LocalAPIConfig` turned into a FastAPI app by
`create_local_api`, the policy asked through the SDK's `call_chat_completion_api`, the answer
made by `build_rollout_response` with a v3 trace from `build_trace_payload`.

- `context_free`: each turn names a button from 1 to 4 and the right `press` call depends only
  on that turn's message (random play: 0.25). The task a language model is taught first.
- `guess_number`: guess a number from 1 to 8 with higher/lower feedback in the tool result,
  scored as tests/local/guess_taskapp.py.

synth-ai 0.5.0 is not one of our dependencies (about 160 packages, 0.6-1.1 GB, and it would
move click, httpx, rich and packaging to older releases), so the apps run in a child process,
with a Python that has it: `harness.py` (imported by the tests; it never imports synth_ai)
starts `python -m sdk_taskapps.serve NAME` and finds that Python (docs/rollout-contracts.md,
section "Task apps on synth-ai 0.5.0's framework"). Only the modules below import synth_ai.
"""
