"""The suite's two tiers: the quick loop (`pytest -q -n auto -m "not slow"`) and everything
(the README's test command, which .ci/run runs). docs/testing.md.

A test is slow when it needs torch, a second process tree, a browser, a whole training job or
the SDK's venv. That is decided from the fixtures it uses, never by hand: each fixture that
brings one of those is declared with :func:`slow_fixture`, and conftest.py marks every test
that uses one, directly or through another fixture. A quick test that imports torch or starts
a process anyway fails, saying what it did and what to use instead, so a new test cannot land
in the wrong tier by forgetting a mark.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., Any])

# fixture name -> why a test that uses it is slow
SLOW_FIXTURES: dict[str, str] = {}
# fixture name -> the xdist group of the tests that use it (they run on one worker)
FIXTURE_GROUPS: dict[str, str] = {}

# Audit events (PEP 578) that start another process.
PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.fork", "os.forkpty", "os.exec", "os.spawn",
                            "os.system", "os.startfile"})
# Modules only the slow tier may import (a worker imports each once, for seconds).
SLOW_MODULES = ("torch",)

# Property-based tests in the quick loop try this share of the examples the full run tries
# (Hypothesis profiles "quick" and "full"; `--hypothesis-profile` chooses either by hand).
QUICK_EXAMPLES_SHARE = 1 / 6
_profile = {"name": "full"}


def choose_hypothesis_profile(markexpr: str, asked: str | None) -> str:
    """The profile a run uses: the one asked for with --hypothesis-profile, else "quick" when the
    run leaves the slow tests out (the quick loop), else "full" (what .ci/run runs)."""
    from hypothesis import settings

    settings.register_profile("full", settings.get_profile("default"))
    settings.register_profile("quick", max_examples=max(5, round(settings.default.max_examples * QUICK_EXAMPLES_SHARE)))
    name = asked or ("quick" if " ".join(markexpr.split()) == "not slow" else "full")
    settings.load_profile(name)
    _profile["name"] = name
    return name


def examples(full: int) -> int:
    """`max_examples` for a test that sets its own: `full` in the full run, a share of it in
    the quick loop (at least 5)."""
    return full if _profile["name"] != "quick" else max(5, round(full * QUICK_EXAMPLES_SHARE))


def slow_fixture(why: str, *, group: str | None = None, **fixture_kwargs: Any) -> Callable[[F], F]:
    """``@pytest.fixture(**fixture_kwargs)``, and every test that uses the fixture is slow: `why`
    says what it brings (torch, a process, a browser, a training job, the SDK venv). `group`: the
    tests that use it run on one pytest-xdist worker (``--dist loadgroup``), so a session-scoped
    fixture that is costly to set up (the SDK's task apps) is set up once, not once a worker."""

    def decorate(function: F) -> F:
        SLOW_FIXTURES[function.__name__] = why
        if group is not None:
            FIXTURE_GROUPS[function.__name__] = group
        return pytest.fixture(**fixture_kwargs)(function)

    return decorate


def slow_reasons(fixturenames: Iterable[str]) -> list[str]:
    return [f"{name}: {SLOW_FIXTURES[name]}" for name in fixturenames if name in SLOW_FIXTURES]


def worker_group(fixturenames: Iterable[str]) -> str | None:
    return next((FIXTURE_GROUPS[name] for name in fixturenames if name in FIXTURE_GROUPS), None)


class QuickTierGuard:
    """Watches a quick test for what only a slow one may do: start a process, import torch.

    An audit hook cannot be removed once added, so one guard is added per test process and
    switched on around each quick test's setup, call and teardown."""

    def __init__(self) -> None:
        self.active = False
        self.processes: list[str] = []
        self._modules_before: set[str] = set()
        sys.addaudithook(self._audit)

    def _audit(self, event: str, args: tuple[Any, ...]) -> None:
        if self.active and event in PROCESS_EVENTS:
            self.processes.append(_describe_process(event, args))

    def start(self) -> None:
        self.processes = []
        self._modules_before = {name for name in SLOW_MODULES if name in sys.modules}
        self.active = True

    def stop(self) -> str | None:
        """What the quick test did that only a slow test may do, in words; None when nothing."""
        self.active = False
        problems = []
        if self.processes:
            problems.append(f"started a process ({'; '.join(self.processes[:3])})")
        imported = [name for name in SLOW_MODULES if name in sys.modules and name not in self._modules_before]
        if imported:
            problems.append(f"imported {', '.join(imported)}")
        if not problems:
            return None
        return (f"this quick test {' and '.join(problems)}, which only slow tests may do. Use a fixture declared "
                "with support.tiers.slow_fixture (tiny_model, cli_process, modal_standin, ...), or check it "
                "in-process (support.cli.run_cli for the command line). docs/testing.md#two-tiers")


def _describe_process(event: str, args: tuple[Any, ...]) -> str:
    if event == "subprocess.Popen" and len(args) >= 2:
        argv = args[1]
        words = [str(word) for word in argv] if isinstance(argv, (list, tuple)) else [str(argv)]
        return " ".join(words)[:120]
    return event
