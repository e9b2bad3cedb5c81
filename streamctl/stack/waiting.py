"""Bounded waiting: a monotonic deadline and a poll loop, so no wait in the stack can hang.

Neighbours: `broker` (readiness, shutdown) and `topics` (metadata propagation) poll through
`poll_until`; tests use `Deadline` for their own loops.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Deadline:
    """A point on the monotonic clock; `remaining_s` never goes below zero."""

    at: float

    @classmethod
    def after(cls, timeout_s: float) -> Deadline:
        return cls(time.monotonic() + timeout_s)

    def remaining_s(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.at


def poll_until(
    probe: Callable[[], T | None], timeout_s: float, interval_s: float = 0.1
) -> T | None:
    """Call `probe` until it returns something other than None, or the deadline passes.

    Returns the probe's value, or None on timeout. The probe is always called at least once
    and once more right at the deadline, so a zero timeout still gets one honest look.
    """
    deadline = Deadline.after(timeout_s)
    while True:
        result = probe()
        if result is not None or deadline.expired():
            return result
        time.sleep(min(interval_s, deadline.remaining_s()))
