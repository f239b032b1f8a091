"""``synth-tui serve [--host H] [--port P] [COMMAND ...]`` (docs/browser.md): check the tab's
command, make the token, listen, print the URL, and serve until Ctrl+C or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import secrets
import signal
import socket
import sys
from collections.abc import Sequence

from aiohttp import web

from app.core.errors import ExitCode, UsageError
from app.web.server import BrowserServer

# What a tab may run: the commands that open a screen. `serve` (no command) is the guided session.
TAB_COMMANDS = ("train", "demo", "attach", "history", "jobs", "compare")
SERVE_OWN_FLAGS = ("--host", "--port")


def tab_command(words: Sequence[str]) -> list[str]:
    """The synth-tui command line each tab runs, checked here so that a mistake is a usage
    error on the terminal, not a tab that closes at once."""
    from app.cli.parser import build_parser, normalise_argv

    command = normalise_argv(words)
    if command[0] not in TAB_COMMANDS:
        raise UsageError(f"`synth-tui serve {command[0]}` is not served: a tab runs one of "
                         f"{', '.join(TAB_COMMANDS)} (or nothing: the guided session).")
    misplaced = [word.split("=", 1)[0] for word in command if word.split("=", 1)[0] in SERVE_OWN_FLAGS]
    if misplaced:
        raise UsageError(f"{misplaced[0]} belongs to serve: put it before the command, e.g. "
                         f"`synth-tui serve --port 8001 {command[0]} ...`.")
    if "--no-tui" in command:
        raise UsageError("--no-tui has no screen to serve.", "Run the command without serve for headless output.")
    try:
        build_parser().parse_args(command)
    except SystemExit as exc:  # argparse printed the problem
        raise UsageError(f"`synth-tui serve {' '.join(words)}`: the command after serve is not valid "
                         "(argparse said why, above).") from exc
    return command


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def page_url(host: str, port: int, token: str) -> str:
    if host in ("", "0.0.0.0", "::"):
        host = socket.gethostname()
    elif ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/?token={token}"


def run_serve(args: argparse.Namespace) -> int:
    command = tab_command(args.command_line)
    token = secrets.token_urlsafe(32)
    # One line a tab opened or closed, on stderr (never a URL: the token would be in it).
    logging.basicConfig(level=logging.INFO, format="synth-tui serve: %(message)s", stream=sys.stderr)
    if not is_loopback(args.host):
        print(f"Warning: listening on {args.host}, beyond this machine. Anyone who can reach it and learns the URL "
              "(it carries the token) uses this app with your keys; the connection is not encrypted. Prefer the "
              "default 127.0.0.1 with an SSH tunnel (ssh -L).", file=sys.stderr, flush=True)
    try:
        return asyncio.run(_serve(args.host, args.port, command, token))
    except OSError as error:
        raise UsageError(f"Cannot listen on {args.host}:{args.port}: {error.strerror or error}.",
                         "Pick another --port (0: any free port) or --host.") from None


async def _serve(host: str, port: int, command: list[str], token: str) -> int:
    server = BrowserServer(command, token)
    runner = server.runner()
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        site_port = int(runner.addresses[0][1])
        # Cookies do not tell ports apart: two servers on one host each need their own name.
        server.cookie_name = f"synth_tui_token_{site_port}"
        shown = " ".join(["synth-tui", *command]) if command != ["train"] else "synth-tui (the guided session)"
        print(f"Open {page_url(host, site_port, token)}", flush=True)
        print(f"Each tab runs its own `{shown}`; closing the tab stops it. Ctrl+C stops the server.",
              file=sys.stderr, flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        await stop.wait()
        return ExitCode.OK
    finally:
        await server.close_sessions()
        await runner.cleanup()

