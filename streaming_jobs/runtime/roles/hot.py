"""A hot standby's own run of the query: its state kept current, nothing written.

With `standby = hot` a standby does not wait with an empty session: it runs the job's query on
its own checkpoint (`checkpoint.instances`), started as a copy of the active's at a committed
batch, into nothing (Spark's `noop` sink, no dead letters), so that a failover finds the state
current on a checkpoint no other process writes, and the session, its Python workers and Kafka
consumers warm from running the same plan. (The promoted query is a new run, and Spark loads a
run's state from its checkpoint when it starts: the load is not saved, only made local.)
Its state must never hold a record the output does not: before each batch runs, the sink waits
until the active has committed past everything the batch reads (`instances.covered`), so the
standby trails the active by about one batch and a promotion folds only that trail into the
state, without writing it (`lifecycle` continues the checkpoint from the output).

Its results equal the active's only while both run the same plan on the same records: when the
active's input, state partitions, shed fraction or function version change (the shared
desired state says so), or the run fails, the standby drops its copy and takes a new one.
Neighbours: `standby.Instance` (keeps it current on every look, stops it before a promotion),
`job` (builds it), `query.plan` (the query), `checkpoint.instances` (the files).
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from streaming_jobs import per_batch
from streaming_jobs.config import INPUT_RECORD_SUFFIX, RunSettings
from streaming_jobs.runtime.checkpoint import instances
from streaming_jobs.runtime.checkpoint.input_source import InputSources, LogRanges
from streaming_jobs.runtime.checkpoint.input_switch import SwitchRefused
from streaming_jobs.runtime.desired.state import DesiredState
from streaming_jobs.runtime.query.input import DiscardDeadLetters
from streaming_jobs.runtime.query.plan import Plan
from streaming_jobs.runtime.query.session import source_evolution
from streaming_jobs.runtime.sink.gate import QuiesceRequested

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

WAIT_POLL_S = 0.2
"""How often a held batch looks at the active's commit log."""


@dataclass(frozen=True)
class FollowedSettings:
    """What the standby's results depend on, as the active runs it."""

    input_topic: str
    state_partitions: int
    batch: per_batch.BatchValues
    """What each batch reads (the shed fraction, the function's version)."""

    @classmethod
    def of(cls, desired: DesiredState) -> FollowedSettings:
        return cls(desired.input_topic, desired.state_partitions,
                   per_batch.BatchValues.of(desired))


class TrailingSink:
    """foreachBatch of the standby's run: wait until the active has committed past the
    batch (`instances.behind`), then run it into nothing. A batch the active's settings no
    longer match is not run: the run stops, and the next look takes a new copy."""

    def __init__(self, checkpoint_dir: str, active_dir: Callable[[], str | None],
                 follows: FollowedSettings, active: Callable[[], DesiredState],
                 encode: Callable[[DataFrame], DataFrame]) -> None:
        self._checkpoint, self._active_dir = checkpoint_dir, active_dir
        self._follows, self._active, self._encode = follows, active, encode
        self.stopping = threading.Event()

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        while not self._behind(batch_id):
            if self.stopping.wait(WAIT_POLL_S):
                raise QuiesceRequested(batch_id)
        if self.stopping.is_set() or FollowedSettings.of(self._active()) != self._follows:
            self.stopping.set()
            raise QuiesceRequested(batch_id)
        batch_df.sparkSession.sparkContext.setLocalProperty(per_batch.PROPERTY,
                                                            self._follows.batch.encode())
        # The whole plan, encoding included (its Python workers stay warm), into nothing.
        self._encode(batch_df).write.format("noop").mode("overwrite").save()

    def _behind(self, batch_id: int) -> bool:
        active = self._active_dir()
        return active is not None and instances.behind(self._checkpoint, batch_id, active)


class HotStandbyRun:
    """The standby's run; `keep_current` on every look, `stop` before a promotion."""

    def __init__(self, spark: SparkSession, plan: Plan, run: RunSettings, offsets: LogRanges,
                 active_dir: Callable[[], str | None], active: Callable[[], DesiredState], *,
                 checkpoint_dir: str, trigger_interval_s: float) -> None:
        self._spark, self._plan, self._run = spark, plan, run
        self._offsets, self._active_dir, self._active = offsets, active_dir, active
        self._dir, self._trigger_ms = checkpoint_dir, int(trigger_interval_s * 1000)
        self._query: StreamingQuery | None = None
        self._sink: TrailingSink | None = None
        self._follows: FollowedSettings | None = None
        self.note = "not started"
        """What the run does now, for the log and the promotion's ack."""

    def keep_current(self, active: DesiredState) -> None:
        """Run the query as the active runs it: start it, or take a new copy when what it
        follows changed or the run failed. A failure here only leaves the standby warm."""
        follows = FollowedSettings.of(active)
        if self._query is not None and self._query.isActive and follows == self._follows:
            return
        if self._query is not None:
            failure = self._query.exception() if not self._query.isActive else None
            self.stop()
            why = ("the active runs other settings" if follows != self._follows
                   else f"its run failed ({_first_line(str(failure))})")
            log.warning("hot standby: %s; taking a new copy of the active's checkpoint", why)
        try:
            self._start(active, follows)
        except Exception as exc:  # the standby stays warm; the next look tries again
            note = f"not running: {type(exc).__name__}: {_first_line(str(exc))}"
            if note != self.note:  # once, not on every look while it lasts
                log.warning("hot standby %s", note)
            self.note = note

    def stop(self) -> None:
        """Stop the run where it is; its checkpoint ends on a committed batch."""
        query, sink = self._query, self._sink
        self._query = self._sink = None
        if sink is not None:
            sink.stopping.set()
        if query is not None:
            query.stop()

    def _start(self, active: DesiredState, follows: FollowedSettings) -> None:
        source_dir = self._active_dir()
        if source_dir is None:
            raise instances.NotContinuable("no active checkpoint found beside "
                                           f"{self._dir}")
        copied = instances.copy_committed(source_dir, self._dir)
        inputs = InputSources(self._dir, self._dir + INPUT_RECORD_SUFFIX,
                              self._run.query_id, self._offsets)
        try:
            inputs.resume(active.input_topic)
        except SwitchRefused as exc:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise instances.NotContinuable(str(exc)) from exc
        source = inputs.current.kafka_input()
        sink = TrailingSink(self._dir, self._active_dir, follows, self._active,
                            self._plan.job.output.encode)
        with source_evolution(self._spark, source.name is not None):
            df = self._plan.build(self._spark, self._run, active, DiscardDeadLetters(), source)
            self._query = (df.writeStream.queryName(f"{self._run.query_id}-hot-standby")
                           .outputMode(self._plan.output_mode).foreachBatch(sink)
                           .option("checkpointLocation", self._dir)
                           .trigger(processingTime=f"{self._trigger_ms} milliseconds")
                           .start())
        self._sink, self._follows = sink, follows
        self.note = (f"running on a copy of {source_dir} taken at its batch {copied}, "
                     "trailing its commits")
        log.info("hot standby %s", self.note)


def _first_line(text: str) -> str:
    return text.splitlines()[0] if text.strip() else "no message"
