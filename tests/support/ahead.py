"""A unit of work that runs ahead of the others: its worker, and every process it starts, in a
cpu cgroup that outweighs every session.

Under `sched_autogroup` (on by default) every session is a scheduling group of its own, and
groups share the CPU by weight whatever their tasks' nice, so a priority cannot put a unit
ahead: its jobs, drivers and brokers each lead a session. A task in a cgroup other than the
root one is out of autogrouping, and the cgroup weighs `cpu.shares` against each session's
1 024; children inherit their parent's cgroup whatever session they start.

Only cgroup v1's cpu hierarchy, where this process may write it (root, outside a container);
elsewhere `Ahead.enter` says no and the caller holds the machine exclusively instead.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from pathlib import Path

from streamctl.stack.process import is_alive
from tests.support.processes import children_of

CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")

AHEAD_SHARES = 4_096
"""Four sessions' weight: the unit gets most of the CPU it asks for while the other units'
processes keep their time (at sixteen sessions' weight, jobs of the failover tests, lost after
2.5 s without a liveness beat, missed beats and were failed over before their fault)."""

_PREFIX = "streamctl-tests-ahead-"


class Ahead:
    """One worker's cgroup, entered for a unit and left after it."""

    def __init__(self) -> None:
        self._group: Path | None = None
        self._home: Path | None = None

    def enter(self) -> bool:
        """This process and every process it started into a cgroup of its own at
        `AHEAD_SHARES`; False where it may not (then nothing moved)."""
        if self._group is not None:
            return True
        home = cgroup_of(os.getpid())
        group = CPU_CGROUPS / f"{_PREFIX}{os.getpid()}"
        if home is None:
            return False
        _sweep()
        try:
            group.mkdir(exist_ok=True)
            (group / "cpu.shares").write_text(str(AHEAD_SHARES))
        except OSError:
            return False
        self._group, self._home = group, home
        try:
            _move_tree(os.getpid(), group)
        except OSError:
            self.leave()
            return False
        return True

    def leave(self) -> None:
        """Everything still in the group (this process, a session broker the unit started)
        back where this process was, and the group removed."""
        group, home, self._group, self._home = self._group, self._home, None, None
        if group is not None and home is not None:
            _dissolve(group, home, tries=50)  # a process exiting is listed for a moment


def cgroup_of(pid: int) -> Path | None:
    """The directory of `pid`'s cgroup in the cpu hierarchy; None without one."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "cpu" in controllers.split(","):
                return CPU_CGROUPS / path.lstrip("/")
    return None


def _move_tree(root: int, group: Path) -> None:
    """`root` and its descendants into `group`, each before its children are read: a child
    started meanwhile is born in the group."""
    todo = [root]
    while todo:
        pid = todo.pop()
        _move(pid, group)
        todo += children_of(pid)


def _move(pid: int, group: Path) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        (group / "cgroup.procs").write_text(str(pid))


def _sweep() -> None:
    """The groups of workers that died in their unit (their process is gone): what they
    started back in the root group, the group removed; named when it cannot be."""
    for left in CPU_CGROUPS.glob(f"{_PREFIX}*"):
        owner = left.name.removeprefix(_PREFIX)
        if not owner.isdigit() or is_alive(int(owner)):
            continue  # not one of ours, or a worker of a run going on now
        _dissolve(left, CPU_CGROUPS, tries=1)


def _dissolve(group: Path, into: Path, tries: int) -> None:
    """Every process in `group` moved `into` another, and `group` removed; said when it
    cannot be within `tries`."""
    for attempt in range(tries):
        if attempt:
            time.sleep(0.02)
        with contextlib.suppress(OSError):
            for pid in (group / "cgroup.procs").read_text().split():
                _move(int(pid), into)
            group.rmdir()
            return
    warnings.warn(f"{group} kept its processes: {_listed(group)}", stacklevel=3)


def _listed(group: Path) -> str:
    with contextlib.suppress(OSError):
        return " ".join((group / "cgroup.procs").read_text().split()) or "none"
    return "unreadable"
