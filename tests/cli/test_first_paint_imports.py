"""The first screen imports only what it draws: the modules the later steps need (the config
schema, the HTTP client, the charts, the servers) wait for their step (docs/performance.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# What the first frame must not wait for: each costs tens of milliseconds or more to import.
LATER = ("httpx", "pydantic", "plotext", "textual_plotext", "numpy", "rich.syntax", "fastapi", "uvicorn",
         "app.core.config.schema", "app.core.api.client", "app.core.api.streaming", "app.headless", "app.local.servers",
         "app.screens.dashboard", "app.screens.env_review",
         # The launch steps and the config search (their dataclasses): imported when a step, or the
         # search's worker, comes.
         "app.core.launch.steps", "app.core.config.discovery",
         # A command quoted for the shell (app/core/invocation.py), only for one started by a path.
         "shlex",
         # The run history's and an attach's: a job's, after the first frame.
         "app.core.runs.jobs", "app.core.launch.attaching", "app.core.launch.asked_model",
         # The .env's parser and the keys' resolution: a .env is read by the env step, or by the demo's
         # preparation after the first frame.
         "app.core.env.envfile", "app.core.env.syntax", "app.core.env.resolve",
         # Textual's Log: the dashboard's event log (widgets/compat/textual_compat.measured_in_place).
         "textual.widgets._log",
         # The demo's folder, keys (secrets, with hmac and OpenSSL's hashlib) and servers: its preparation's.
         "app.commands.demo_setup", "secrets", "hashlib",
         # The trainer extra (pip install 'synth-tui[trainer]'): only the embedded backend's lm policy loads it.
         "torch", "transformers", "trl", "peft", "xgrammar", "app.local.policies.lm.policy",
         "app.local.policies.lm.acting", "app.local.policies.lm.grpo_thread", "app.local.policies.lm.checkpoint")

FIRST_SCREEN = """
import json, sys
from app.cli import dispatch, parser
args = parser.build_parser().parse_args(parser.normalise_argv(sys.argv[1:]))
from app.commands import embedded_backend
embedded_backend.wants_embedded_backend(args)
if args.command == "demo":
    from app.commands import demo
    session = demo.LaunchSession(demo.waiting_options(args))
    demo.DemoServers(args).preparation()
else:
    session = dispatch._session(args)
from app.screens.steps import picker_screen
from app.tui import SynthTuiApp
SynthTuiApp(session)
picker_screen()
import dataclasses
made = sorted(f"{name}.{cls.__name__}" for name, module in list(sys.modules.items())
              if name.split(".")[0] in ("app", "widgets")
              for cls in vars(module).values()
              if isinstance(cls, type) and cls.__module__ == name and dataclasses.is_dataclass(cls))
import re
patterns = sorted(f"{name}.{attribute}" for name, module in list(sys.modules.items())
                  if name.split(".")[0] in ("app", "widgets")
                  for attribute, value in vars(module).items() if isinstance(value, re.Pattern))
print(json.dumps({"later": sorted(name for name in {later} if name in sys.modules), "dataclasses": made,
                  "patterns": patterns}))
"""

# Making a dataclass costs about a millisecond (its methods are compiled from source when the
# class is made): the first screen's path makes only these, the session's own.
FIRST_SCREEN_DATACLASSES = {
    "app.core.launch.options.LaunchOptions", "app.core.launch.options.Overrides", "app.core.launch.options.Preparation",
    "app.core.launch.session.LaunchSession",
}

# Compiling a regular expression costs 0.1 to 0.8 ms: a module on the first screen's path compiles
# at import only the patterns the first frame uses (the backend URL's host, the checkout's
# pyproject.toml); the others are compiled on first use (app/core/patterns.py).
FIRST_SCREEN_PATTERNS = {
    "app.core.api.urls._PLAIN_HOST", "app.core.api.urls._IPV4_STYLE", "app.core.config.roots._PROJECT_NAME_LINE",
}


@pytest.mark.usefixtures("cli_process")  # a fresh interpreter: what it has imported is the point
@pytest.mark.parametrize("command", [[], ["demo"]], ids=["synth-tui", "synth-tui demo"])
def test_the_first_screen_imports_nothing_a_later_step_needs_and_makes_few_dataclasses_and_patterns(command, tmp_path):
    script = FIRST_SCREEN.replace("{later}", repr(LATER))
    done = subprocess.run([sys.executable, "-c", script, *command], cwd=tmp_path, capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["later"] == []
    assert set(seen["dataclasses"]) <= FIRST_SCREEN_DATACLASSES
    assert set(seen["patterns"]) <= FIRST_SCREEN_PATTERNS
