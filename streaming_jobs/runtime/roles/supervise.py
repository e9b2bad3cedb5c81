"""What an active instance does when its query stops by itself: step down, restart it from
the checkpoint, or exit (pure: a failure text and what the shared file says in, a step out).

- **Superseded**: another instance was made active (the gate refused a batch, or the shared
  desired-state file names it): step down and stay up as a standby.
- **A checkpoint race** (Spark's `CONCURRENT_STREAM_LOG_UPDATE`: another driver wrote the same
  batch's offset or commit log entry first): a former active finishing the batch it was in
  when it froze. Spark writes those entries atomically and never overwrites one, so the
  checkpoint is whole; this instance still owns the query, so it restarts from the checkpoint,
  which replays or skips that batch.
- **Kafka away** (the sink's retry budget ran out, a transaction was aborted, the source timed
  out): restart from the checkpoint after a pause; the sink re-initialises and re-reads its
  marker, so nothing is lost or written twice.
- **Fenced while still the owner** (the sink's producer was fenced, and the shared file still
  names this instance): most likely a former active whose restart read the file just before
  this instance's promotion and fenced just after it. Take the sink back (`take_ownership`,
  fencing that one) and restart: the former active reads the file before its next fence and
  its next batch is refused, so the two converge on the named one.
- Anything else (a bug, a corrupt checkpoint): exit non-zero, so a supervisor (compose's
  `restart: on-failure`) restarts the process.

A restart re-reads the shared file first: a failover during the pause steps down instead.
Restarts are bounded (`RestartBudget`) so a persistent fault still ends in an exit.
`Supervisor` applies this to the job's query; `classify` is the pure rule. Neighbours: `owner`
(calls it under the query's one lock), `standby` (steps down), `ports.QueryControl`.
"""

from __future__ import annotations

import enum
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from schemas.records import Role
from streaming_jobs.runtime.checkpoint.retention import InputDeleted
from streaming_jobs.runtime.control.shared_state import DesiredStateFileError
from streaming_jobs.runtime.ports import QueryControl
from streaming_jobs.runtime.roles.standby import Instance

log = logging.getLogger(__name__)

CHECKPOINT_RACE = ("CONCURRENT_STREAM_LOG_UPDATE", "Multiple streaming jobs detected",
                   "Multiple streaming queries are concurrently using")
"""Spark's errors when its atomic create-if-absent of a metadata log file loses a race."""
INPUT_DELETED = ("KAFKA_DATA_LOSS", "Some data may have been lost", "failOnDataLoss")
"""Spark's Kafka source finding records deleted before it read them (retention): the restart
finds and reports them before it runs (`checkpoint.retention`), then halts or skips them."""
KAFKA_AWAY = ("SinkUnavailable", "SinkBatchAborted", "DeadLettersUndelivered",
              "org.apache.kafka.common.errors.Timeout", "NETWORK_EXCEPTION")
"""Failures that end when the broker is back: retried, never lost. Spark's Kafka source
reports a broker away for 60 s as `org.apache.kafka.common.errors.TimeoutException: Timeout of
60000ms expired before the position for partition … could be determined`."""
FENCED = ("SinkFenced",)
"""The sink's producer fenced by a newer one under the query's transactional id."""


class Step(enum.Enum):
    STEP_DOWN = "step_down"
    RESTART = "restart"
    RECLAIM = "reclaim"
    """Take the sink back (fence whoever fenced it), then restart."""
    EXIT = "exit"


@dataclass(frozen=True)
class Next:
    step: Step
    reason: str
    delay_s: float = 0.0
    """Wait before the restart (Kafka away: give the broker time to come back)."""


def classify(failure: str | None, superseded: str | None, *, kafka_retry_s: float) -> Next:
    """The next step for a query that stopped with `failure` (None: stopped without an error),
    while the shared file says `superseded` (None: this instance still owns the query)."""
    if superseded is not None:
        return Next(Step.STEP_DOWN, superseded)
    text = failure or ""
    if any(marker in text for marker in CHECKPOINT_RACE):
        return Next(Step.RESTART, "another driver wrote the same checkpoint entry first (a "
                                  "former active finishing its last batch)")
    if any(marker in text for marker in INPUT_DELETED):
        return Next(Step.RESTART, "records of the input were deleted before the query read "
                                  "them; the restart reports them, then halts or skips them")
    if any(marker in text for marker in FENCED):
        return Next(Step.RECLAIM, "the sink was fenced while the shared file names this "
                                  "instance; taking it back")
    if any(marker in text for marker in KAFKA_AWAY):
        return Next(Step.RESTART, f"Kafka unavailable ({_line_with(text, KAFKA_AWAY)})",
                    kafka_retry_s)
    return Next(Step.EXIT, failure or "stopped after a failed reconfiguration")


def _line_with(text: str, markers: tuple[str, ...]) -> str:
    """The first line of a (Java and Python) stack trace that names the error."""
    return next((line.strip() for line in text.splitlines()
                 if any(m in line for m in markers)), text)[:300]


class RestartBudget:
    """At most `restarts` restarts within `window_s`; past that the failure is not transient.
    Ten in ten minutes: with the 10 s pause and each attempt's own Kafka timeouts, a broker
    away for several minutes is waited out; a fault that comes back at once is not."""

    def __init__(self, restarts: int = 10, window_s: float = 600.0) -> None:
        self._restarts, self._window_s = restarts, window_s
        self._at: deque[float] = deque()

    def take(self, now_s: float) -> bool:
        """Use one restart at `now_s`; False when the budget is spent."""
        while self._at and now_s - self._at[0] > self._window_s:
            self._at.popleft()
        if len(self._at) >= self._restarts:
            return False
        self._at.append(now_s)
        return True


class Supervisor:
    """Watches an active instance's query; `next_step` and `take` are called under the job's
    lock, the pause in between outside it."""

    def __init__(self, query: QueryControl, instance: Instance,
                 superseded: Callable[[], str | None], *, kafka_retry_s: float) -> None:
        self._query, self._instance, self._superseded = query, instance, superseded
        self._kafka_retry_s = kafka_retry_s
        self._budget = RestartBudget()

    def next_step(self) -> Next | None:
        """None while there is nothing to do (a standby, the query runs, or it halted and
        waits for its operator)."""
        if (self._instance.role is not Role.ACTIVE or self._query.is_active()
                or self._query.halted() is not None):
            return None
        step = classify(self._query.failure(), self._owner_lost(),
                        kafka_retry_s=self._kafka_retry_s)
        if (step.step in (Step.RESTART, Step.RECLAIM)
                and not self._budget.take(time.monotonic())):
            return Next(Step.EXIT, f"{step.reason}, and the restart budget is spent")
        return step

    def take(self, step: Next) -> None:
        """Apply `step`; a restart first looks again at the shared file, since another
        instance may have been promoted while this one paused (`delay_s`)."""
        if step.step is not Step.STEP_DOWN and self._instance.role is Role.ACTIVE:
            try:
                reason = self._owner_lost()
            except DesiredStateFileError as exc:  # ownership not confirmed: no fence now
                log.warning("not restarting the query this round: %s", exc)
                return
            if reason is not None:
                step = Next(Step.STEP_DOWN, reason)
        if step.step is Step.STEP_DOWN:
            self._instance.step_down(step.reason)
        elif self._instance.role is Role.ACTIVE and not self._query.is_active():
            log.warning("query stopped: %s; restarting it from the checkpoint", step.reason)
            try:
                if step.step is Step.RECLAIM:
                    self._query.take_ownership()
                self._query.start_keeping_partitions(self._query.desired)
            except InputDeleted:
                pass  # reported as it was found; the query is halted, not to be restarted
            except Exception as exc:
                self._restart_failed(exc)

    def _restart_failed(self, exc: Exception) -> None:
        """Step down when another instance was promoted meanwhile (the sink refused to fence
        it); otherwise the next round classifies what is left."""
        try:
            reason = self._owner_lost()
        except DesiredStateFileError:
            reason = None
        if reason is None:
            log.error("restarting the query failed", exc_info=exc)
        else:
            log.warning("restarting the query failed (%s): %s", exc, reason)
            self._instance.step_down(reason)

    def _owner_lost(self) -> str | None:
        return self._query.superseded() or self._superseded()
