"""The reconfiguration protocol: quiesce → apply → resume → measure, for every parameter.

Owns the one thing that changes a running query's desired state, the two ways a change takes
effect (restart the query from its checkpoint, or swap a per-batch setting while the gate holds
new batches), the rollback when that fails, and the definition of the pause it reports.
Its caller, the query's owner (`owner.QueryOwner`), runs one change at a time. Neighbours:
`ports.QueryControl` (the query), `parameters` (which path a change takes).
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from streaming_jobs.errors import ChangeFailed, RequestRefused
from streaming_jobs.runtime.checkpoint.input_switch import SwitchRefused
from streaming_jobs.runtime.checkpoint.retention import InputDeleted
from streaming_jobs.runtime.desired.parameters import READ_BY_TASKS, Apply, apply_path
from streaming_jobs.runtime.desired.state import DesiredState
from streaming_jobs.runtime.ports import Commit, QueryControl

log = logging.getLogger(__name__)

QUIESCE_TIMEOUT_S = 120.0
"""Upper bound on waiting for admitted batches to commit (a batch is capped by
max_offsets_per_trigger, so this is far above a normal wait)."""
IDLE_GRACE_S = 3.0
"""After a restart, how long to wait for a batch before an idle query ends the pause."""
FIRST_COMMIT_TIMEOUT_S = 120.0


class RestartFailed(ChangeFailed):
    """The change could not be applied; the previous settings are back in force."""


class Refused(RequestRefused):
    """A precondition of the change does not hold; nothing was changed or restarted."""


@dataclass(frozen=True)
class Applied:
    pause_ms: int
    detail: str


class Reconfigurer:
    """Applies a new desired state to a query at a batch boundary."""

    def __init__(self, query: QueryControl, clock_ms: Callable[[], int] | None = None) -> None:
        self._query = query
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))

    def apply(self, new: DesiredState) -> Applied:
        """Swap or restart into `new`; raises RestartFailed after rolling back."""
        old = self._query.desired
        change = old.describe_change(new)
        path = apply_path(old, new)
        if path is Apply.ROLE:  # a caller's bug: the query's settings are not what changes
            raise ValueError(f"{change}: a change of the active instance is a promotion or "
                             "a step-down (standby.Instance.change_role), not a reconfiguration")
        if path is Apply.SWAP:
            return self._swap(old, new, change)
        if new.input_topic != old.input_topic:
            change = f"{change}; {self._drain(new.input_topic)}"
        return self._restart(old, new, change)

    def _drain(self, topic: str) -> str:
        """An input switch first lets the running query read the old topic to its end."""
        try:
            return self._query.drain_input(topic)
        except SwitchRefused as exc:
            raise Refused(f"cannot switch the input to {topic}: {exc}") from exc

    def _swap(self, old: DesiredState, new: DesiredState, change: str) -> Applied:
        """Hold new batches at the gate, let admitted ones commit, swap, release, settle.

        No restart: the running query reads the swapped setting from its next batch on. The
        pause is the time new batches were held. Settling (executors registering after a
        request) happens after the release, while batches run; the ack reports it. A value
        the tasks run (`READ_BY_TASKS`: a function version, a shed fraction) is only known to
        work once a batch has run with it, so the change waits for that batch; if it fails,
        the query restarts with the previous settings and replays it.
        """
        began_ms = self._clock_ms()
        drained = self._query.hold(QUIESCE_TIMEOUT_S)
        before = self._query.last_commit
        try:
            self._query.swap(new)
        except Exception as exc:
            log.error("swap to %s failed (%s); restoring the previous settings", change, exc)
            self._query.swap(old)
            raise RestartFailed(f"{change} failed ({exc}); rolled back") from exc
        finally:
            self._query.release()
        held_ms = self._clock_ms() - began_ms
        settled = self._query.settle(old, new)
        ran = (self._first_batch_after(old, change, before)
               if READ_BY_TASKS & set(old.changed(new)) else None)
        return Applied(pause_ms=held_ms, detail=(
            f"{change}; swapped at a batch boundary without a restart, new batches held "
            f"{held_ms} ms{'' if drained else ' (quiesce timed out)'}"
            + "".join(f"; {note}" for note in (settled, ran) if note)))

    def _first_batch_after(self, old: DesiredState, change: str, before: Commit | None) -> str:
        """Wait for the swap's first batch; roll back and raise if it fails."""
        try:
            first = next_commit(self._query, before)
        except Exception as exc:
            self._roll_back(old)
            raise RestartFailed(f"{change} failed in the first batch after the swap ({exc}); "
                                f"restarted with the settings of epoch {old.epoch}") from exc
        return (f"the first batch with it committed (batch {first.batch_id})" if first
                else "no batch has run with it yet (no new data)")

    def _restart(self, old: DesiredState, new: DesiredState, change: str) -> Applied:
        """Restart with `new` from the checkpoint.

        The pause is the gap in committed output the change caused: from whichever is later,
        the commit of the last batch before the change or the moment the change began, to the
        commit of the first batch of the restarted query. It includes the wait for a running
        batch (quiesce), the restart and that first batch's own execution (often the replay of
        the batch the gate held back); it leaves out the time the query had been idle before
        the change, which the detail names apart, and the warming of the Python workers the
        restarted run will need (`warm_workers`), done before the quiesce while the old run
        still commits. If no batch arrives within IDLE_GRACE_S,
        the pause ends at the moment the restarted query is seen active and idle. The detail
        also names the shorter gap in which no batch ran at all.
        """
        warmed = self._query.warm_workers(new)  # the old run keeps committing meanwhile
        began_ms = self._clock_ms()
        drained = self._query.quiesce_and_stop(QUIESCE_TIMEOUT_S)
        since_ms, idle_ms = pause_start(self._query.last_commit, began_ms)
        stopped_ms = self._clock_ms()
        try:
            run_id = self._query.start(new)
            first = first_commit(self._query, run_id)
        except Exception as exc:
            self._roll_back(old)
            raise RestartFailed(f"restart with {change} failed ({exc}); rolled back to "
                                f"epoch {old.epoch}") from exc
        resumed_ms = first.end_ms if first else self._clock_ms()
        note = "".join(f"{n}, " for n in (warmed, self._query.start_note) if n)
        detail = (f"{change}; {note}"
                  f"quiesce {stopped_ms - began_ms} ms{'' if drained else ' (timed out)'}, "
                  + (f"restart to first commit {resumed_ms - stopped_ms} ms, no batch running "
                     f"for {max(0, first.start_ms - since_ms)} ms" if first else
                     f"restart to idle {resumed_ms - stopped_ms} ms (no new data)")
                  + (f"; idle {idle_ms} ms before the change, not in the pause"
                     if idle_ms else ""))
        return Applied(pause_ms=max(0, resumed_ms - since_ms), detail=detail)

    def _roll_back(self, old: DesiredState) -> None:
        log.error("restart failed; rolling back to the desired state of epoch %d", old.epoch)
        if self._query.is_active():
            self._query.quiesce_and_stop(QUIESCE_TIMEOUT_S)
        with contextlib.suppress(InputDeleted):  # reported as found; halted whatever changed
            self._query.start(old)


def pause_start(last_commit: Commit | None, began_ms: int) -> tuple[int, int]:
    """Where a change's pause starts, and the idle time before it that it leaves out.

    When the quiesce let a running batch finish, output stopped at that batch's commit; when
    the last commit is older than the change, output stopped when the change began: the time
    before it, idle or between batches, is no pause the change caused (an ack would otherwise
    report a minute of idleness for a 3 s restart)."""
    if last_commit is None or last_commit.end_ms >= began_ms:
        return (last_commit.end_ms if last_commit else began_ms), 0
    return began_ms, began_ms - last_commit.end_ms


def first_commit(query: QueryControl, run_id: str) -> Commit | None:
    """A (re)started run's first commit, or None once it is seen active and idle; raises
    RuntimeError when the run fails or nothing commits within FIRST_COMMIT_TIMEOUT_S."""
    return _await_commit(query, lambda: query.wait_commit(run_id, 0.2))


def next_commit(query: QueryControl, after: Commit | None) -> Commit | None:
    """The running query's first commit after `after`, or None once it is seen idle; raises
    like `first_commit`."""
    def newer() -> Commit | None:
        commit = query.last_commit
        if commit is not None and commit != after:
            return commit
        time.sleep(0.1)  # the listener thread records commits; nothing to wait on here
        return None

    return _await_commit(query, newer)


def _await_commit(query: QueryControl, found: Callable[[], Commit | None]) -> Commit | None:
    deadline = time.monotonic() + FIRST_COMMIT_TIMEOUT_S
    grace_until = time.monotonic() + IDLE_GRACE_S
    while time.monotonic() < deadline:
        commit = found()
        if commit is not None:
            return commit
        failure = query.failure()
        if failure is not None:
            log.error("the query failed: %s", failure)
            raise RuntimeError(short_failure(failure))
        if not query.is_active():
            raise RuntimeError("the query stopped")
        if time.monotonic() >= grace_until and query.is_idle():
            return None
    raise RuntimeError(f"no batch committed within {FIRST_COMMIT_TIMEOUT_S:.0f} s")


_EXCEPTION_LINE = re.compile(r"^(?:Caused by: )?([\w$.]+(?:Error|Exception)): (.+)$")
_QUERY_PREFIX = re.compile(r"^\[STREAM_FAILED\] Query \[.*?\] terminated with exception: ")
FAILURE_DETAIL_CHARS = 300
"""An ack carries the failure's gist; the full text (tracebacks, the plan) is in the log."""


def short_failure(text: str) -> str:
    """A query's termination error in one line for an ack: the innermost exception
    (`ValueError: …`) if the text names one, else its first line."""
    body = text.split("=== Streaming Query ===")[0]
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    causes = [m for m in map(_EXCEPTION_LINE.match, lines) if m]
    if causes:
        name, message = causes[-1].groups()
        summary = f"{name.rsplit('.', 1)[-1]}: {message}"
    else:
        summary = _QUERY_PREFIX.sub("", lines[0]) if lines else "unknown failure"
    return summary[:FAILURE_DETAIL_CHARS]
