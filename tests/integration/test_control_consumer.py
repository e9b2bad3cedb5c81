"""The job's control consumer on the real broker: it starts at the end of the control topic,
and an assignment after a rejoin (a broker restart makes the group rebalance) resumes where
the consumer was instead of jumping to the end again, so no tuple sent meanwhile is skipped."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import OFFSET_INVALID, Producer, TopicPartition

from schemas import SensorReading, codec_for
from security.kafka import PLAINTEXT
from streaming_jobs.runtime.kafka import TypedConsumer
from tests.accounting import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]

CODEC = codec_for(SensorReading)


def send(producer: Producer, topic: str, seq: int) -> None:
    producer.produce(topic, CODEC.encode(SensorReading("s", 1_000, 1.0, seq)))
    assert producer.flush(10) == 0


def next_seq(consumer: TypedConsumer[SensorReading]) -> int:
    got: list[int] = []

    def one() -> bool:
        record = consumer.poll(0.5)
        if isinstance(record, SensorReading):
            got.append(record.seq)
        return bool(got)
    until(one, 30, "a record from the control consumer")
    return got[0]


def test_a_rejoin_resumes_at_the_committed_position_not_the_end(
        bootstrap_servers: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    producer = Producer({"bootstrap.servers": bootstrap_servers})
    send(producer, topic, 0)  # before the consumer: not for it
    consumer = TypedConsumer(bootstrap_servers, topic, f"group-{topic}", SensorReading,
                             PLAINTEXT)
    try:
        until(lambda: (consumer.poll(0.2), consumer.assigned.is_set())[1], 30, "an assignment")
        send(producer, topic, 1)
        assert next_seq(consumer) == 1
        consumer._consumer.commit(asynchronous=False)
        send(producer, topic, 2)  # sent while the group rebalances
        # What the rebalance hands the consumer: its partition, no offset (the committed one).
        consumer._on_assign(consumer._consumer, [TopicPartition(topic, 0, OFFSET_INVALID)])
        assert next_seq(consumer) == 2
    finally:
        consumer.close()
