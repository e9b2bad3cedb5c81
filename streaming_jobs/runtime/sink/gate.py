"""The quiesce gate: which micro-batches may still write, and when all of them have committed.

A batch is *admitted* when it enters the foreachBatch sink while the gate is open, and
*committed* when its progress event arrives (Spark posts onQueryProgress after writing the
commit log entry). Once the gate is closed a batch entering the sink raises `QuiesceRequested`
before executing anything: its offsets are in the offset log, nothing of it was written, and
Spark replays it when the query restarts from the checkpoint. A *held* gate instead makes a
batch entering the sink wait until it is released: that is how a setting the running query
reads per batch (the sink's topic) is swapped at a batch boundary without a restart.

The gate is also where an instance that lost its query to another one stops: before admitting
a batch it asks `ownership` (the shared desired-state file) whether another instance was made
active since; if so the batch raises `Superseded` before executing anything, like a quiesce,
and the gate remembers why. Neighbours: `foreach_batch` (admits), `lifecycle` (commits,
closes, holds, waits), `standby` (reads `superseded`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from streaming_jobs.errors import Fenced, JobError


class QuiesceRequested(JobError):
    """Raised in foreachBatch while a reconfiguration is pending; the batch will be replayed.
    The runtime's own stop, not a failure (`is_gate_stop`)."""

    batch_id: int | None

    def __init__(self, batch_id: int) -> None:
        super().__init__(f"batch {batch_id} held back: quiescing for a reconfiguration")
        self.batch_id = batch_id


class Superseded(QuiesceRequested, Fenced):
    """Raised in foreachBatch when another instance owns the query now: this one must not run
    the batch (no state, no output, no commit-log entry), nor start the sink's producer
    (`batch_id` None), which would fence the owner's."""

    def __init__(self, batch_id: int | None, reason: str) -> None:
        what = "the sink not started" if batch_id is None else f"batch {batch_id} not run"
        Exception.__init__(self, f"{what}: superseded, {reason}")
        self.batch_id = batch_id
        self.reason = reason


def is_gate_stop(error_text: str | None) -> bool:
    """Whether a query's termination error is our own gate (normal), not a failure."""
    return error_text is not None and any(
        cls.__name__ in error_text for cls in (QuiesceRequested, Superseded))


Ownership = Callable[[], "str | None"]
"""Why this instance no longer owns the query, or None while it does."""


class HideGateStops(logging.Filter):
    """Drops py4j's error log of a foreachBatch callback that raised `QuiesceRequested`.

    py4j logs every exception raised in a Python callback with a traceback; for the gate that
    is a normal stop, not an error.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], QuiesceRequested))


class BatchGate:
    """Thread-safe set of admitted-but-uncommitted batches plus an open/closed flag."""

    def __init__(self, ownership: Ownership | None = None) -> None:
        self._ownership = ownership
        self.superseded: str | None = None
        """Why a batch was refused because another instance owns the query (None: never)."""
        self._cond = threading.Condition()
        self._closed = False
        self._held = False
        self._admitted: set[int] = set()
        self.last_admitted: int | None = None
        """The newest batch admitted since the gate was opened (None: none)."""

    def admit(self, batch_id: int) -> None:
        self.require_owner(batch_id)
        with self._cond:
            while self._held and not self._closed:
                self._cond.wait(0.2)
            if self._closed:
                raise QuiesceRequested(batch_id)
            self._admitted.add(batch_id)
            self.last_admitted = max(batch_id, self.last_admitted or batch_id)

    def require_owner(self, batch_id: int | None = None) -> None:
        """Raise `Superseded` (and remember why) when another instance owns the query now."""
        reason = self._ownership() if self._ownership is not None else None
        if reason is not None:
            self.superseded = reason
            raise Superseded(batch_id, reason)

    def committed(self, batch_id: int) -> None:
        with self._cond:
            self._admitted = {b for b in self._admitted if b > batch_id}
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def hold(self) -> None:
        """New batches wait in `admit` until `release` (admitted ones carry on)."""
        with self._cond:
            self._held = True

    def release(self) -> None:
        with self._cond:
            self._held = False
            self._cond.notify_all()

    def open(self) -> None:
        """Reopen for a restarted query; a batch admitted but never committed will replay."""
        with self._cond:
            self._closed = False
            self._held = False
            self._admitted.clear()
            self.last_admitted = None
            self.superseded = None

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed

    def wait_drained(self, timeout_s: float, terminated: Callable[[], bool]) -> bool:
        """Until every admitted batch committed or the query terminated; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._admitted and not terminated():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                # Short waits: query termination is not signalled through this condition.
                self._cond.wait(min(remaining, 0.2))
            return True
