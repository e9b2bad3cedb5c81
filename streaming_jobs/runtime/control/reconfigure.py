"""What every change to a running query shares: its outcomes (`Applied`, `Refused`,
`RestartFailed`), the definition of the pause it reports (`pause_start`), the wait for the first
commit after it (`first_commit`, `next_commit`) and a failure's gist for an ack
(`short_failure`). The protocol that uses them is the owner's (`owner.Reconfigurer`) and the
role's (`roles.standby`, a promotion). Neighbours: `ports.QueryControl` (the query).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from streaming_jobs.errors import ChangeFailed, JobError, RequestRefused
from streaming_jobs.runtime.ports import Commit, QueryControl

log = logging.getLogger(__name__)

QUIESCE_TIMEOUT_S = 120.0
"""Upper bound on waiting for admitted batches to commit (a batch is capped by
max_offsets_per_trigger, so this is far above a normal wait)."""
IDLE_GRACE_S = 3.0
"""After a restart, how long to wait for a batch before an idle query ends the pause."""
FIRST_COMMIT_TIMEOUT_S = 120.0
"""Longest wait for a (re)started run's first commit before the change is judged failed."""


class RestartFailed(ChangeFailed):
    """The change could not be applied; the previous settings are back in force."""


class Refused(RequestRefused):
    """A precondition of the change does not hold; nothing was changed or restarted."""


class NoCommitYet(JobError, RuntimeError):
    """The run is active and has not failed, but committed nothing within
    FIRST_COMMIT_TIMEOUT_S: a cold first batch on a busy machine, or a stuck one."""


@dataclass(frozen=True)
class Applied:
    pause_ms: int
    detail: str


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
    RuntimeError when the run fails, NoCommitYet when nothing commits within
    FIRST_COMMIT_TIMEOUT_S."""
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
        if failure is None and not query.is_active():
            # read again after the activity: a run that terminated after the first read has
            # its exception set by now (Spark records it before it marks the query inactive)
            failure = query.failure()
            if failure is None:
                raise RuntimeError("the query stopped")
        if failure is not None:
            log.error("the query failed: %s", failure)
            raise RuntimeError(short_failure(failure))
        if time.monotonic() >= grace_until and query.is_idle():
            return None
    raise NoCommitYet(f"no batch committed within {FIRST_COMMIT_TIMEOUT_S:.0f} s")


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
