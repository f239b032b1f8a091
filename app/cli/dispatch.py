"""Command-line entry point: the words parsed (``app.cli.parser``), then each command sent to
its front end (docs/product.md#commands).

``synth-tui`` with no command is ``synth-tui train --type rl``. Without a terminal, or with
``--no-tui``, the train flow runs headless (``app.headless``) and prints the SDK's lines.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from app.cli.parser import COMMANDS, build_parser, normalise_argv, unknown_command
from app.core.errors import ExitCode, SynthTuiError, UsageError
from app.core.launch.options import LaunchOptions
from app.core.launch.session import LaunchSession

# The commands that never open the TUI, whatever the terminal.
NO_TUI_COMMANDS = ("rollouts", "backend", "taskapp", "tiny-model", "serve", "ranks-host")
# What textual-serve sets in a tab's environment: Textual draws for a browser (docs/browser.md).
WEB_DRIVER = "textual.drivers.web_driver:WebDriver"


def main(argv: Sequence[str] | None = None) -> int:
    _tolerate_unencodable_output()
    given = list(sys.argv[1:] if argv is None else argv)
    if (unknown := unknown_command(given)) is not None:
        print(unknown, file=sys.stderr)
        return ExitCode.USAGE
    try:
        words = normalise_argv(given)
        args = build_parser(words[0] if words[0] in COMMANDS else None).parse_args(words)
    except SystemExit as exc:  # argparse printed the usage error (or --help); keep its code
        return exc.code if isinstance(exc.code, int) else ExitCode.USAGE
    try:
        code = _run(args)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()  # here, where a closed pipe is caught, not at the interpreter's exit
        return code
    except BrokenPipeError:
        return _output_closed()


def _run(args: argparse.Namespace) -> int:
    try:
        return _dispatch(args)
    except SynthTuiError as exc:
        from app.core.invocation import as_run

        line = as_run(f"Error: {exc.render()}")  # its hints name the command as it was run
        print(line, file=sys.stderr)
        _also_on_the_terminal(args, line)
        return exc.exit_code
    except KeyboardInterrupt:
        print("\nInterrupted.", file=sys.stderr)
        return ExitCode.INTERRUPTED
    finally:
        gc.enable()  # off only for a TUI's start (_tui_start); whatever ended it, on again
        _tell_history_repairs()


# Servers a user starts in the background (`… 2>backend.log &`): their failure to start goes to
# the terminal too, or the shell shows only `[1]- Exit 2` (issue 37).
BACKGROUND_SERVERS = ("backend", "taskapp", "ranks-host")


def _open_terminal() -> TextIO:
    return open("/dev/tty", "w", encoding="utf-8", errors="replace")  # noqa: SIM115 (closed by the caller)


def _also_on_the_terminal(args: argparse.Namespace, line: str) -> None:
    """A server's error, also on the controlling terminal when stderr goes elsewhere (a log)."""
    if args.command not in BACKGROUND_SERVERS or sys.stderr.isatty():
        return
    try:
        terminal = _open_terminal()
    except OSError:  # no controlling terminal (a service, a CI job): the log has it
        return
    from app.core.invocation import as_run

    with terminal:
        terminal.write(f"{as_run(f'synth-tui {args.command}')}: {line}\n")


def _tell_history_repairs() -> None:
    """A damaged run history moved aside on a path that had no place to say so (an attach, an
    overlay's lookup): told here, once, when the command ends (docs/product.md#damaged-state).
    Only when the history was loaded at all: a command that never read it imports nothing."""
    history = sys.modules.get("app.core.runs.history")
    if history is None:
        return
    for note in history.take_repair_notes():
        print(f"Note: {note}", file=sys.stderr)


def _output_closed() -> int:
    """Every command's end when its reader went away (``| head``): quiet, as Unix tools end,
    with 141 (docs/product.md#exit-codes). A job being watched is left running: nothing is
    cancelled, the watch just stops. The closed stream is pointed at /dev/null, as the Python
    docs advise, so that the output still buffered does not fail again at the interpreter's exit."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except OSError:
            try:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, stream.fileno())
                os.close(devnull)
            except (OSError, ValueError):
                pass  # not a real file (a test's capture): nothing flushes it at exit
    return ExitCode.OUTPUT_CLOSED


def _tui_start() -> None:
    """Before a TUI's imports: the cyclic collector is off until its first frame (the app turns
    it on again, SynthTuiApp.on_mount): during the imports it would walk the growing heap of
    modules again and again, for garbage that is not there (docs/performance.md#first-paint).
    The entry points (app/cli/launcher.py, app/cli/__main__.py) turned it off before the
    command line's own imports; any other front end turns it on (_dispatch)."""
    gc.disable()


def _tolerate_unencodable_output() -> None:
    """A path or flag that is not valid UTF-8 reaches Python as lone surrogates; echoing it in a
    message must print an escape, not end in a UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def _run_train(args: argparse.Namespace, interactive: bool) -> int:
    if not interactive:
        from app.headless.train import run_train

        return run_train(args)
    from app.tui import run_tui  # imported when chosen: a headless run never loads Textual

    return run_tui(_session(args))


def _dispatch(args: argparse.Namespace) -> int:
    """Each command to its front end: the TUI on a terminal, else (or with --no-tui) headless.
    Each front end's modules are imported only when it is chosen: a headless run never loads
    Textual, and the TUI's first paint waits for no headless, demo or server module."""
    interactive = not getattr(args, "no_tui", False) and has_terminal()
    if interactive and args.command not in NO_TUI_COMMANDS:
        _tui_start()
    else:
        gc.enable()  # off during the entry point's imports: a headless run or a server collects as usual
    return _RUNNERS[args.command](args, interactive)


def _train(args: argparse.Namespace, interactive: bool) -> int:
    from app.commands import embedded_backend

    embedded_backend.refuse_policy_kind_without_embedded(args)
    if embedded_backend.wants_embedded_backend(args):
        return embedded_backend.run_with_embedded_backend(args, lambda flags: _run_train(flags, interactive))
    return _run_train(args, interactive)


def _lab(args: argparse.Namespace, interactive: bool) -> int:
    from contextlib import ExitStack

    from app.commands import lab

    if args.backend:
        raise UsageError("synth-tui lab starts its own backend; --backend points elsewhere.",
                         "Leave --backend out, or use `synth-tui train --backend URL` for a backend of your own.")
    with ExitStack() as stack:
        env_path, backend, task_app = lab.start_lab(args, stack)
        return _run_train(lab.lab_flags(args, env_path, backend, task_app), interactive)


def _demo(args: argparse.Namespace, interactive: bool) -> int:
    from app.commands import demo

    return demo.run_demo(args, interactive=interactive)


def _server(args: argparse.Namespace, interactive: bool) -> int:
    from app.commands import foreground

    runner = {"backend": foreground.run_backend_server, "ranks-host": foreground.run_ranks_host,
              "tiny-model": foreground.run_tiny_model}.get(args.command, foreground.run_taskapp_server)
    return runner(args)


def _attach(args: argparse.Namespace, interactive: bool) -> int:
    from app.commands.embedded_backend import refuse_embedded_attach

    refuse_embedded_attach(args)
    if not interactive:
        from app.headless.watch import run_attach

        return run_attach(args)
    from app.tui import run_attach_tui

    return run_attach_tui(_session(args), args.job_id)


def _history(args: argparse.Namespace, interactive: bool) -> int:
    if not interactive:
        from app.headless.listings import run_history

        return run_history(args)
    from app.tui import run_history_tui

    return run_history_tui(_session(args))


def _compare(args: argparse.Namespace, interactive: bool) -> int:
    from app.commands.embedded_backend import refuse_embedded_attach

    refuse_embedded_attach(args, to="compare")
    if not interactive:
        from app.headless.listings import run_compare

        return run_compare(args)
    from app.tui import run_compare_tui

    return run_compare_tui(_session(args), args.job_ids)


def _serve(args: argparse.Namespace, interactive: bool) -> int:
    from app.web.command import run_serve

    return run_serve(args)


def _rollouts(args: argparse.Namespace, interactive: bool) -> int:
    """Headless only: the TUI shows the rollouts from the dashboard."""
    from app.commands.embedded_backend import refuse_embedded_attach
    from app.headless.listings import run_rollouts

    refuse_embedded_attach(args, to="show the rollouts of")
    return run_rollouts(args)


def _jobs(args: argparse.Namespace, interactive: bool) -> int:
    from app.commands.embedded_backend import refuse_embedded_attach

    refuse_embedded_attach(args, to="list")
    if not interactive:
        from app.headless.listings import run_jobs

        return run_jobs(args)
    from app.tui import run_jobs_tui

    return run_jobs_tui(_session(args), status=args.status, max_jobs=args.limit, page_size=args.page_size,
                        sort=args.sort)


_RUNNERS: dict[str, Callable[[argparse.Namespace, bool], int]] = {
    "train": _train, "demo": _demo, "lab": _lab, "backend": _server, "taskapp": _server, "tiny-model": _server,
    "ranks-host": _server, "attach": _attach,
    "history": _history, "compare": _compare, "serve": _serve, "rollouts": _rollouts, "jobs": _jobs,
}


def _session(args: argparse.Namespace) -> LaunchSession:
    return LaunchSession(LaunchOptions.from_args(args))


def has_terminal() -> bool:
    """A terminal, or a browser tab of ``synth-tui serve``: there stdin and stdout are pipes to the
    server and Textual draws through its web driver, which textual-serve names in TEXTUAL_DRIVER."""
    return (sys.stdin.isatty() and sys.stdout.isatty()) or os.environ.get("TEXTUAL_DRIVER") == WEB_DRIVER

