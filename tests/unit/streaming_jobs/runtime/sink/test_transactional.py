"""The transactional sink's pure parts: markers, the replay decision, and the sink's bookkeeping
(replays, retargeting, fencing, an unknown commit outcome) against an in-memory writer."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException
from prometheus_client import CollectorRegistry

from schemas.codec import DecodeError
from schemas.records import CommitMarker
from streaming_jobs.formats import KeyValue
from streaming_jobs.runtime.observe.prometheus import JobPrometheus
from streaming_jobs.runtime.sink.dead_letter import Rejected
from streaming_jobs.runtime.sink.foreach_batch import TransactionalKafkaSink, Written
from streaming_jobs.runtime.sink.gate import BatchGate, QuiesceRequested, Superseded
from streaming_jobs.runtime.sink.transactional import (
    CheckpointBehindOutput,
    OutputBatch,
    Replay,
    SinkBatchAborted,
    SinkFenced,
    SinkRefused,
    SinkUnavailable,
    decide,
    decode_marker,
    encode_marker,
    output_batch,
)
from streaming_jobs.runtime.sink.transactional_kafka import (
    Action,
    Fault,
    KafkaTransactionalWriter,
    TransactionalSettings,
    classify,
    fatal_cause,
    record_fault,
)
from tests.support.waiting import until


def marker(batch_id: int, checkpoint_id: str = "c1", rows: int = 2) -> CommitMarker:
    return CommitMarker("q", checkpoint_id, batch_id, "out", rows, 1_700_000_000_000)


class MemoryWriter:
    """In-memory `TransactionalWriter`: a committed log of (topic, values, marker)."""

    def __init__(self, markers: list[CommitMarker] | None = None) -> None:
        self.markers = list(markers or [])
        self.output: list[tuple[str, list[bytes | None]]] = []
        self.starts = 0
        self.fail_next: Exception | None = None

    def start(self, query_id: str,
              before_fence: Callable[[], None] = lambda: None) -> CommitMarker | None:
        before_fence()
        self.starts += 1
        mine = [m for m in self.markers if m.query_id == query_id]
        return mine[-1] if mine else None

    def commit(self, topic: str, batch: OutputBatch,
               marker: CommitMarker) -> tuple[Rejected, ...]:
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        self.output.append((topic, list(batch.values)))
        self.markers.append(marker)
        return ()

    def check_topic(self, topic: str) -> None:
        if topic == "too-small":
            raise SinkRefused(f"{topic} takes smaller records than the job writes")

    def close(self) -> None:
        pass


def sink(writer: MemoryWriter, gate: BatchGate | None = None) -> TransactionalKafkaSink:
    return TransactionalKafkaSink(gate or BatchGate(), writer, "q", "out",
                                  KeyValue(), clock_ms=lambda: 7)


def batch(*values: bytes) -> OutputBatch:
    return OutputBatch(keys=[None] * len(values), values=list(values))


def test_a_marker_round_trips_in_the_standard_framing() -> None:
    payload = encode_marker(marker(3))
    assert payload[:2] == b"\xc3\x01"
    assert decode_marker(payload) == marker(3)


def test_garbage_on_the_marker_topic_is_a_decode_error_with_its_position() -> None:
    with pytest.raises(DecodeError, match="not Avro single-object encoded") as caught:
        decode_marker(b"nope", topic="markers", partition=0, offset=12)
    assert (caught.value.topic, caught.value.offset) == ("markers", 12)


@pytest.mark.parametrize(("last", "checkpoint", "batch_id", "expected"), [
    (None, "c1", 0, Replay.WRITE),
    (marker(4), "c1", 5, Replay.WRITE),
    (marker(4), "c1", 4, Replay.SKIP),  # committed, then a crash before Spark's commit log
    (marker(4), "c2", 0, Replay.WRITE),  # a new checkpoint numbers its batches from 0
])
def test_replay_decision(last: CommitMarker | None, checkpoint: str, batch_id: int,
                         expected: Replay) -> None:
    assert decide(last, checkpoint, batch_id) is expected


def test_a_checkpoint_behind_the_output_is_refused_with_both_batch_ids() -> None:
    with pytest.raises(CheckpointBehindOutput, match=r"batch 2 of checkpoint c1.*batch 4"):
        decide(marker(4), "c1", 2)


def test_batches_are_committed_with_their_marker_and_replays_skipped() -> None:
    writer = MemoryWriter()
    s = sink(writer)
    assert s.write(batch(b"a", b"b"), 0, "c1") is Replay.WRITE
    assert s.write(batch(b"a", b"b"), 0, "c1") is Replay.SKIP
    assert writer.output == [("out", [b"a", b"b"])]
    assert writer.markers == [CommitMarker("q", "c1", 0, "out", 2, 7)]
    assert s.skipped_replays() == 1
    assert s.take_output(0).rows == 2  # the replay's rows are in the output (once)


def test_skipped_replays_are_a_prometheus_counter() -> None:
    registry = CollectorRegistry()
    s = sink(MemoryWriter([marker(4)]))
    JobPrometheus(registry).watch_sink("q", s.skipped_replays)
    s.write(batch(b"x", b"y"), 4, "c1")
    assert registry.get_sample_value("streamctl_job_sink_replays_skipped_total",
                                     {"query": "q"}) == 1


def test_a_restarted_sink_reads_the_last_marker_once() -> None:
    writer = MemoryWriter([marker(4)])
    s = sink(writer)
    assert s.write(batch(b"x", b"y"), 4, "c1") is Replay.SKIP
    assert s.write(batch(b"z"), 5, "c1") is Replay.WRITE
    assert writer.starts == 1 and s.last_committed == CommitMarker("q", "c1", 5, "out", 1, 7)


class SlowStartWriter(MemoryWriter):
    """A writer whose first start waits (up to a second) for a second one to begin."""

    def __init__(self, markers: list[CommitMarker]) -> None:
        super().__init__(markers)
        self.second_began = threading.Event()

    def start(self, query_id: str,
              before_fence: Callable[[], None] = lambda: None) -> CommitMarker | None:
        last = super().start(query_id, before_fence)
        if self.starts == 1:
            self.second_began.wait(1.0)
        else:
            self.second_began.set()
        return last


def test_the_first_batch_and_the_runtime_reading_the_last_marker_start_the_writer_once() -> None:
    writer = SlowStartWriter([marker(4)])
    s = sink(writer)
    seen: list[CommitMarker | None] = []
    first_batch = threading.Thread(target=lambda: s.write(batch(b"z"), 5, "c1"))
    first_batch.start()
    until(lambda: writer.starts == 1, 10, "the first batch starting the writer")
    reader = threading.Thread(target=lambda: seen.append(s.last_marker()))
    reader.start()
    first_batch.join(10)
    reader.join(10)
    assert writer.starts == 1 and not writer.second_began.is_set()
    batch_5 = CommitMarker("q", "c1", 5, "out", 1, 7)
    assert writer.markers[-1] == batch_5 and seen in ([marker(4)], [batch_5])


def test_retarget_takes_effect_at_the_next_batch_and_is_in_its_marker() -> None:
    writer = MemoryWriter()
    s = sink(writer)
    s.write(batch(b"a"), 0, "c1")
    s.retarget("out-v2")
    s.write(batch(b"b"), 1, "c1")
    assert [topic for topic, _ in writer.output] == ["out", "out-v2"]
    assert [m.topic for m in writer.markers] == ["out", "out-v2"]
    with pytest.raises(ValueError, match="must not be empty"):
        s.retarget(" ")


def test_retarget_to_a_topic_that_cannot_take_the_jobs_records_is_refused_and_changes_nothing(
        ) -> None:
    writer = MemoryWriter()
    s = sink(writer)
    with pytest.raises(SinkRefused, match="too-small takes smaller records"):
        s.retarget("too-small")
    s.write(batch(b"a"), 0, "c1")
    assert [topic for topic, _ in writer.output] == ["out"]


def test_rows_the_writer_sent_as_dead_letters_are_counted_apart_from_the_output() -> None:
    class Rejecting(MemoryWriter):
        def commit(self, topic: str, batch: OutputBatch,
                   marker: CommitMarker) -> tuple[Rejected, ...]:
            super().commit(topic, batch, marker)
            return (Rejected(1, "record too large"),)

    s = sink(Rejecting())
    s.write(batch(b"a", b"b" * 10, b"c"), 0, "c1")
    assert s.take_output(0) == Written(rows=2, dead_letters=1)
    assert s.take_output(0) == Written()  # taken once


def test_a_fenced_sink_stays_fenced_and_never_reinitialises() -> None:
    writer = MemoryWriter()
    s = sink(writer)
    writer.fail_next = SinkFenced("another instance with a higher epoch owns this sink")
    with pytest.raises(SinkFenced):
        s.write(batch(b"a"), 0, "c1")
    with pytest.raises(SinkFenced):
        s.write(batch(b"a"), 0, "c1")
    assert writer.starts == 1 and writer.output == []


def test_after_an_unknown_commit_outcome_the_marker_is_read_again() -> None:
    writer = MemoryWriter()
    s = sink(writer)
    s.write(batch(b"a"), 0, "c1")
    writer.fail_next = SinkUnavailable("commit timed out")
    with pytest.raises(SinkUnavailable):
        s.write(batch(b"b"), 1, "c1")
    writer.markers.append(marker(1, rows=1))  # the commit did happen after all
    assert s.write(batch(b"b"), 1, "c1") is Replay.SKIP
    assert writer.starts == 2


def test_an_aborted_batch_is_rerun_by_a_fresh_producer() -> None:
    """During an outage librdkafka times the batch's records out and the transaction is
    aborted; the producer's sequence numbers are spent, so the replay needs a new one."""
    writer = MemoryWriter()
    s = sink(writer)
    writer.fail_next = SinkBatchAborted("transaction aborted: 21 message(s) timed out")
    with pytest.raises(SinkBatchAborted):
        s.write(batch(b"a"), 0, "c1")
    assert s.write(batch(b"a"), 0, "c1") is Replay.WRITE
    assert writer.starts == 2 and writer.output == [("out", [b"a"])]


def test_a_fenced_sink_takes_ownership_only_when_promoted() -> None:
    """Fencing is sticky, except for the explicit promotion of this instance (`standby`)."""
    writer = MemoryWriter([marker(4)])
    s = sink(writer)
    writer.fail_next = SinkFenced("another instance with a higher epoch owns this sink")
    with pytest.raises(SinkFenced):
        s.write(batch(b"a"), 5, "c1")
    assert s.take_ownership() == marker(4) and writer.starts == 2
    assert s.write(batch(b"a"), 5, "c1") is Replay.WRITE


def test_a_sink_asks_the_shared_file_before_it_starts_a_producer_but_not_to_take_ownership(
        ) -> None:
    """A former active restarting after a Kafka pause, just after a standby's promotion: a
    producer started under the query's transactional id would fence the new owner's. Once
    started, the sink does not ask again; taking ownership (a promotion) never asks."""
    owner: list[str | None] = ["instance b was made active at epoch 4"]
    writer = MemoryWriter([marker(4)])
    s = sink(writer, BatchGate(ownership=lambda: owner[0]))
    with pytest.raises(Superseded, match="the sink not started: superseded, instance b"):
        s.last_marker()
    with pytest.raises(Superseded, match="batch 5 not run"):
        s.write(batch(b"a"), 5, "c1")
    assert writer.starts == 0 and writer.output == []
    owner[0] = None
    assert s.last_marker() == marker(4) and writer.starts == 1
    owner[0] = "instance b was made active at epoch 4"
    assert s.last_marker() == marker(4) and writer.starts == 1
    assert s.take_ownership() == marker(4) and writer.starts == 2


def test_a_closed_gate_refuses_the_batch_before_anything_runs() -> None:
    gate = BatchGate()
    gate.close()
    with pytest.raises(QuiesceRequested):
        sink(MemoryWriter(), gate)(object(), 3)  # type: ignore[arg-type]


@pytest.mark.parametrize(("error", "action"), [
    (KafkaError(KafkaError._FENCED, fatal=True), Action.FENCED),
    (KafkaError(KafkaError.PRODUCER_FENCED), Action.FENCED),
    (KafkaError(KafkaError._STATE, txn_requires_abort=True), Action.ABORT),
    (KafkaError(KafkaError._TIMED_OUT, retriable=True), Action.RETRY),
    (KafkaError(KafkaError.COORDINATOR_NOT_AVAILABLE, retriable=True), Action.RETRY),
    (KafkaError(KafkaError._INCONSISTENT, fatal=True), Action.FATAL),
    (KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), Action.FATAL),
])
def test_transaction_errors_are_classified_by_what_comes_next(error: KafkaError,
                                                              action: Action) -> None:
    assert classify(error) is action


class DeadProducer:
    """A producer past a fatal error: every transaction call raises its cause."""

    def __init__(self, cause: KafkaError) -> None:
        self.cause = cause
        self.asked = 0

    def abort_transaction(self, _timeout: float) -> None:
        self.asked += 1
        raise KafkaException(self.cause)


def test_a_generic_fatal_error_is_classified_by_the_producers_own_cause() -> None:
    fenced = DeadProducer(KafkaError(KafkaError._FENCED, fatal=True))
    unknown = DeadProducer(KafkaError(KafkaError._INCONSISTENT, fatal=True))
    generic = KafkaError(KafkaError._FATAL)

    assert classify(fatal_cause(generic, fenced)) is Action.FENCED  # type: ignore[arg-type]
    assert classify(fatal_cause(generic, unknown)) is Action.FATAL  # type: ignore[arg-type]


def test_a_cause_that_is_not_fatal_leaves_the_generic_fatal_error() -> None:
    timed_out = DeadProducer(KafkaError(KafkaError._TIMED_OUT, retriable=True))
    generic = KafkaError(KafkaError._FATAL)

    assert fatal_cause(generic, timed_out) is generic  # type: ignore[arg-type]


def test_a_writer_whose_produce_failed_on_fencing_raises_fenced_and_forgets_its_producer(
        ) -> None:
    writer = KafkaTransactionalWriter(TransactionalSettings("k:1", "tx-q"))
    dead = DeadProducer(KafkaError(KafkaError._FENCED, fatal=True))
    writer._producer = dead  # type: ignore[assignment]

    with pytest.raises(SinkFenced, match="another instance with a higher epoch"):
        writer._raise_for("produce to out", KafkaError(KafkaError._FATAL), dead)  # type: ignore[arg-type]
    assert writer._producer is None


def test_an_error_with_its_own_code_is_not_looked_behind() -> None:
    producer = DeadProducer(KafkaError(KafkaError._FENCED, fatal=True))
    timed_out = KafkaError(KafkaError._TIMED_OUT, retriable=True)

    assert fatal_cause(timed_out, producer) is timed_out  # type: ignore[arg-type]
    assert producer.asked == 0


@pytest.mark.parametrize(("code", "fault"), [
    (KafkaError.MSG_SIZE_TOO_LARGE, Fault.REJECTED),
    (KafkaError.INVALID_RECORD, Fault.REJECTED),
    (KafkaError.RECORD_LIST_TOO_LARGE, Fault.REJECTED),
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, Fault.REFUSED),
    (KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, Fault.REFUSED),
    (KafkaError._MSG_TIMED_OUT, Fault.TRANSIENT),
    (KafkaError.NOT_LEADER_FOR_PARTITION, Fault.TRANSIENT),
    (KafkaError.UNKNOWN_TOPIC_OR_PART, Fault.TRANSIENT),
])
def test_a_records_delivery_error_is_permanent_or_transient_by_its_code(code: int,
                                                                        fault: Fault) -> None:
    assert record_fault(KafkaError(code)) is fault


def test_an_encoder_without_key_and_value_is_named() -> None:
    with pytest.raises(ValueError, match=r"missing \['key'\]"):
        output_batch(pa.table({"value": [b"v"]}))
