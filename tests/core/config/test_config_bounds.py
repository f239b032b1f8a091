"""The one definition of a trainable config (app.core.config.trainable): validation names the key,
its line and the allowed range; `--dry-run` refuses with exit 2 before any request; the
embedded backend's job check agrees with the client's on every value, by construction and by
a property test."""

from __future__ import annotations

import copy
import io
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cli.parser import build_parser, normalise_argv
from app.commands.demo import demo_config_path, demo_payload, load_demo_config
from app.core.config.rl import validate_rl_mapping, validate_rl_text
from app.core.config.trainable import NUMBER_BOUNDS, size_problems
from app.headless.printer import Printer
from app.headless.train import run_train
from app.local.training.plan import InvalidJobPayload, plan_from_payload
from support.tiers import examples

DEMO_TEXT = demo_config_path().read_text()

OVERSIZED = [
    ("batch_size = 4", "batch_size = 1000000000", "training.batch_size", "allowed 1 to 1,024"),
    ("max_turns = 12\nbatch_size", "max_turns = 99999999\nbatch_size", "training.max_turns", "allowed 1 to 1,000"),
    ("iterations_per_epoch = 8", "iterations_per_epoch = 1000000000", "training.iterations_per_epoch", "100,000"),
    ("num_epochs = 2", "num_epochs = 5000", "training.num_epochs", "allowed 1 to 1,000"),
    ("instances = 16", "instances = 1000000000", "evaluation.instances", "allowed 1 to 10,000"),
    ("learning_rate = 5e-5", "learning_rate = inf", "training.learning_rate", "finite"),
    ("learning_rate = 5e-5", "learning_rate = nan", "training.learning_rate", "finite"),
    ("group_size = 8", "group_size = 0", "training.group_size", "at least 2 rollouts"),
    ("max_concurrent_rollouts = 8", "max_concurrent_rollouts = -3", "rollout.max_concurrent_rollouts", "1 to 256"),
    ("batch_size = 4", 'batch_size = "4"', "training.batch_size", "whole number"),
]


def _edited(old: str, new: str) -> str:
    assert old in DEMO_TEXT, old
    return DEMO_TEXT.replace(old, new, 1)


@pytest.mark.parametrize("old,new,location,words", OVERSIZED, ids=[o[2] + ":" + o[1].split("=")[-1].strip()
                                                                      for o in OVERSIZED])
def test_validation_names_the_key_its_line_and_the_range(old, new, location, words):
    text = _edited(old, new)
    report = validate_rl_text(text, Path("demo.toml"))
    assert not report.ok
    problem = next(p for p in report.problems if p.location == location)
    assert words in problem.message
    line = next(n for n, content in enumerate(text.splitlines(), 1) if content.startswith(new.split("\n")[0]))
    assert problem.line == line


def test_the_demo_config_is_within_every_bound():
    assert size_problems(load_demo_config()) == []


def test_products_are_bounded_too():
    config = load_demo_config()
    config["training"].update(batch_size=1024, group_size=8)
    assert any("rollouts per iteration" in p.message for p in size_problems(config))
    config["training"].update(batch_size=256, group_size=16, max_turns=1000)
    assert any("turns per iteration" in p.message for p in size_problems(config))


def test_an_inf_anywhere_is_refused():
    config = load_demo_config()
    config["judge_weights"] = {"outcome": math.inf}
    assert [p.location for p in size_problems(config)] == ["judge_weights.outcome"]


@pytest.mark.parametrize("old,new,location,words", OVERSIZED[:4], ids=[o[2] for o in OVERSIZED[:4]])
def test_dry_run_refuses_an_oversized_config_with_exit_2_before_any_request(tmp_path, old, new, location, words):
    config = tmp_path / "oversized.toml"
    config.write_text(_edited(old, new))
    env = tmp_path / ".env"
    env.write_text("SYNTH_API_KEY=sk_test_0123456789abcdef\nENVIRONMENT_API_KEY=env_0123456789abcdef\n"
                   "TASK_APP_URL=http://127.0.0.1:9\n")
    argv = ["train", "--type", "rl", "--no-tui", "--dry-run", "--config", str(config), "--env-file", str(env),
            "--backend", "http://127.0.0.1:9"]  # nothing listens there: a request would fail with exit 5
    out, err = io.StringIO(), io.StringIO()
    code = run_train(build_parser().parse_args(normalise_argv(argv)), printer=Printer(out=out, err=err),
                     cwd=tmp_path)
    assert code == 2, err.getvalue()
    assert location in err.getvalue() and words in err.getvalue()
    assert "Traceback" not in out.getvalue() + err.getvalue()


_VALUES = st.one_of(st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True),
                    st.booleans(), st.text(max_size=5), st.none())


@settings(max_examples=examples(150), deadline=None)
@given(st.sampled_from([b for b in NUMBER_BOUNDS if b.location.split(".")[0] in ("training", "rollout",
                                                                                     "evaluation")]), _VALUES)
def test_the_client_and_the_backend_agree_on_every_value(bound, value):
    """Whatever the value, the client's validation and the backend's job check both accept
    it or both refuse it (for keys both read)."""
    config = copy.deepcopy(load_demo_config())
    section, key = bound.location.split(".")
    config[section][key] = value
    client_refuses = any(p.location == bound.location for p in validate_rl_mapping(config).problems)
    body = demo_payload(load_demo_config(), "http://127.0.0.1:9")
    body["data"]["config"][section][key] = value
    try:
        plan_from_payload(body)
        backend_refuses = False
    except InvalidJobPayload as exc:
        backend_refuses = f"data.config.{bound.location}" in str(exc)
    if value is None:
        return  # an unset optional key vs a required one: presence rules differ by design
    assert client_refuses == backend_refuses, (bound.location, value)
