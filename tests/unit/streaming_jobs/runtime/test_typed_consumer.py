"""The control consumer's own assignment: where each partition starts, that it is held only
once every partition it found has started, and that a broker still settling (a partition
without a leader yet, a topic not there yet, an assignment refused) never ends the thread that
polls."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from schemas import ControlTuple
from streamctl.security.kafka import PLAINTEXT
from streaming_jobs.runtime import kafka
from streaming_jobs.runtime.kafka import TypedConsumer


class SettlingBroker:
    """Stands in for the consumer's client: the topic has `partitions` (none: not there yet);
    each end offset query fails `failures` times with NOT_LEADER_FOR_PARTITION, then answers
    `end`; an assignment fails `refusals` times."""

    def __init__(self, partitions: int = 1, failures: int = 0, end: int = 42,
                 refusals: int = 0) -> None:
        self.partitions, self.failures, self.end, self.refusals = (partitions, failures, end,
                                                                   refusals)
        self.asked = 0
        self.assigned: list[tuple[str, int, int]] = []

    def list_topics(self, topic: str, timeout: float) -> SimpleNamespace:
        found = SimpleNamespace(error=None, partitions={p: None for p in range(self.partitions)})
        return SimpleNamespace(topics={topic: found} if self.partitions else {})

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        self.asked += 1
        if self.asked <= self.failures:
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        return 0, self.end

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        if self.refusals > 0:
            self.refusals -= 1
            raise KafkaException(KafkaError(KafkaError._STATE))
        self.assigned += [(tp.topic, tp.partition, tp.offset) for tp in partitions]


@pytest.fixture
def held() -> list[bool]:
    return []


@pytest.fixture
def consumer(monkeypatch: pytest.MonkeyPatch,
             held: list[bool]) -> Iterator[TypedConsumer[ControlTuple]]:
    monkeypatch.setattr(kafka, "ASSIGN_RETRY_S", 0.0)
    monkeypatch.setattr(kafka, "PARTITIONS_LOOKUP_S", 0.0)
    c = TypedConsumer("127.0.0.1:9", "control", "unit", ControlTuple, PLAINTEXT,
                      on_assignment=held.append)
    client = c._guard.consumer  # `settle` puts a broker of the test's in its place
    try:
        yield c
    finally:
        client.close()


def settle(consumer: TypedConsumer[ControlTuple], broker: SettlingBroker) -> None:
    consumer._guard._consumer = broker  # type: ignore[assignment]
    consumer._assign_new()


def test_it_waits_out_a_partition_without_a_leader_and_starts_at_its_end(
        consumer: TypedConsumer[ControlTuple], held: list[bool]) -> None:
    broker = SettlingBroker(failures=3)
    settle(consumer, broker)
    assert broker.assigned == [("control", 0, 42)]
    assert consumer.assigned.is_set() and held == [True]


def test_a_partition_whose_end_is_not_known_in_time_starts_on_a_later_poll_and_only_then_held(
        consumer: TypedConsumer[ControlTuple], held: list[bool],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kafka, "ASSIGN_PIN_TIMEOUT_S", 0.0)
    broker = SettlingBroker(partitions=2, failures=1, end=42)
    settle(consumer, broker)  # partition 0's end is not told: partition 1 starts alone
    assert broker.assigned == [("control", 1, 42)]
    assert not consumer.assigned.is_set() and held == []
    settle(consumer, broker)
    assert broker.assigned == [("control", 1, 42), ("control", 0, 42)]
    assert consumer.assigned.is_set() and held == [True]


def test_a_partition_added_once_it_holds_the_topic_starts_at_its_beginning(
        consumer: TypedConsumer[ControlTuple], held: list[bool]) -> None:
    broker = SettlingBroker(partitions=1, end=7)
    settle(consumer, broker)
    broker.partitions = 2
    settle(consumer, broker)
    assert broker.assigned == [("control", 0, 7), ("control", 1, OFFSET_BEGINNING)]
    assert broker.asked == 1 and held == [True]


def test_a_topic_not_there_yet_or_a_refused_assignment_is_tried_again_without_raising(
        consumer: TypedConsumer[ControlTuple], held: list[bool]) -> None:
    broker = SettlingBroker(partitions=0, refusals=1)
    settle(consumer, broker)
    broker.partitions = 1
    settle(consumer, broker)  # refused
    assert broker.assigned == [] and not consumer.assigned.is_set()
    settle(consumer, broker)
    assert broker.assigned == [("control", 0, 42)] and held == [True]
