"""The transactional sink on the real broker, without Spark: replays of committed batches are
not written again (same instance or a restarted one), a newer instance fences an older one,
and the marker of a query is found behind another query's open transaction."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Producer

from schemas.records import CommitMarker
from security.kafka import client_config
from streaming_jobs.formats import KeyValue
from streaming_jobs.runtime.sink.foreach_batch import TransactionalKafkaSink, transactional_id
from streaming_jobs.runtime.sink.gate import BatchGate
from streaming_jobs.runtime.sink.transactional import (
    OutputBatch,
    Replay,
    SinkFenced,
    decode_marker,
    encode_marker,
)
from streaming_jobs.runtime.sink.transactional_kafka import (
    KafkaTransactionalWriter,
    TransactionalSettings,
)
from tests.support.kafka import read_committed

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

    def sink(self, query_id: str | None = None) -> TransactionalKafkaSink:
        """A new instance, as after a process restart (same query, same transactional id)."""
        query_id = query_id or self.query_id
        settings = TransactionalSettings(self.bootstrap, transactional_id(query_id),
                                         marker_topic=self.markers, retry_budget_s=20.0)
        sink = TransactionalKafkaSink(BatchGate(), KafkaTransactionalWriter(settings),
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
    assert restarted.skipped_replays() == 1 and restarted.take_output_rows(2) == 50
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

    committer = threading.Timer(3.0, lambda: other.commit_transaction(20))
    committer.start()
    started = time.monotonic()
    try:
        restarted = topics.sink()
        assert restarted.write(rows_of(1), 1, CHECKPOINT) is Replay.SKIP
    finally:
        committer.join()
    assert time.monotonic() - started >= 2.5  # it did wait for the other transaction
    assert len(committed_values(topics)) == 100
