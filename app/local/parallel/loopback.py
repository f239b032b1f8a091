"""`python -m app.local.parallel.loopback <accelerate launch's arguments>`: accelerate's launcher,
with torchrun's rendezvous store listening on loopback only. One machine's ranks are started
through it (launch.build_launch); several machines' through accelerate's launcher itself, whose
store the other machines must reach (docs/scaling.md#several-machines).

torch's TCPStore server listens on every interface whatever address it is given, and asks for no
key: any process that reached the port could write into a job's rendezvous (issue 41 item 5;
docs/hardening.md#8). TCPStore also takes a socket that already listens (`master_listen_fd`):
this launcher hands torchrun's static rendezvous one bound to 127.0.0.1, then runs accelerate's
launcher unchanged, in this process (where accelerate runs torchrun's agent).
"""

from __future__ import annotations

import importlib
import socket
import sys
from typing import Any

LOOPBACK = "127.0.0.1"
_listening: list[socket.socket] = []  # kept open for as long as the store serves on them


def loopback_socket(port: int) -> socket.socket:
    """A TCP socket listening on 127.0.0.1:`port` (0: a free port)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((LOOPBACK, port))
    sock.listen(socket.SOMAXCONN)
    return sock


def bind_store_to_loopback() -> None:
    """Make the store torchrun's static rendezvous serves listen on 127.0.0.1 only."""
    static: Any = importlib.import_module("torch.distributed.elastic.rendezvous.static_tcp_rendezvous")
    made = static.TCPStore

    def on_loopback(host: str, port: int, world_size: int | None = None, is_master: bool = False,
                    *args: Any, **kwargs: Any) -> Any:
        if is_master and kwargs.get("master_listen_fd") is None:
            sock = loopback_socket(port)
            _listening.append(sock)
            kwargs["master_listen_fd"] = sock.fileno()
        return made(host, port, world_size, is_master, *args, **kwargs)

    static.TCPStore = on_loopback


def main(argv: list[str]) -> None:
    bind_store_to_loopback()
    launch: Any = importlib.import_module("accelerate.commands.launch")
    sys.argv = ["accelerate-launch", *argv]
    launch.main()


if __name__ == "__main__":
    main(sys.argv[1:])
