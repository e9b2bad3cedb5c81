"""The transactional sink on the real broker, without Spark: replays of committed batches are
not written again (same instance or a restarted one), a newer instance fences an older one
(and one another instance superseded fences nobody),
the marker of a query is found behind another query's open transaction, and rows (or
undecodable input) no topic could take are dead letters, never a failed batch."""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from schemas.codec import DecodeError
from schemas.records import CommitMarker
from streamctl.security.kafka import client_config
from streaming_jobs.formats import KeyValue
from streaming_jobs.runtime.kafka import DeadLetterFactory
from streaming_jobs.runtime.sink.foreach_batch import TransactionalKafkaSink, transactional_id
from streaming_jobs.runtime.sink.gate import BatchGate, Ownership, Superseded
from streaming_jobs.runtime.sink.transactional import (
    OutputBatch,
    Replay,
    SinkFenced,
    decode_marker,
    encode_marker,
)
from streaming_jobs.runtime.sink.transactional_kafka import (
    Action,
    KafkaTransactionalWriter,
    TransactionalSettings,
    classify,
    fatal_cause,
)
from tests.support.kafka import read_committed, set_topic_config

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CHECKPOINT = "checkpoint-1"


def _unused(_: object) -> object:
    raise AssertionError("the encoder runs only under Spark")


class Topics:
    def __init__(self, bootstrap: str, new_topic: Callable[..., str]) -> None:
        self.bootstrap = bootstrap
        self.output = new_topic(partitions=2)
        self.markers = new_topic(partitions=1, config={"cleanup.policy": "compact"})
        self.query_id = f"q-{uuid.uuid4().hex[:8]}"
        self.sinks: list[TransactionalKafkaSink] = []

    def sink(self, query_id: str | None = None,
             ownership: Ownership | None = None) -> TransactionalKafkaSink:
        """A new instance, as after a process restart (same query, same transactional id);
        `ownership` is its look at the shared desired-state file."""
        query_id = query_id or self.query_id
        settings = TransactionalSettings(self.bootstrap, transactional_id(query_id),
                                         marker_topic=self.markers, retry_budget_s=20.0)
        sink = TransactionalKafkaSink(BatchGate(ownership), KafkaTransactionalWriter(settings),
                                      query_id, self.output, KeyValue())
        self.sinks.append(sink)
        return sink


@pytest.fixture
def topics(bootstrap_servers: str, new_topic: Callable[..., str]) -> Iterator[Topics]:
    made = Topics(bootstrap_servers, new_topic)
    yield made
    for sink in made.sinks:
        sink.close()


def rows_of(batch_id: int, n: int = 50) -> OutputBatch:
    keys = [f"k{i % 7}".encode() for i in range(n)]
    return OutputBatch(keys=keys, values=[f"b{batch_id}-r{i}".encode() for i in range(n)])


def committed_values(topics: Topics) -> Counter[bytes]:
    return Counter(m.value() for m in read_committed(topics.bootstrap, topics.output))


def test_replayed_batches_are_written_once(topics: Topics) -> None:
    first = topics.sink()
    for batch_id in range(3):
        assert first.write(rows_of(batch_id), batch_id, CHECKPOINT) is Replay.WRITE
    # A crash between the transaction commit and Spark's commit log: batch 2 comes again,
    # in the same driver and then in a new process.
    assert first.write(rows_of(2), 2, CHECKPOINT) is Replay.SKIP
    restarted = topics.sink()
    assert restarted.write(rows_of(2), 2, CHECKPOINT) is Replay.SKIP
    assert restarted.skipped_replays() == 1 and restarted.take_output(2).rows == 50
    assert restarted.write(rows_of(3), 3, CHECKPOINT) is Replay.WRITE

    seen = committed_values(topics)
    expected = {v for b in range(4) for v in rows_of(b).values}
    assert set(seen) == expected and max(seen.values()) == 1
    markers = [decode_marker(m.value()) for m in read_committed(topics.bootstrap,
                                                                topics.markers)]
    assert [m.batch_id for m in markers] == [0, 1, 2, 3]
    assert {(m.topic, m.rows, m.checkpoint_id) for m in markers} == {
        (topics.output, 50, CHECKPOINT)}


def test_a_new_checkpoint_starts_its_batch_ids_again(topics: Topics) -> None:
    sink = topics.sink()
    sink.write(rows_of(0), 0, CHECKPOINT)
    assert topics.sink().write(rows_of(100), 0, "checkpoint-2") is Replay.WRITE
    assert len(committed_values(topics)) == 100


def test_a_newer_instance_fences_the_older_one(topics: Topics) -> None:
    old = topics.sink()
    old.write(rows_of(0), 0, CHECKPOINT)
    new = topics.sink()
    new.write(rows_of(1), 1, CHECKPOINT)  # its start fences `old`

    with pytest.raises(SinkFenced, match="another instance with a higher epoch"):
        old.write(rows_of(2), 2, CHECKPOINT)
    with pytest.raises(SinkFenced):  # and stays fenced, without fencing `new` back
        old.write(rows_of(3), 3, CHECKPOINT)
    new.write(rows_of(2), 2, CHECKPOINT)

    seen = committed_values(topics)
    assert set(seen) == {v for b in range(3) for v in rows_of(b).values}
    assert max(seen.values()) == 1


def test_an_instance_another_one_superseded_starts_no_producer_and_the_owner_writes_on(
        topics: Topics) -> None:
    """A former active restarting its query after a Kafka pause, just after another instance
    was promoted: its first look at the output must not fence the owner's producer."""
    owner = topics.sink()
    owner.write(rows_of(0), 0, CHECKPOINT)
    former = topics.sink(ownership=lambda: "instance b was made active at epoch 4")
    with pytest.raises(Superseded):
        former.last_marker()
    owner.write(rows_of(1), 1, CHECKPOINT)

    seen = committed_values(topics)
    assert set(seen) == {v for b in range(2) for v in rows_of(b).values}
    assert max(seen.values()) == 1


def test_a_fencing_that_reaches_produce_as_a_generic_fatal_error_is_known_as_fencing(
        topics: Topics) -> None:
    """Fencing found by the producer's own thread while rows are produced reaches `produce` as
    `_FATAL` only; taken for Kafka being away, the old instance would fence the new one back."""
    transactional = f"tx-{uuid.uuid4().hex[:8]}"

    def producer() -> Producer:
        made = Producer(client_config(topics.bootstrap, **{"transactional.id": transactional}))
        made.init_transactions(20)
        return made
    old = producer()
    producer()  # fences `old`
    old.begin_transaction()
    old.produce(topics.output, value=b"row")
    with contextlib.suppress(KafkaException):  # flush may itself raise the fencing
        old.flush(20)  # adding the partition to the transaction fails: `old` is fenced
    with pytest.raises(KafkaException) as raised:
        old.produce(topics.output, value=b"row")

    assert raised.value.args[0].code() == KafkaError._FATAL
    assert classify(fatal_cause(raised.value.args[0], old)) is Action.FENCED


def test_the_marker_is_found_behind_another_querys_open_transaction(topics: Topics) -> None:
    """Another query's open transaction holds back the marker topic's last stable offset;
    a restarted sink must wait for it rather than miss its own later marker and rewrite."""
    first = topics.sink()
    first.write(rows_of(0), 0, CHECKPOINT)
    other = Producer(client_config(topics.bootstrap,
                                   **{"transactional.id": f"other-{uuid.uuid4()}"}))
    other.init_transactions(20)
    other.begin_transaction()
    other_marker = CommitMarker("other", "c", 0, "t", 0, 0)
    other.produce(topics.markers, key=b"other", value=encode_marker(other_marker))
    other.flush(10)
    first.write(rows_of(1), 1, CHECKPOINT)  # its marker lies behind the open one

    committing = threading.Event()

    def commit_the_other() -> None:
        committing.set()
        other.commit_transaction(20)
    committer = threading.Timer(3.0, commit_the_other)
    committer.start()
    try:
        restarted = topics.sink()
        assert restarted.write(rows_of(1), 1, CHECKPOINT) is Replay.SKIP
        returned_before_the_commit = not committing.is_set()
    finally:
        committer.join()
    assert not returned_before_the_commit, "it did not wait for the other transaction"
    assert len(committed_values(topics)) == 100


def test_rows_the_output_topic_cannot_take_are_dead_letters_in_the_batchs_transaction(
        bootstrap_servers: str, new_topic: Callable[..., str]) -> None:
    """Rows over the output topic's limit, and a keyless row for a compacted topic, go to the
    dead-letter topic in the batch's own transaction, framed to fit the job's record limit
    (a larger one keeps what fits); every other row is
    committed once. When the topic's limit is lowered under the writer's feet, the broker's
    refusal is pinned on the one row it concerns (not on the rows it shared a request with)
    and the batch is written again without it."""
    out = new_topic(partitions=2, config={"max.message.bytes": "200000",
                                          "cleanup.policy": "compact"})
    dlq = new_topic(partitions=1)
    markers = new_topic(partitions=1, config={"cleanup.policy": "compact"})
    writer = KafkaTransactionalWriter(TransactionalSettings(
        bootstrap_servers, f"t-{uuid.uuid4().hex[:8]}", marker_topic=markers,
        dead_letter_topic=dlq, max_record_bytes=250_000, retry_budget_s=20.0))
    try:
        writer.start("q")
        batch = OutputBatch(keys=[b"k0", b"k1", None, b"k3", b"k4"],
                            values=[b"a", b"b" * 300_000, b"c", b"d" * 199_990, b"e"])
        rejected = writer.commit(out, batch, CommitMarker("q", CHECKPOINT, 0, out, 5, 0))
        assert [(r.index, r.reason.split(":")[0]) for r in rejected] == [
            (1, f"record too large for {out}"), (2, "no key"), (3, f"record too large for {out}")]
        assert f"{out}'s max.message.bytes 200000" in rejected[0].reason
        set_topic_config(bootstrap_servers, out, **{"max.message.bytes": "100000"})
        again = OutputBatch(keys=[b"k5", b"k6", b"k7"], values=[b"f", b"g" * 150_000, b"h"])
        rejected = writer.commit(out, again, CommitMarker("q", CHECKPOINT, 1, out, 3, 0))
        assert [r.index for r in rejected] == [1]
    finally:
        writer.close()
    assert sorted((m.key(), m.value()) for m in read_committed(bootstrap_servers, out)) == [
        (b"k0", b"a"), (b"k4", b"e"), (b"k5", b"f"), (b"k7", b"h")]
    letters = read_committed(bootstrap_servers, dlq)
    headers = [{k: v.decode() for k, v in m.headers() or []} for m in letters]
    assert [(m.key(), h["batch_id"], h["size"]) for m, h in zip(letters, headers, strict=True)] \
        == [(b"k1", "0", "300000"), (None, "0", "1"), (b"k3", "0", "199990"),
            (b"k6", "1", "150000")]
    assert all(h["stage"] == "output" and h["output_topic"] == out for h in headers)
    assert [m.value() for m in letters][1:3] == [b"c", b"d" * 199_990]  # whole: they fit
    kept = len(letters[0].value())
    assert headers[0]["truncated"] == f"kept the first {kept} of 300000 bytes"
    assert letters[0].value() == b"b" * kept


def test_an_undecodable_record_larger_than_a_dead_letter_may_be_is_sent_truncated(
        bootstrap_servers: str, new_topic: Callable[..., str]) -> None:
    """The dead-letter producer of the Spark tasks: a 2 MB record that does not decode is a
    dead letter of at most the job's record limit, with its origin, size and reason."""
    dlq = new_topic(partitions=1)
    letters = DeadLetterFactory(bootstrap_servers, dlq, query_id="q",
                                max_record_bytes=100_000)()
    error = DecodeError("not Avro single-object encoded: it starts with de ad",
                        topic="in", partition=1, offset=41)
    letters.send(b"\xde\xad" * 1_000_000, error)
    letters.send(b"small", error.at(topic="in", partition=1, offset=42))
    letters.flush()
    found = read_committed(bootstrap_servers, dlq)
    headers = [{k: v.decode() for k, v in m.headers() or []} for m in found]
    assert [(h["source_offset"], h["size"]) for h in headers] == [("41", "2000000"),
                                                                 ("42", "5")]
    assert headers[0]["truncated"].endswith("of 2000000 bytes") and 90_000 < len(
        found[0].value()) < 100_000
    assert found[1].value() == b"small" and "truncated" not in headers[1]

