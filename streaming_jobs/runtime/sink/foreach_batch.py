"""The foreachBatch sinks: the quiesce gate, then the batch's output written to Kafka.

Owns what happens to one micro-batch's output: admit it through the gate (or refuse it before
executing anything), encode it with the job's output format, write it, count the rows.

- `TransactionalKafkaSink` (the jobs' sink): exactly-once for `read_committed` consumers. It
  brings the encoded rows to the driver as Arrow and writes them with a commit marker in one
  Kafka transaction; a replayed batch whose marker is committed is executed (so state and
  watermark advance) but not written again. See docs/exactly-once.md.
- `AtLeastOnceKafkaSink`: Spark's own Kafka batch writer; a batch replayed after a crash is
  written twice. Kept as the baseline for `bench.sink`.

Neighbours: `gate`, `transactional` (markers, replay decision), `transactional_kafka` (the
producer), `lifecycle` (constructs the sink, reads per-batch output counts on progress).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from schemas.records import CommitMarker
from streamctl.security.kafka import PLAINTEXT, KafkaSecurity
from streaming_jobs.formats.base import OutputFormat
from streaming_jobs.runtime.sink.dead_letter import Rejected
from streaming_jobs.runtime.sink.gate import BatchGate
from streaming_jobs.runtime.sink.transactional import (
    DEFAULT_MARKER_TOPIC,
    DEFAULT_MAX_RECORD_BYTES,
    OutputBatch,
    Replay,
    SinkBatchAborted,
    SinkFenced,
    SinkUnavailable,
    TransactionalWriter,
    decide,
    output_batch,
)
from streaming_jobs.runtime.sink.transactional_kafka import (
    KafkaTransactionalWriter,
    TransactionalSettings,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

log = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"
"""Spark's local property holding the query id stored in the checkpoint (set on the thread
that runs foreachBatch); it is the same on every restart from that checkpoint."""

BatchProperties = Callable[[], Mapping[str, str]]
"""Spark local properties every job of a batch carries, read when the gate admits it: how
per-batch settings reach the tasks without a restart (`streaming_jobs.per_batch`)."""


@dataclass(frozen=True)
class Written:
    """What a batch put in the output: rows, and rows sent to the dead-letter topic instead."""

    rows: int = 0
    dead_letters: int = 0


class _OutputRows:
    """What each batch wrote, by batch id, remembered until its progress event takes it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._written: dict[int, Written] = {}

    def put(self, batch_id: int, written: Written) -> None:
        with self._lock:
            self._written[batch_id] = written

    def take(self, batch_id: int) -> Written:
        with self._lock:
            written = self._written.pop(batch_id, Written())
            for older in [b for b in self._written if b < batch_id]:
                del self._written[older]
            return written


class TransactionalKafkaSink:
    """Callable passed to `foreachBatch`: one Kafka transaction (rows + marker) per batch."""

    def __init__(self, gate: BatchGate, writer: TransactionalWriter, query_id: str, topic: str,
                 encoder: OutputFormat, clock_ms: Callable[[], int] | None = None,
                 batch_properties: BatchProperties | None = None) -> None:
        self._gate, self._writer, self._encoder = gate, writer, encoder
        self._batch_properties = batch_properties or (lambda: {})
        self._query_id = query_id
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._topic_lock = threading.Lock()
        self._topic = topic
        self._output = _OutputRows()
        self._start_lock = threading.Lock()
        self._started = False
        self._last: CommitMarker | None = None
        self._fenced: SinkFenced | None = None
        self._skipped = 0
        self._folded: int | None = None
        """A batch marked in the output without its rows (`mark_in_output`): its records
        were written by another instance's checkpoint."""

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        self._gate.admit(batch_id)  # raises before anything of the batch executes
        context = batch_df.sparkSession.sparkContext
        for name, value in self._batch_properties().items():
            context.setLocalProperty(name, value)  # this thread runs the batch's jobs
        # One Spark action: the stateful plan runs once, replay or not (state and watermark
        # must advance either way), and the encoded rows arrive on the driver.
        table = self._encoder.encode(batch_df).toArrow()
        checkpoint_id = context.getLocalProperty(QUERY_ID_PROPERTY)
        self.write(output_batch(table), batch_id, checkpoint_id or "")

    def write(self, batch: OutputBatch, batch_id: int, checkpoint_id: str) -> Replay:
        """Commit `batch` with its marker unless the marker says it is already committed."""
        if self._fenced is not None:  # never re-initialise: that would fence the new owner
            raise self._fenced
        last = self._start(batch_id)
        decision = decide(last, checkpoint_id, batch_id)
        if decision is Replay.SKIP:
            self._skip(batch, batch_id, last)
            # A folded batch's rows were written, and counted, under another checkpoint.
            self._output.put(batch_id, Written(0 if batch_id == self._folded else batch.rows))
        else:
            marker = CommitMarker(self._query_id, checkpoint_id, batch_id, self.topic,
                                  batch.rows, self._clock_ms())
            rejected = self._commit(batch, marker)
            self._output.put(batch_id, Written(batch.rows - len(rejected), len(rejected)))
        return decision

    def retarget(self, topic: str) -> None:
        """Write the next batch to `topic` (call at a batch boundary, with the gate closed);
        `SinkRefused` when it does not exist or takes smaller records than the job writes."""
        if not topic.strip():
            raise ValueError("retarget: the output topic must not be empty")
        if topic != self.topic:
            self._writer.check_topic(topic)
        with self._topic_lock:
            log.info("query %s: output %s → %s from the next batch", self._query_id,
                     self._topic, topic)
            self._topic = topic

    @property
    def topic(self) -> str:
        with self._topic_lock:
            return self._topic

    @property
    def last_committed(self) -> CommitMarker | None:
        """The newest marker known committed (read at start, then each commit)."""
        return self._last

    def skipped_replays(self) -> int:
        """Batches not written because their output was already committed (a counter)."""
        return self._skipped

    def take_output(self, batch_id: int) -> Written:
        """What `batch_id` wrote (nothing if the sink did not see it); forgets older batches."""
        return self._output.take(batch_id)

    def close(self) -> None:
        self._writer.close()

    def take_ownership(self) -> CommitMarker | None:
        """Fence every other instance's producer now, before this instance's query starts (a
        promotion), rather than at its first batch: from here on no transaction of a former
        active can commit. The one place a fenced sink re-initialises: this instance is the owner
        (a promotion, or the shared file still names it after a fence, `supervise`), so it
        does not ask the gate. Returns the last committed marker."""
        with self._start_lock:
            self._writer.close()
            self._fenced = None
            self._started = False
            return self._start_writer(lambda: None)

    def last_marker(self) -> CommitMarker | None:
        """The newest marker committed for the query (read once, fencing older producers)."""
        return self._start()

    def mark_in_output(self, checkpoint_id: str, batch_id: int) -> None:
        """Commit a marker, and no rows, saying batch `batch_id` of `checkpoint_id` is in the
        output: its records were written by another checkpoint of the query, which this one
        continues (a hot standby's promotion, `checkpoint.instances.continue_from`). The batch
        then runs as a replay: state advances, nothing is written."""
        self._start()
        marker = CommitMarker(self._query_id, checkpoint_id, batch_id, self.topic, 0,
                              self._clock_ms())
        self._commit(OutputBatch((), ()), marker)
        self._folded = batch_id

    def _start(self, batch_id: int | None = None) -> CommitMarker | None:
        """The last committed marker, starting the writer first if it is not started. A
        (re-)start asks the gate whether this instance still owns the query, right before the
        writer fences: a producer started under the query's transactional id fences the
        owner's (`Superseded` instead)."""
        # The query's first batch and the runtime's thread (`last_marker` once a run has
        # started) may both come here first: two starts would be two producers under one
        # transactional id, the second fencing the batch's.
        with self._start_lock:
            if not self._started:
                return self._start_writer(lambda: self._gate.require_owner(batch_id))
            return self._last

    def _start_writer(self, before_fence: Callable[[], None]) -> CommitMarker | None:
        """Under `_start_lock`."""
        self._last = self._writer.start(self._query_id, before_fence)
        self._started = True
        log.info("query %s: transactional sink ready; last committed batch %s",
                 self._query_id, "none" if self._last is None else
                 f"{self._last.batch_id} ({self._last.rows} rows to {self._last.topic})")
        return self._last

    def _commit(self, batch: OutputBatch, marker: CommitMarker) -> tuple[Rejected, ...]:
        try:
            rejected = self._writer.commit(marker.topic, batch, marker)
        except SinkFenced as exc:
            self._fenced = exc
            raise
        except (SinkUnavailable, SinkBatchAborted):
            # The commit may have happened, or the producer's sequence numbers went to records
            # that timed out during an outage: a fresh producer re-reads the marker first.
            self._started = False
            raise
        self._last = marker
        if rejected:
            log.error("query %s: batch %d: %d of its %d output rows went to the dead-letter "
                      "topic instead of %s; the first: %s", self._query_id, marker.batch_id,
                      len(rejected), batch.rows, marker.topic, rejected[0].reason)
        return rejected

    def _skip(self, batch: OutputBatch, batch_id: int, last: CommitMarker | None) -> None:
        if batch_id == self._folded:
            log.info("query %s: batch %d folds %d rows' worth of records another checkpoint "
                     "already wrote into the state; not writing them again", self._query_id,
                     batch_id, batch.rows)
            return
        self._skipped += 1
        committed_rows = last.rows if last is not None else batch.rows
        log.warning("query %s: batch %d is a replay; its %d rows were already committed to "
                    "%s, not writing them again", self._query_id, batch_id, committed_rows,
                    last.topic if last is not None else "?")
        if committed_rows != batch.rows:
            log.warning("query %s: replayed batch %d has %d rows, the committed attempt had "
                        "%d: the job's output is not deterministic on replay", self._query_id,
                        batch_id, batch.rows, committed_rows)


def transactional_sink(gate: BatchGate, bootstrap_servers: str, query_id: str, topic: str,
                       encoder: OutputFormat, marker_topic: str = DEFAULT_MARKER_TOPIC, *,
                       security: KafkaSecurity = PLAINTEXT,
                       batch_properties: BatchProperties | None = None,
                       dead_letter_topic: str = "",
                       max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                       ) -> TransactionalKafkaSink:
    """The jobs' sink on Kafka; its transactional id is stable per query."""
    settings = TransactionalSettings(bootstrap_servers, transactional_id(query_id),
                                     marker_topic=marker_topic, security=security,
                                     dead_letter_topic=dead_letter_topic,
                                     max_record_bytes=max_record_bytes)
    return TransactionalKafkaSink(gate, KafkaTransactionalWriter(settings), query_id, topic,
                                  encoder, batch_properties=batch_properties)


def transactional_id(query_id: str) -> str:
    return f"streamctl-{query_id}-sink"


class AtLeastOnceKafkaSink:
    """Spark's official Kafka batch writer behind the gate: a replayed batch is written again."""

    def __init__(self, gate: BatchGate, bootstrap_servers: str, topic: str,
                 encoder: OutputFormat, security: KafkaSecurity = PLAINTEXT) -> None:
        self._gate, self._encoder = gate, encoder
        self._topic = topic
        self._kafka = {"kafka.bootstrap.servers": bootstrap_servers, **security.spark_options()}
        self._output = _OutputRows()

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        self._gate.admit(batch_id)
        batch_df.persist()  # the stateful plan runs once for the count and the write
        try:
            rows = batch_df.count()
            if rows:
                (self._encoder.encode(batch_df)
                 .write.format("kafka")
                 .options(**self._kafka)
                 .option("topic", self._topic)
                 .save())
        finally:
            batch_df.unpersist()
        self._output.put(batch_id, Written(rows))

    def retarget(self, topic: str) -> None:
        self._topic = topic

    def take_output(self, batch_id: int) -> Written:
        return self._output.take(batch_id)
