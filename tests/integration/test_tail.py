"""The tail's stall guard, on the real broker: a fetch that stopped is restarted at the
position reached (nothing skipped, nothing repeated); a tail that has read everything, or
waits behind an open or aborted transaction, is left alone."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer, TopicPartition

from schemas import SensorReading, codec_for
from streamctl.tail import Tail
from tests.accounting import until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CODEC = codec_for(SensorReading)


def produce(bootstrap: str, topic: str, seqs: range, producer: Producer | None = None) -> None:
    own = producer is None
    producer = producer or Producer({"bootstrap.servers": bootstrap})
    for seq in seqs:
        producer.produce(topic, CODEC.encode(SensorReading("s", 1_000, 1.0, seq)))
    if own:
        assert producer.flush(10) == 0


def read(tail: Tail, count: int, seconds: float) -> list[int]:
    seen: list[int] = []

    def enough() -> bool:
        seen.extend(r.seq for _t, r in tail.poll(0.2) if isinstance(r, SensorReading))
        return len(seen) >= count
    until(enough, seconds, f"{count} records from the tail")
    return seen


def test_a_stalled_fetch_is_restarted_where_it_stopped(
        bootstrap_servers: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    produce(bootstrap_servers, topic, range(5))
    tail = Tail(bootstrap_servers, {topic: SensorReading}, from_beginning=True, stall_check_s=1)
    try:
        assert read(tail, 5, 30) == [0, 1, 2, 3, 4]
        # A paused partition fetches nothing: the symptom of librdkafka#5153, made on purpose.
        tail._consumer.pause([TopicPartition(topic, 0)])
        produce(bootstrap_servers, topic, range(5, 10))
        assert read(tail, 5, 30) == [5, 6, 7, 8, 9]
        assert tail.fetch_restarts >= 1  # a restart racing the pause may need a second
    finally:
        tail.close()


def test_a_tail_at_the_end_or_behind_an_open_transaction_is_not_restarted(
        bootstrap_servers: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    produce(bootstrap_servers, topic, range(3))
    tail = Tail(bootstrap_servers, {topic: SensorReading}, from_beginning=True, stall_check_s=1)
    transactional = Producer({"bootstrap.servers": bootstrap_servers,
                              "transactional.id": f"tail-test-{topic}"})
    try:
        assert read(tail, 3, 30) == [0, 1, 2]
        transactional.init_transactions(30)
        transactional.begin_transaction()
        produce(bootstrap_servers, topic, range(3, 6), transactional)
        assert transactional.flush(10) == 0
        assert not _poll_for(tail, 3.0)  # open: read_committed sees nothing, and waits
        transactional.abort_transaction(30)
        assert not _poll_for(tail, 3.0)  # aborted: never delivered
        assert tail.fetch_restarts == 0
    finally:
        tail.close()


def _poll_for(tail: Tail, seconds: float) -> list[object]:
    """Everything the tail delivers within `seconds` (polled, not slept)."""
    got: list[object] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got.extend(tail.poll(0.2))
    return got
