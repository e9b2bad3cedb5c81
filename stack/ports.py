"""Local TCP ports: finding free ones and refusing to start on taken ones.

Owns the pre-start port check, so a taken port is reported by name with the option that
changes it, instead of surfacing later as a Java BindException in the broker log.
Neighbours: `broker` (checks before launching), test fixtures (`find_free_ports`).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from contextlib import ExitStack

from stack.errors import PortInUseError

HOST = "127.0.0.1"


def port_in_use(port: int, host: str = HOST) -> bool:
    """True if binding `port` would fail, as it would for the broker's listener.

    SO_REUSEADDR mirrors the JVM's server sockets: a port held only by TIME_WAIT leftovers of
    a stopped broker is free, a port with a live listener (on any address) is not.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def check_ports_free(ports: Iterable[tuple[int, str, str]]) -> None:
    """Raise PortInUseError for the first taken port of (port, role, CLI option) triples."""
    for port, role, option in ports:
        if port_in_use(port):
            raise PortInUseError(
                f"port {port} ({role}) on {HOST} is already in use by another process: stop "
                f"that process or choose another port with `streamctl stack up {option} N`."
            )


def find_free_ports(count: int) -> list[int]:
    """`count` distinct ports that were free a moment ago (held together so none repeats)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind((HOST, 0))
        return [sock.getsockname()[1] for sock in socks]


def find_free_port() -> int:
    return find_free_ports(1)[0]
