"""The broker's OS process: pid record, liveness, graceful termination, log tail.

Owns the pid file format and the stop protocol (SIGTERM so Kafka does a controlled shutdown,
SIGKILL after a deadline). Works both for a process this Python process started (it is reaped)
and for one started by an earlier `streamctl stack up` (polled via /proc or signal 0).
Neighbour: `broker`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from streamctl.stack.waiting import poll_until


@dataclass(frozen=True)
class PidRecord:
    pid: int
    port: int
    controller_port: int

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)) + "\n")

    @classmethod
    def read(cls, path: Path) -> PidRecord | None:
        try:
            return cls(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            return None


def is_alive(pid: int, marker: str | None = None) -> bool:
    """True if `pid` runs and is not a zombie; with /proc, its command line must hold `marker`
    (see `proc_entry_alive`)."""
    proc = Path(f"/proc/{pid}")
    if proc.is_dir():
        try:
            stat = (proc / "stat").read_text()
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            return False
        return proc_entry_alive(stat, cmdline, marker)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def proc_entry_alive(stat: str, cmdline: bytes, marker: str | None) -> bool:
    """Whether a /proc entry (`stat`, `cmdline`) is a live process running `marker`.

    The marker (the server.properties path) guards against a recycled pid after a reboot.
    A command line that is still empty is a process in the middle of `exec` (seen right after
    `Popen` returns, while the new image is set up): it is alive, and what it will run cannot
    be told yet, so it is not refused for the marker.
    """
    fields = stat.rsplit(")", 1)  # the command name in parentheses may itself hold spaces
    if len(fields) < 2 or not fields[1].split():
        return False
    if fields[1].split()[0] == "Z":
        return False
    return marker is None or not cmdline or marker in cmdline.decode(errors="replace")


def terminate(pid: int, timeout_s: float, child: subprocess.Popen[bytes] | None = None) -> bool:
    """SIGTERM, wait up to `timeout_s`, then SIGKILL. True if it stopped without SIGKILL."""
    _signal(pid, signal.SIGTERM)
    if _wait_gone(pid, timeout_s, child):
        return True
    _signal(pid, signal.SIGKILL)
    _wait_gone(pid, 10.0, child)
    return False


def tail(path: Path, lines: int = 40) -> str:
    """The last `lines` lines of a log file, or a note that there is none."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - 64 * 1024))  # enough for 40 log lines
            text = handle.read().decode(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone is what we want
        os.kill(pid, sig)


def _wait_gone(pid: int, timeout_s: float, child: subprocess.Popen[bytes] | None) -> bool:
    if child is not None:
        try:
            child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True
    return poll_until(lambda: True if not is_alive(pid) else None, timeout_s, 0.1) is not None
