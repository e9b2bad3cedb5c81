"""A network namespace joined to this one by a veth pair, for partition tests (needs root
and `ip`). `relay` makes the session's broker reachable from inside at the address it
advertises; `cut` and `heal` take the link down and up."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass


def unavailable() -> str | None:
    """Why a namespace cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@dataclass(frozen=True)
class Namespace:
    name: str
    host_if: str
    host_ip: str

    def command(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self) -> None:
        _ip("link", "set", self.host_if, "down")

    def heal(self) -> None:
        _ip("link", "set", self.host_if, "up")


@contextmanager
def namespace() -> Iterator[Namespace]:
    tag = uuid.uuid4().hex[:6]
    subnet = 10 + int(tag, 16) % 200
    ns = Namespace(f"streamctl-{tag}", f"sch-{tag}", f"10.213.{subnet}.1")
    _ip("netns", "add", ns.name)
    try:
        _ip("link", "add", ns.host_if, "type", "veth", "peer", "name", f"scn-{tag}")
        _ip("link", "set", f"scn-{tag}", "netns", ns.name)
        _ip("addr", "add", f"{ns.host_ip}/30", "dev", ns.host_if)
        _ip("link", "set", ns.host_if, "up")
        _ip("netns", "exec", ns.name, "ip", "addr", "add", f"10.213.{subnet}.2/30", "dev",
            f"scn-{tag}")
        _ip("netns", "exec", ns.name, "ip", "link", "set", f"scn-{tag}", "up")
        _ip("netns", "exec", ns.name, "ip", "link", "set", "lo", "up")
        yield ns
    finally:
        subprocess.run(["ip", "link", "del", ns.host_if], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", ns.name], capture_output=True, timeout=10)


@contextmanager
def relay(ns: Namespace, port: int) -> Iterator[None]:
    """Inside `ns`, 127.0.0.1:`port` reaches this side's 127.0.0.1:`port` (the broker) through
    the veth link: one relay on each side."""
    forward = [sys.executable, "-m", "tests.support.forward"]
    with ExitStack() as stack:
        for argv in ([*forward, f"{ns.host_ip}:{port}", f"127.0.0.1:{port}"],
                     ns.command([*forward, f"127.0.0.1:{port}", f"{ns.host_ip}:{port}"])):
            process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True)
            stack.callback(_stop, process)
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("forwarding"), f"{argv}: {line}"
        yield


def _stop(process: subprocess.Popen[str]) -> None:
    process.kill()
    process.wait(10)
