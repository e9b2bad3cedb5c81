"""One elastic streaming query: start, quiesce, hold, swap, stop, and what each run committed.

Owns the StreamingQuery handle, the desired state in force, the run context per Spark run id
(so a late progress event of a stopped run is still labelled with the settings it ran with),
and the commit history the reconfiguration protocol measures pauses from. Neighbours:
`sink.gate` and `sink.foreach_batch` (the foreachBatch side), `listener` (progress events),
`owner.Reconfigurer` (drives quiesce → start, or hold → swap → release), `job` (wiring, metrics
publishing).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery
from pyspark.sql.streaming.listener import StreamingQueryProgress

from schemas import knobs
from schemas.records import CommitMarker, SourcePartition
from streaming_jobs import per_batch
from streaming_jobs.config import JobConfig
from streaming_jobs.runtime.checkpoint import instances, leftovers, state_repartition
from streaming_jobs.runtime.checkpoint.input_source import InputSources
from streaming_jobs.runtime.checkpoint.input_switch import KafkaInput
from streaming_jobs.runtime.checkpoint.retention import Deleted, InputDeleted, sentence
from streaming_jobs.runtime.desired.state import DesiredState, is_request
from streaming_jobs.runtime.kafka import DeadLetterFactory
from streaming_jobs.runtime.observe.metrics import RunContext, timestamp_ms
from streaming_jobs.runtime.ports import Commit
from streaming_jobs.runtime.query import warm_up, worker_pool
from streaming_jobs.runtime.query.listener import ProgressListener
from streaming_jobs.runtime.query.plan import Plan
from streaming_jobs.runtime.query.session import hide_gate_stops, source_evolution
from streaming_jobs.runtime.sink.foreach_batch import Written, transactional_sink
from streaming_jobs.runtime.sink.gate import BatchGate, Superseded, is_gate_stop

log = logging.getLogger(__name__)


class Executors(Protocol):
    """The cluster manager's executor request API (`session.SparkExecutors`, or a double)."""

    def registered(self) -> tuple[str, ...]: ...

    def request_total(self, executors: int) -> None: ...

    def wait_for(self, executors: int, timeout_s: float) -> float | None: ...

    def task_slots(self) -> int: ...


EXECUTOR_WAIT_S = 90.0
"""How long an `executors` change waits for the executors to register before it acks (an
executor JVM starts in 5-10 s on the 2-core development machine); past it the ack says how
many did. Batches keep running meanwhile: the gate is released before the wait."""


ProgressHandler = Callable[[StreamingQueryProgress, RunContext, Written], None]
IdleHandler = Callable[[RunContext, int], None]
"""Called with the idle run's context and the idle event's time (epoch ms)."""


Ownership = Callable[[int], "str | None"]
"""Why an instance running at this epoch no longer owns the query, or None while it does."""


class ElasticQuery:
    """A job's query, restartable from its checkpoint in the same SparkSession: the real
    `ports.QueryControl`."""

    def __init__(self, spark: SparkSession, plan: Plan, config: JobConfig, inputs: InputSources,
                 on_progress: ProgressHandler, on_idle: IdleHandler | None = None, *,
                 desired: DesiredState | None = None, executors: Executors | None = None,
                 ownership: Ownership | None = None,
                 on_input_deleted: Callable[[list[Deleted]], None] = lambda _found: None):
        self._spark, self._config, self._on_progress = spark, config, on_progress
        self._on_idle = on_idle
        self._plan = plan
        self._executors = executors
        self.inputs = inputs
        self._desired = desired or config.initial_state()
        owns = ownership
        self.gate = BatchGate(None if owns is None else lambda: owns(self._desired.epoch))
        self.sink = transactional_sink(self.gate, config.bootstrap_servers,
                                       config.identity.query_id,
                                       self._desired.output_topic, plan.job.output,
                                       security=config.security.kafka_security,
                                       batch_properties=self._batch_properties,
                                       dead_letter_topic=config.topics.dlq_topic,
                                       max_record_bytes=config.bounds.max_record_bytes)
        self._contexts: dict[str, RunContext] = {}
        self._on_input_deleted = on_input_deleted
        self._lost: dict[tuple[str, int], Deleted] = {}
        """Input found deleted before it was read, per partition, since the process started."""
        self._halted: str | None = None
        self.start_note: str | None = None
        """What the last `start` did to the state partitions or the input (for the ack)."""
        self._query: StreamingQuery | None = None
        self._python_steps = 1
        """Python operators in the running plan (`worker_pool.python_steps`)."""
        self._commits = threading.Condition()
        self.last_commit: Commit | None = None
        self._listener = ProgressListener(self._progress, self._idle)
        spark.streams.addListener(self._listener)
        hide_gate_stops(spark)

    @property
    def desired(self) -> DesiredState:
        return self._desired

    @property
    def run_id(self) -> str | None:
        return str(self._query.runId) if self._query is not None else None

    def start(self, desired: DesiredState) -> str:
        """Start a run with `desired` from the checkpoint; returns its Spark run id.

        A stateful query whose checkpoint has another number of state partitions is
        repartitioned first, and another input topic is switched to (the query is stopped
        here); `start_note` says what was done.
        """
        seen_commit = self.last_commit.batch_id if self.last_commit else None
        self._request_executors(desired)
        self.sink.retarget(desired.output_topic)
        output_note = self._continue_output(desired)
        if output_note is not None:
            seen_commit = None
        state_note = None
        if self._plan.stateful:
            state_note = state_repartition.align(
                self._spark, self._config.storage.checkpoint_dir, desired.state_partitions,
                last_admitted=self.gate.last_admitted, seen_commit=seen_commit,
                max_partitions=self._config.bounds.max_state_partitions)
        source, input_note = self.inputs.for_start(
            desired.input_topic, desired.output_topic, last_admitted=self.gate.last_admitted,
            seen_commit=seen_commit)
        source = self._check_input_kept(source)
        self.start_note = ", ".join(n for n in (output_note, state_note, input_note) if n) or None
        self._desired = desired
        with source_evolution(self._spark, source.name is not None):
            df = self._plan.build(self._spark, self._config.run, desired,
                                  DeadLetterFactory(self._config.bootstrap_servers,
                                                    self._config.topics.dlq_topic,
                                                    self._config.security.kafka_security,
                                                    self._config.identity.query_id,
                                                    self._config.bounds.max_record_bytes), source)
            self._python_steps = worker_pool.python_steps(df)
            self.gate.open()
            self._query = self._write(df)
        self._contexts[str(self._query.runId)] = self.context(desired)
        self._remove_left_behind(continued=output_note is not None)
        return str(self._query.runId)

    def _remove_left_behind(self, continued: bool) -> None:
        """The checkpoints of hot instances no longer running go, now that this one runs the
        query (`leftovers`); the one the output's last batch came from stays, unless this
        start continued it. Nothing goes when another instance owns the query now: the run
        just started will have its first batch refused (`gate`)."""
        storage = self._config.storage
        try:
            last = self.sink.last_marker()
        except Superseded:
            return
        keep = None if continued or last is None else last.checkpoint_id
        try:
            leftovers.remove_left_behind(storage.query_dir, storage.checkpoint_dir, keep)
        except OSError as exc:  # a disk problem is not the query's: the next start tries again
            log.warning("could not remove the checkpoints of instances no longer running "
                        "beside %s: %s", storage.query_dir, exc)

    def _continue_output(self, desired: DesiredState) -> str | None:
        """The output goes on from the checkpoint that wrote its last batch: with hot standbys
        each instance has its own checkpoint, and one whose output another instance's went on
        writing continues where that output ends first. A warm instance's shared checkpoint
        takes a copy of an instance's own when that one wrote the output's last batch (hot
        standbys before, or beside it during a rolling change of the setting), or it would
        write that trail again; a writer no longer beside it is, for a warm instance, a
        checkpoint the query left behind (as before hot standbys). The input is read from the
        checkpoint again when it may have been replaced: by a hot run, or by the
        continuation."""
        hot = self._config.identity.standby == "hot"
        storage = self._config.storage
        if not hot and not instances.beside(storage.query_dir):
            return None  # no instance's checkpoint: the output can only be the shared one's
        last = self.sink.last_marker()
        note = instances.continue_output(
            storage.checkpoint_dir, storage.query_dir,
            None if last is None else (last.checkpoint_id, last.batch_id),
            self.sink.mark_in_output, warm=not hot)
        if note is not None:
            log.info("query %s: %s", self._config.identity.query_id, note)
            # Another checkpoint now: the batches this process saw committed or admitted are
            # not its (they must not let a planned batch, the folded one, be discarded).
            with self._commits:
                self.last_commit = None
            self.gate.last_admitted = None
        if hot or note is not None:
            # The topic the checkpoint reads (a switch to `desired`'s comes after, `for_start`).
            self.inputs.resume(self.inputs.current.topic or desired.input_topic)
        return note

    def _check_input_kept(self, source: KafkaInput) -> KafkaInput:
        """The run's source, once the records the checkpoint resumes from are known to be
        there: if some were deleted before they were read, they are reported, and the query
        halts (`InputDeleted`) or, with `on_data_loss=skip`, this one run goes on from the
        log's start (Spark's `failOnDataLoss` off for it alone)."""
        found = self.inputs.deleted()
        if not found:
            self._halted = None
            return source
        text = sentence(self._config.identity.query_id, found, self._config.on_data_loss)
        new = [d for d in found if self._lost.get((d.topic, d.partition)) != d]
        if new:
            log.error("%s", text)
            self._on_input_deleted(new)
        self._lost.update({(d.topic, d.partition): d for d in found})
        if self._config.on_data_loss == "skip":
            self._halted = None
            return replace(source, fail_on_data_loss=False)
        self._halted = text
        raise InputDeleted(text)

    def halted(self) -> str | None:
        return self._halted

    def resume_offsets(self) -> tuple[SourcePartition, ...]:
        """Where a run would start each source partition now: after its last committed batch,
        or at its log's start where records were deleted before they were read."""
        topic = self.inputs.current.topic
        at = {p: o for p, o in self.inputs.committed().items()}
        at.update({d.partition: d.log_start for (t, _p), d in self._lost.items() if t == topic})
        return tuple(SourcePartition(topic, p, o, o, o) for p, o in sorted(at.items()))

    def start_keeping_partitions(self, desired: DesiredState) -> str:
        """`start`, or, when the checkpoint cannot be repartitioned to `desired` (a crash left
        its last batch uncommitted, or its first batch has not committed yet), start with the
        checkpoint's state partitions instead."""
        try:
            return self.start(desired)
        except state_repartition.StateRepartitionError as exc:
            kept = state_repartition.current(self._config.storage.checkpoint_dir)
            log.error("%s; starting with the checkpoint's %s state partitions instead", exc,
                      kept)
            run_id = self.start(replace(desired, state_partitions=kept
                                        or desired.state_partitions))
            kept_note = f"state partitions kept at {kept} ({exc})"
            self.start_note = (f"{kept_note}, {self.start_note}" if self.start_note
                               else kept_note)
            return run_id

    def warm_workers(self, new: DesiredState) -> str | None:
        """Before a restart into more source tasks: their Python workers, started while this
        run still runs (`worker_pool`), so the restarted run's first batch is not cold. A
        note for the ack; a failure only costs the warm start."""
        tasks = min(new.input_parallelism, self._config.max_task_slots)
        if self._query is None or tasks <= self._desired.input_parallelism:
            return None
        try:
            warmed = worker_pool.warm(self._spark, tasks, self._python_steps,
                                      worker_pool.modules_of(self._plan.job))
        except Exception as exc:  # the restart itself does not depend on it
            log.warning("could not warm Python workers for %d tasks: %s", tasks, exc)
            return f"Python workers not warmed ({type(exc).__name__})"
        return f"{warmed.describe()} before the quiesce"

    def warm_up(self) -> str:
        """Run the plan with the desired state in force once, into nothing (`warm_up`)."""
        return warm_up.run_once(self._spark, self._plan, self._config.run, self._desired)

    def _write(self, df: DataFrame) -> StreamingQuery:
        c = self._config
        return (df.writeStream.queryName(c.identity.query_id).outputMode(self._plan.output_mode)
                .foreachBatch(self.sink).option("checkpointLocation", c.storage.checkpoint_dir)
                .trigger(processingTime=f"{int(c.timing.trigger_interval_s * 1000)} milliseconds")
                .start())

    def drain_input(self, topic: str) -> str:
        """Keep running until the input topic is drained, before a switch to `topic`; raises
        `SwitchRefused` (nothing changed) when it is not within the configured time."""
        return self.inputs.drain(topic, self._desired.output_topic,
                                 self._config.timing.input_drain_quiet_s,
                                 self._config.timing.input_drain_timeout_s)

    def take_ownership(self) -> CommitMarker | None:
        """Fence every other instance's sink now (a promotion); the last committed marker."""
        return self.sink.take_ownership()

    def superseded(self) -> str | None:
        return self.gate.superseded

    def relabel(self, desired: DesiredState) -> None:
        """Same query settings, another epoch or active instance: no restart needed."""
        self._set_running(desired)

    def hold(self, timeout_s: float) -> bool:
        """Hold new batches at the gate and wait for admitted ones to commit."""
        self.gate.hold()
        query = self._query
        if query is None:
            return True
        return self.gate.wait_drained(timeout_s, lambda: not query.isActive)

    def swap(self, desired: DesiredState) -> None:
        """Apply the per-batch settings of `desired` to the running query (gate held): the
        executor request, the output topic, and the knobs the next batch's tasks read
        (`_batch_properties`)."""
        if desired.executors and desired.executors != self._desired.executors:
            if self._executors is None:
                raise RuntimeError("no executor allocation client (local mode)")
            self._executors.request_total(desired.executors)
        self.sink.retarget(desired.output_topic)
        self._set_running(desired)

    def release(self) -> None:
        self.gate.release()

    def settle(self, old: DesiredState, new: DesiredState) -> str | None:
        """After a swap, wait for what it asked of the cluster manager; the ack's note on it."""
        if self._executors is None or not new.executors or new.executors == old.executors:
            return None
        waited_s = self._executors.wait_for(new.executors, EXECUTOR_WAIT_S)
        slots = _plural(self._executors.task_slots(), "task slot")
        if waited_s is None:
            return (f"{len(self._executors.registered())} of {new.executors} executors "
                    f"registered within {EXECUTOR_WAIT_S:.0f} s ({slots}): the cluster has no "
                    "room for more yet; the request stands and the master launches them when "
                    "it can")
        return (f"{_plural(new.executors, 'executor')} running {waited_s:.1f} s after the "
                f"request ({slots})")

    def _request_executors(self, desired: DesiredState) -> None:
        """On a cluster, ask for the run's executor count before it starts: the first run's,
        a restart's, and a promoted standby's (which kept only `STANDBY_EXECUTORS`)."""
        if self._executors is not None and is_request(knobs.EXECUTORS, desired.executors):
            self._executors.request_total(desired.executors)
            log.info("requested %d executors for query %s", desired.executors,
                     self._config.identity.query_id)

    def release_surplus_executors(self, timeout_s: float, keep: int | None = None) -> int:
        """Kill executors registered beyond the desired count (or `keep`), at a batch
        boundary; how many.

        A standalone master launches an application's executors as soon as it registers, and
        keeps launching toward a target that has since been lowered; those register after the
        request that should have excluded them. Called periodically: level-triggered.
        """
        executors = self._executors
        wanted = keep if keep is not None else self._desired.executors
        if executors is None or not wanted or len(executors.registered()) <= wanted:
            return 0
        self.hold(timeout_s)
        try:
            surplus = len(executors.registered()) - wanted
            executors.request_total(wanted)
        finally:
            self.release()
        log.info("released %d executors beyond the %d requested", surplus, wanted)
        return surplus

    def _batch_properties(self) -> dict[str, str]:
        """What the batch the gate admits runs with: the desired state's per-batch knobs, as
        they are after any swap made while the gate held it."""
        return {per_batch.PROPERTY: per_batch.BatchValues.of(self._desired).encode()}

    def _set_running(self, desired: DesiredState) -> None:
        self._desired = desired
        if self.run_id is not None:
            self._contexts[self.run_id] = self.context(desired)

    def quiesce_and_stop(self, timeout_s: float) -> bool:
        """Close the gate, let admitted batches commit, stop. False if the wait timed out."""
        self.gate.close()
        query = self._query
        if query is None:
            return True
        drained = self.gate.wait_drained(timeout_s, lambda: not query.isActive)
        query.stop()
        failure = self.failure()
        if failure is not None:
            log.error("query %s had failed before it was stopped: %s",
                      self._config.identity.query_id, failure)
        return drained

    def failure(self) -> str | None:
        """The run's termination error, unless it is our own quiesce gate (a normal stop)."""
        if self._query is None or self._query.isActive:
            return None
        error = self._query.exception()
        text = str(error) if error is not None else None
        return None if text is None or is_gate_stop(text) else text

    def is_active(self) -> bool:
        return self._query is not None and self._query.isActive

    def is_idle(self) -> bool:
        """Active, no trigger running and no data waiting."""
        if self._query is None or not self._query.isActive:
            return False
        status = self._query.status
        return not status["isDataAvailable"] and not status["isTriggerActive"]

    def wait_commit(self, run_id: str, timeout_s: float) -> Commit | None:
        """The first commit of `run_id` (waiting at most `timeout_s`), or None."""
        deadline = time.monotonic() + timeout_s
        with self._commits:
            while self.last_commit is None or self.last_commit.run_id != run_id:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._commits.wait(remaining)
            return self.last_commit

    def close(self) -> None:
        self._spark.streams.removeListener(self._listener)

    def task_slots(self) -> int:
        """Tasks the cluster runs at once: local[N]'s N, else the executors' cores."""
        return self._executors.task_slots() if self._executors else self._config.spark.task_slots

    def context(self, desired: DesiredState) -> RunContext:
        """What the metrics of a run with `desired` are labelled with."""
        c = self._config
        return RunContext(
            query_id=c.identity.query_id, instance_id=c.identity.instance_id,
            config_epoch=desired.epoch,
            input_parallelism=desired.input_parallelism,
            state_partitions=desired.state_partitions, task_slots=self.task_slots(),
            trigger_interval_ms=int(c.timing.trigger_interval_s * 1000),
            source_topics=(desired.input_topic,), sink_topics=(desired.output_topic,),
            max_offsets_per_trigger=desired.max_offsets_per_trigger,
            max_batch_cap=c.bounds.max_offsets_per_trigger_limit,
            scaling_parameter=self._plan.scaling_parameter,
            max_state_partitions=c.bounds.max_state_partitions if self._plan.stateful else 0,
            # Executors can be requested only from a cluster manager (desired.state.REGISTRY).
            executor_cores=c.spark.executor_cores if self._executors else 0,
            max_executors=c.bounds.max_executors if self._executors else 0,
            cluster_priority=c.spark.cluster_priority if self._executors else 0,
            beat_interval_ms=int(c.timing.beat_interval_s * 1000),
            metrics_address=c.endpoint.address,
            max_delay_ms=round(c.objectives.max_delay_s * 1000),
            drain_within_ms=round(c.objectives.drain_within_s * 1000),
            shed_fraction=desired.shed_fraction,
            max_shed_fraction=c.bounds.max_shed_fraction if self._plan.sheddable else 0.0,
            halted=self._halted or "", lost_ranges=tuple(
                SourcePartition(d.topic, d.partition, d.next_offset, d.log_start, d.log_end)
                for _key, d in sorted(self._lost.items())))

    def _live(self, context: RunContext) -> RunContext:
        """On a cluster the task slots are the executors registered now, not at the start."""
        return context if self._executors is None else replace(
            context, task_slots=self._executors.task_slots())

    def _idle(self, run_id: str, timestamp: str) -> None:
        context = self._contexts.get(run_id)  # None: another query of the session
        if context is not None and self._on_idle is not None:
            self._on_idle(self._live(context), timestamp_ms(timestamp))

    def _progress(self, progress: StreamingQueryProgress) -> None:
        if progress.name != self._config.identity.query_id:
            return
        run_id = str(progress.runId)
        start_ms = timestamp_ms(progress.timestamp)
        end_ms = start_ms + int(progress.durationMs.get("triggerExecution", 0))
        # The slots the batch ran on, read before the gate hears of its commit: once it has,
        # a held executors change may kill executors before this thread reads them.
        context = self._live(self._contexts.get(run_id) or self.context(self._desired))
        with self._commits:  # before the gate hears of it: a drained quiesce reads it
            self.last_commit = Commit(run_id, progress.batchId, start_ms, end_ms)
            self._commits.notify_all()
        self.gate.committed(progress.batchId)
        self._on_progress(progress, context, self.sink.take_output(progress.batchId))


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"

