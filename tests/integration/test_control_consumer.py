"""The job's control consumer on the real broker: it starts at the end of the control topic,
and when the group rebalances (another member takes its partition, then leaves) it resumes
where it was instead of jumping to the end again, so no tuple sent meanwhile is skipped."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer

from schemas import SensorReading, codec_for
from streamctl.security.kafka import PLAINTEXT, client_config
from streaming_jobs.runtime.kafka import TypedConsumer
from tests.support.kafka import produce
from tests.support.waiting import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CODEC = codec_for(SensorReading)


def record(seq: int) -> bytes:
    return CODEC.encode(SensorReading("s", 1_000, 1.0, seq))


def next_seq(consumer: TypedConsumer[SensorReading]) -> int:
    def one() -> int | None:
        got = consumer.poll(0.5)
        return got.seq if isinstance(got, SensorReading) else None
    return until(one, 30, "a record from the control consumer", 0)


def test_after_a_rebalance_it_resumes_where_it_was_not_at_the_end(
        bootstrap_servers: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    group = f"group-{topic}"
    produce(bootstrap_servers, topic, [record(0)])  # before the consumer: not for it
    held: list[bool] = []  # what it reports after each assignment and revocation
    consumer = TypedConsumer(bootstrap_servers, topic, group, SensorReading, PLAINTEXT,
                             on_assignment=held.append)
    # The range assignor gives the only partition to the member whose id sorts first: this
    # one's client id makes it take the partition when it joins.
    other = Consumer(client_config(bootstrap_servers, **{
        "group.id": group, "client.id": "0-rebalancer", "enable.auto.commit": False}))
    took, other_open = threading.Event(), True
    try:
        until(lambda: (consumer.poll(0.2), consumer.assigned.is_set())[1], 30, "an assignment")
        assert held[-1] is True, held
        produce(bootstrap_servers, topic, [record(1)])
        assert next_seq(consumer) == 1

        other.subscribe([topic], on_assign=lambda _c, parts: took.set() if parts else None)
        until(lambda: (consumer.poll(0.2), other.poll(0.2), took.is_set())[2], 60,
              "the other member taking the partition (a rebalance)", 0)
        # It gave the partition up before the other member could get it (an eager rebalance
        # revokes first), and said so.
        assert held[-1] is False, held
        produce(bootstrap_servers, topic, [record(2)])  # while the partition is elsewhere
        other.close()  # leaves the group: a second rebalance gives the partition back
        other_open = False
        assert next_seq(consumer) == 2
        assert held[-1] is True, held  # and that it holds it again
    finally:
        if other_open:
            other.close()
        consumer.close()
