"""The command line built for one command (what main does, to start faster) parses exactly as
the whole command line does: the same namespace, or the same usage error."""

from __future__ import annotations

import contextlib
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.cli.parser import COMMANDS, build_parser, normalise_argv
from support.tiers import examples

VALID = [
    [],
    ["--config", "a.toml", "--backend", "local", "--no-tui"],
    ["train", "--type", "rl", "--env-file", "x.env", "--poll-interval", "2"],
    ["demo", "--no-tui", "--poll-interval", "0.1"],
    ["attach", "job_1", "--backend", "http://h:1", "--metric", "train.mean_score"],
    ["history", "--no-tui"],
    ["jobs", "--status", "running", "--limit", "5", "--sort", "created"],
    ["compare", "a", "b", "--metric", "m"],
    ["rollouts", "job_1", "--step", "3"],
    ["serve", "--port", "0", "attach", "job_1"],
    ["backend", "--port", "9000", "--db", "x.sqlite3"],
    ["taskapp", "--game", "crafter-lite", "--contract", "0.5"],
]

WORDS = [*COMMANDS, "--no-tui", "--backend", "local", "--port", "0", "x", "job_1", "--limit", "-1", "--bogus",
         "--poll-interval", "nan", "--type", "rl", "sft", "--step", "--metric", "-h"]


def outcome(parser_for_words, argv: list[str]) -> tuple[str, object]:
    """The namespace, or argparse's exit code and what it printed."""
    words = normalise_argv(argv)
    err, out = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            return "parsed", vars(parser_for_words(words).parse_args(words))
    except SystemExit as exc:
        return "exit", (exc.code, err.getvalue(), out.getvalue())


def both(argv: list[str]) -> tuple[tuple[str, object], tuple[str, object]]:
    whole = outcome(lambda words: build_parser(), argv)
    one = outcome(lambda words: build_parser(words[0] if words[0] in COMMANDS else None), argv)
    return whole, one


@pytest.mark.parametrize("argv", VALID, ids=lambda argv: " ".join(argv) or "(none)")
def test_every_command_parses_the_same_with_only_its_own_flags(argv):
    whole, one = both(argv)
    assert whole[0] == "parsed", whole
    assert one == whole


@pytest.mark.parametrize("argv", [["train", "--bogus"], ["attach"], ["jobs", "--limit", "0"],
                                  ["taskapp", "--game", "chess"], ["demo", "--help"]])
def test_a_usage_error_or_help_is_the_same(argv):
    whole, one = both(argv)
    assert whole[0] == "exit"
    assert one == whole


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=6))
def test_any_words_give_the_same_outcome(argv):
    whole, one = both(argv)
    # Compared as text: "--poll-interval nan" parses (the launch options refuse it later), and
    # nan is never equal to itself.
    assert repr(one) == repr(whole)


def test_trainer_flags_choose_the_embedded_backends_policy():
    from app.cli.parser import POLICY_KINDS
    from app.local import policies

    assert POLICY_KINDS == policies.POLICY_KINDS  # one list, written twice (the parser loads no backend)
    parser = build_parser()
    assert parser.parse_args(["backend"]).policy_kind == "auto"
    assert parser.parse_args(["backend", "--trainer", "lm"]).policy_kind == "lm"
    assert parser.parse_args(["train", "--backend", "local", "--trainer", "tabular"]).policy_kind == "tabular"
    assert parser.parse_args(["train"]).policy_kind is None
    with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit):
        parser.parse_args(["backend", "--trainer", "gpt"])


def test_trainer_without_the_embedded_backend_is_a_usage_error():
    from app.commands.embedded_backend import refuse_policy_kind_without_embedded
    from app.core.errors import UsageError

    args = build_parser().parse_args(["train", "--backend", "http://127.0.0.1:8000", "--trainer", "lm"])
    with pytest.raises(UsageError, match="--backend local"):
        refuse_policy_kind_without_embedded(args)
    refuse_policy_kind_without_embedded(build_parser().parse_args(["train", "--backend", "local", "--trainer", "lm"]))


def test_an_unknown_command_is_named_and_the_commands_listed(capsys):
    """The walk: `synth-tui frobnicate` said argparse's "unrecognized arguments" (the word went
    to train). Exit 2, a usage error (README's exit codes)."""
    from app.cli.dispatch import main

    assert main(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'frobnicate'" in err and "unrecognized" not in err
    assert all(command in err for command in COMMANDS) and "synth-tui --help" in err


def test_an_unknown_command_that_may_be_a_pasted_key_is_not_echoed(capsys):
    from app.cli.dispatch import main

    pasted = "sk_live_" + "a1" * 20
    assert main([pasted, "--no-tui"]) == 2
    err = capsys.readouterr().err
    assert pasted[:5] not in err and "unknown command (a word of 48 characters)" in err
