"""The processes a process started, read from /proc (Linux)."""

from __future__ import annotations

import contextlib
from pathlib import Path


def children_of(pid: int) -> list[int]:
    """The processes that `pid`'s threads started and that are not reaped yet."""
    found = []
    with contextlib.suppress(FileNotFoundError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):
                found += [int(child) for child in (task / "children").read_text().split()]
    return found
