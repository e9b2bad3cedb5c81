"""The one way a test waits: poll a condition under a hard time budget (the stack's own
`poll_until`), fail naming what it waited for. No test sleeps and hopes."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from streamctl.processes import Child
from streamctl.stack.waiting import poll_until

T = TypeVar("T")


def until(condition: Callable[[], T | None], timeout_s: float, what: str,
          interval_s: float = 0.1, *, alive: Sequence[Child] = ()) -> T:
    """Call `condition` until it returns something truthy (returned), at most `timeout_s`;
    then fail with `what`. A condition that blocks briefly itself (a Kafka poll) may pass
    `interval_s=0`. Each of the `alive` processes must keep running meanwhile; a failure
    shows the end of their logs. How long each wait took is printed (pytest shows it beside a
    failure, or with `-s`): where a slow test's time went."""
    started = time.monotonic()

    def check() -> T | None:
        for child in alive:
            assert child.alive(), f"{child.name} exited while waiting for {what}:\n" \
                                  f"{child.log_tail()}"
        return condition() or None

    found = poll_until(check, timeout_s, interval_s)
    print(f"[{time.strftime('%H:%M:%S')}] {time.monotonic() - started:6.1f} s "
          f"{'waited for' if found is not None else 'gave up on'} {what}")
    if found is None:
        logs = "".join(f"\n--- {c.name}\n{c.log_tail(15)}" for c in alive)
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}{logs}")
    return found


def holds(condition: Callable[[], object], for_s: float, what: str,
          interval_s: float = 0.5) -> None:
    """Check that `condition` stays truthy for `for_s` seconds (something that must not
    happen within a bound the test derives from a setting); fail naming `what` the moment it
    does not."""
    end = time.monotonic() + for_s
    while True:
        assert condition(), f"no longer true: {what}"
        if time.monotonic() >= end:
            return
        time.sleep(min(interval_s, max(0.0, end - time.monotonic())))
