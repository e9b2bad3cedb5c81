"""Local TCP ports: finding free ones and refusing to start on taken ones.

Owns the pre-start port check, so a taken port is reported by name with the option that
changes it, instead of surfacing later as a Java BindException in the broker log.
Neighbours: `broker` (checks before launching), test fixtures (`find_free_ports`).
"""

from __future__ import annotations

import random
import socket
from collections.abc import Iterable
from pathlib import Path

from streamctl.stack.errors import PortInUseError

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


_LISTEN_FLOOR = 20000
"""Lowest port handed out: above the well-known and commonly configured service ports."""


def find_free_ports(count: int) -> list[int]:
    """`count` distinct ports, free a moment ago, below the kernel's ephemeral range.

    A port from `bind(0)` is an ephemeral one: between our check and the server's own bind,
    another process (Spark's JVM, py4j, any client connection) can take it as a random local
    port (seen here: a job's metrics port answered with py4j's gateway). Below the ephemeral
    range only an explicit bind takes a port.
    """
    low = _ephemeral_floor()
    ports: list[int] = []
    for candidate in random.sample(range(_LISTEN_FLOOR, low), min(400, low - _LISTEN_FLOOR)):
        if candidate not in ports and not port_in_use(candidate):
            ports.append(candidate)
            if len(ports) == count:
                return ports
    raise RuntimeError(f"no {count} free ports between {_LISTEN_FLOOR} and {low}")


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default, when the range cannot be read (not Linux)
