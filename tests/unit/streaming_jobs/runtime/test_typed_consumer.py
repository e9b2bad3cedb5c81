"""The control consumer's assignment: where each partition starts, and that a broker still
settling (a partition without a leader yet) never ends the thread that polls."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_END, KafkaError, KafkaException, TopicPartition

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
        self.sought: list[tuple[str, int, int]] = []

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        self.asked += 1
        if self.asked <= self.failures:
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        return 0, self.end

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = [(tp.topic, tp.partition, tp.offset) for tp in partitions]

    def seek(self, tp: TopicPartition) -> None:
        self.sought.append((tp.topic, tp.partition, tp.offset))


@pytest.fixture
def held() -> list[bool]:
    return []


@pytest.fixture
def consumer(monkeypatch: pytest.MonkeyPatch,
             held: list[bool]) -> Iterator[TypedConsumer[ControlTuple]]:
    monkeypatch.setattr(kafka, "ASSIGN_RETRY_S", 0.0)
    c = TypedConsumer("127.0.0.1:9", "control", "unit", ControlTuple, PLAINTEXT,
                      on_assignment=held.append)
    try:
        yield c
    finally:
        c.close()


def test_an_assignment_waits_out_a_partition_without_a_leader_and_starts_at_its_end(
        consumer: TypedConsumer[ControlTuple], held: list[bool]) -> None:
    broker = SettlingBroker(failures=3)
    consumer._on_assign(broker, [TopicPartition("control", 0)])  # type: ignore[arg-type]
    assert broker.assigned == [("control", 0, 42)]
    assert consumer.assigned.is_set() and held == [True]


def test_an_end_not_known_in_time_is_pinned_by_a_later_poll_and_only_then_held(
        consumer: TypedConsumer[ControlTuple], held: list[bool],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka, "ASSIGN_PIN_TIMEOUT_S", 0.0)
    broker = SettlingBroker(failures=2, end=42)
    consumer._on_assign(broker, [TopicPartition("control", 0)])  # type: ignore[arg-type]
    # Read from the end as the first fetch finds it, never from the group's committed offset.
    assert broker.assigned == [("control", 0, OFFSET_END)]
    assert not consumer.assigned.is_set() and held == [False]
    consumer._pin_unpinned(broker)  # type: ignore[arg-type]  # the broker still settling
    assert broker.sought == [] and not consumer.assigned.is_set()
    consumer._pin_unpinned(broker)  # type: ignore[arg-type]
    assert broker.sought == [("control", 0, 42)]
    assert consumer.assigned.is_set() and held == [False, True]


def test_a_reassignment_resumes_where_the_consumer_was_without_asking_the_broker(
        consumer: TypedConsumer[ControlTuple]) -> None:
    consumer._on_assign(SettlingBroker(failures=0, end=7),  # type: ignore[arg-type]
                        [TopicPartition("control", 0)])
    again = SettlingBroker(failures=10**6, end=99)
    consumer._on_assign(again, [TopicPartition("control", 0)])  # type: ignore[arg-type]
    assert again.assigned == [("control", 0, 7)] and again.asked == 0
