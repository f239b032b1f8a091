"""Serve one of these task apps with uvicorn on a loopback port: the child process that
harness.py starts (it needs a Python with synth-ai 0.5.0; ours need not have it).

    python -m sdk_taskapps.serve context_free|guess_number --port-file PATH [--host H] [--port P]

The key comes from the environment, as in every app built on the SDK: ENVIRONMENT_API_KEY
(and ENVIRONMENT_API_KEY_ALIASES=k1,k2). Port 0 (the default) takes a free port; the port bound
is written to --port-file (atomically) once the socket is bound, before uvicorn starts.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from pathlib import Path

import uvicorn

APPS = ("context_free", "guess_number")


def build(name: str):  # -> FastAPI
    from .episode import build_app

    if name == "context_free":
        from .context_free import GAME
    else:
        from .guess_number import GAME
    return build_app(GAME)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sdk_taskapps.serve")
    parser.add_argument("app", choices=APPS)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--port-file", type=Path, required=True)
    args = parser.parse_args(argv)

    app = build(args.app)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    partial = args.port_file.with_name(args.port_file.name + ".partial")
    partial.write_text(str(sock.getsockname()[1]))
    os.replace(partial, args.port_file)
    config = uvicorn.Config(app, host=args.host, port=sock.getsockname()[1], log_level="warning",
                            access_log=False, lifespan="on", timeout_graceful_shutdown=3)
    uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    sys.exit(main())
