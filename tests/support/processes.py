"""The processes a process started, read from /proc (Linux), and stopping a bed's together."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from streamctl.processes import Child


def children_of(pid: int) -> list[int]:
    """The processes that `pid`'s threads started and that are not reaped yet."""
    found = []
    with contextlib.suppress(FileNotFoundError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):
                found += [int(child) for child in (task / "children").read_text().split()]
    return found


def stop_together(children: Sequence[Child], timeout_s: float = 30.0) -> None:
    """Each child stopped as `Child.stop` does, all at once: a bed's Spark jobs and controllers
    shut down side by side (one after another, a test's teardown waited for each in turn)."""
    if children:
        with ThreadPoolExecutor(len(children)) as pool:
            list(pool.map(lambda child: child.stop(timeout_s), children))
