"""The control consumer's assignment: where each partition starts, and that a broker still
settling (a partition without a leader yet) never ends the thread that polls."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from schemas import ControlTuple
from streamctl.security.kafka import PLAINTEXT
from streaming_jobs.runtime import kafka
from streaming_jobs.runtime.kafka import TypedConsumer


class SettlingBroker:
    """Stands in for the consumer the rebalance callback is handed: its end offset query
    fails `failures` times with NOT_LEADER_FOR_PARTITION, then answers `end`."""

    def __init__(self, failures: int, end: int = 42) -> None:
        self.failures, self.end = failures, end
        self.asked = 0
        self.assigned: list[tuple[str, int, int]] = []

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        self.asked += 1
        if self.asked <= self.failures:
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        return 0, self.end

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in partitions]


@pytest.fixture
def consumer(monkeypatch: pytest.MonkeyPatch) -> Iterator[TypedConsumer[ControlTuple]]:
    monkeypatch.setattr(kafka, "ASSIGN_RETRY_S", 0.0)
    held: list[bool] = []
    c = TypedConsumer("127.0.0.1:9", "control", "unit", ControlTuple, PLAINTEXT,
                      on_assignment=held.append)
    try:
        yield c
    finally:
        c.close()


def test_an_assignment_waits_out_a_partition_without_a_leader_and_starts_at_its_end(
        consumer: TypedConsumer[ControlTuple]) -> None:
    broker = SettlingBroker(failures=3)
    consumer._on_assign(broker, [TopicPartition("control", 0)])  # type: ignore[arg-type]
    assert broker.assigned == [("control", 0, 42)]
    assert consumer.assigned.is_set()


def test_an_end_offset_never_known_still_assigns_the_partition_without_raising(
        consumer: TypedConsumer[ControlTuple], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka, "ASSIGN_PIN_TIMEOUT_S", 0.0)
    broker = SettlingBroker(failures=10**6)
    consumer._on_assign(broker, [TopicPartition("control", 0)])  # type: ignore[arg-type]
    # Left unpinned (the library's "invalid" offset): the group's committed offset or the end.
    assert broker.assigned == [("control", 0, TopicPartition("control", 0).offset)]


def test_a_reassignment_resumes_where_the_consumer_was_without_asking_the_broker(
        consumer: TypedConsumer[ControlTuple]) -> None:
    consumer._on_assign(SettlingBroker(failures=0, end=7),  # type: ignore[arg-type]
                        [TopicPartition("control", 0)])
    again = SettlingBroker(failures=10**6, end=99)
    consumer._on_assign(again, [TopicPartition("control", 0)])  # type: ignore[arg-type]
    assert again.assigned == [("control", 0, 7)] and again.asked == 0
