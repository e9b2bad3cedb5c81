"""`streamctl demo` stops every process it started when it is told to stop (SIGTERM here,
which takes the same path as Ctrl-C), so nothing is left running behind a demo: the broker,
the job with its Spark driver, the controller, and anything else below it."""

from __future__ import annotations

import contextlib
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from streamctl.stack.defaults import default_state_dir
from streamctl.stack.tcp import find_free_ports, port_in_use
from tests.support.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def _free_port_pair() -> int:
    """The demo's broker takes `port` and `port + 1` (its KRaft controller listener)."""
    for _ in range(50):
        (port,) = find_free_ports(1)
        if not port_in_use(port + 1):
            return port
    raise RuntimeError("no two consecutive free ports")


def _descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the process ended while we looked
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier}
        found |= frontier
    return found


def _role(pid: int) -> str | None:
    """What a process of the demo is, from its command line."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    if "kafka.Kafka" in args:
        return "broker"
    if "org.apache.spark.deploy.SparkSubmit" in args:
        return "spark driver"
    if args[1:4] == ["-m", "streamctl", "job"]:
        return "job"
    if args[1:4] == ["-m", "streamctl", "controller"]:
        return "controller"
    return None


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _state_dir(tmp_path: Path) -> Path:
    """A fresh state directory holding only the Maven resolutions this checkout already made:
    the demo's three would be 6 s of Maven, which is not under test here (the guide's example
    test resolves afresh)."""
    state = tmp_path / "state"
    resolved = default_state_dir() / "maven"
    if resolved.is_dir():
        shutil.copytree(resolved, state / "maven")
    return state


def test_sigterm_stops_the_broker_job_and_controller(tmp_path: Path) -> None:
    env = {**os.environ, "STREAMCTL_STATE_DIR": str(_state_dir(tmp_path))}
    demo = subprocess.Popen(
        [sys.executable, "-m", "streamctl", "demo", "--port", str(_free_port_pair()),
         "--duration-s", "600"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in demo.stdout or ()],
                     daemon=True).start()
    seen: list[str] = []
    started: set[int] = set()
    try:
        _stop_when_loaded(demo, lines, seen, started)
    finally:  # whatever failed above, nothing of the demo outlives the test
        if demo.poll() is None:
            started |= _descendants(demo.pid)
            demo.kill()
        for pid in started:
            if _alive(pid) and _role(pid) is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _stop_when_loaded(demo: subprocess.Popen[str], lines: queue.Queue[str], seen: list[str],
                      started: set[int]) -> None:
    """Once the demo's load runs: its processes are the broker, the job with its Spark
    driver and the controller; SIGTERM ends the demo (exit 130) and every one of them."""
    def load_started() -> bool:
        assert demo.poll() is None, "the demo exited early:\n" + "".join(seen)
        with contextlib.suppress(queue.Empty):
            seen.append(lines.get(timeout=1))
        return any(line.startswith("load:") for line in seen)

    until(load_started, 180, "the demo to start its load", 0)
    started |= _descendants(demo.pid)
    roles = {_role(pid) for pid in started}
    assert {"broker", "job", "spark driver", "controller"} <= roles, roles
    demo.send_signal(signal.SIGTERM)
    assert demo.wait(90) == 130
    until(lambda: not {pid for pid in started if _alive(pid)}, 60,
          "every process the demo started to end", 0.5)
