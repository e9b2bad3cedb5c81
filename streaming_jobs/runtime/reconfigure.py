"""The reconfiguration protocol: quiesce → apply → restart from the checkpoint → measure.

Owns the one thing that changes a running query's settings, its rollback when the restart
fails, and the definition of the pause it reports. Callers serialize calls (the control loop
handles one tuple at a time). Neighbours: `lifecycle` (the query), `control` (calls `apply`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from streaming_jobs.runtime.lifecycle import Commit, Knobs

log = logging.getLogger(__name__)

QUIESCE_TIMEOUT_S = 120.0
"""Upper bound on waiting for admitted batches to commit (a batch is capped by
max_offsets_per_trigger, so this is far above a normal wait)."""
IDLE_GRACE_S = 3.0
"""After a restart, how long to wait for a batch before an idle query ends the pause."""
FIRST_COMMIT_TIMEOUT_S = 120.0


class RestartFailed(RuntimeError):
    """The restarted query did not come up; the previous settings are back in force."""


@dataclass(frozen=True)
class Applied:
    pause_ms: int
    detail: str


class RestartableQuery(Protocol):
    """What the protocol needs of a query (`lifecycle.ElasticQuery`, or a test double)."""

    @property
    def knobs(self) -> Knobs: ...

    @property
    def last_commit(self) -> Commit | None: ...

    def quiesce_and_stop(self, timeout_s: float) -> bool: ...

    def start(self, knobs: Knobs) -> str: ...

    def wait_commit(self, run_id: str, timeout_s: float) -> Commit | None: ...

    def failure(self) -> str | None: ...

    def is_active(self) -> bool: ...

    def is_idle(self) -> bool: ...


class Reconfigurer:
    """Applies new knobs to a query at a batch boundary."""

    def __init__(self, query: RestartableQuery, clock_ms: Callable[[], int] | None = None) -> None:
        self._query = query
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))

    def apply(self, new: Knobs) -> Applied:
        """Restart with `new`; raises RestartFailed after rolling back.

        The pause is measured from the commit of the last batch before the change (or the start
        of the quiesce if nothing had committed yet) to the commit of the first batch of the
        restarted query — the gap in committed output, which includes the quiesce wait, the
        restart and that first batch's own execution (often the replay of the batch the gate
        held back). If no batch arrives within IDLE_GRACE_S, the pause ends at the moment the
        restarted query is seen active and idle. The detail also names the shorter gap in which
        no batch ran at all (last commit → start of the first restarted batch).
        """
        old = self._query.knobs
        began_ms = self._clock_ms()
        drained = self._query.quiesce_and_stop(QUIESCE_TIMEOUT_S)
        since_ms = self._query.last_commit.end_ms if self._query.last_commit else began_ms
        stopped_ms = self._clock_ms()
        try:
            run_id = self._query.start(new)
            first = self._first_commit(run_id)
        except Exception as exc:
            self._roll_back(old)
            raise RestartFailed(f"restart with input_parallelism {new.input_parallelism} "
                                f"failed ({exc}); rolled back to {old.input_parallelism}") from exc
        resumed_ms = first.end_ms if first else self._clock_ms()
        detail = (f"input_parallelism {old.input_parallelism}→{new.input_parallelism}; "
                  f"quiesce {stopped_ms - began_ms} ms{'' if drained else ' (timed out)'}, "
                  + (f"restart to first commit {resumed_ms - stopped_ms} ms, no batch running "
                     f"for {max(0, first.start_ms - since_ms)} ms" if first else
                     f"restart to idle {resumed_ms - stopped_ms} ms (no new data)"))
        return Applied(pause_ms=max(0, resumed_ms - since_ms), detail=detail)

    def _first_commit(self, run_id: str) -> Commit | None:
        """The restarted run's first commit, or None once it is seen active and idle."""
        deadline = time.monotonic() + FIRST_COMMIT_TIMEOUT_S
        grace_until = time.monotonic() + IDLE_GRACE_S
        while time.monotonic() < deadline:
            commit = self._query.wait_commit(run_id, 0.2)
            if commit is not None:
                return commit
            failure = self._query.failure()
            if failure is not None or not self._query.is_active():
                raise RuntimeError(failure or "query stopped right after starting")
            if time.monotonic() >= grace_until and self._query.is_idle():
                return None
        raise RuntimeError(f"no batch committed within {FIRST_COMMIT_TIMEOUT_S:.0f} s")

    def _roll_back(self, old: Knobs) -> None:
        log.error("restart failed; rolling back to input_parallelism %d", old.input_parallelism)
        if self._query.is_active():
            self._query.quiesce_and_stop(QUIESCE_TIMEOUT_S)
        self._query.start(old)
