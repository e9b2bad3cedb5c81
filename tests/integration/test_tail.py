"""The tail's stall guard, on the real broker: a consumer whose fetch stopped is replaced by
one at the position reached (nothing skipped, nothing repeated); a tail that has read everything, or
waits behind an open or aborted transaction, is left alone."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Producer, TopicPartition

from schemas import SensorReading, codec_for
from streamctl.security.kafka import client_config
from streamctl.stack.waiting import poll_until
from streamctl.tail import Tail
from tests.support.kafka import produce
from tests.support.waiting import holds, until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CODEC = codec_for(SensorReading)


def readings(seqs: range) -> list[bytes]:
    return [CODEC.encode(SensorReading("s", 1_000, 1.0, seq)) for seq in seqs]


def read(tail: Tail, count: int, seconds: float) -> list[int]:
    seen: list[int] = []

    def enough() -> bool:
        seen.extend(r.seq for _t, r in tail.poll(0.2) if isinstance(r, SensorReading))
        return len(seen) >= count
    until(enough, seconds, f"{count} records from the tail")
    return seen


def test_a_stalled_fetch_goes_on_where_it_stopped_and_is_then_left_alone(
        bootstrap_servers: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    produce(bootstrap_servers, topic, readings(range(5)))
    tail = Tail(bootstrap_servers, {topic: SensorReading}, from_beginning=True, stall_check_s=1)
    try:
        assert read(tail, 5, 30) == [0, 1, 2, 3, 4]
        # A paused partition fetches nothing: the symptom of librdkafka#5153, made on purpose.
        tail._consumer.pause([TopicPartition(topic, 0)])
        produce(bootstrap_servers, topic, readings(range(5, 10)))
        assert read(tail, 5, 30) == [5, 6, 7, 8, 9]
        assert tail.fetch_restarts >= 1
        # Caught up, the new consumer is left alone: three checks find nothing to act on.
        replaced = tail.fetch_restarts
        holds(lambda: not tail.poll(0.2) and tail.fetch_restarts == replaced, 3,
              "the caught-up tail left alone", 0)
    finally:
        tail.close()


def test_a_stalled_partition_goes_on_where_it_stopped_while_another_keeps_delivering(
        bootstrap_servers: str, new_topic: Callable[..., str]) -> None:
    """A broker restart strands the partitions it led: the tail's other partition delivering
    all along does not hide the stalled one, whose records come next, in order."""
    topic = new_topic(partitions=2)
    tail = Tail(bootstrap_servers, {topic: SensorReading}, from_beginning=True, stall_check_s=1)
    seen: list[int] = []
    try:
        tail._consumer.pause([TopicPartition(topic, 0)])
        produce(bootstrap_servers, topic, readings(range(5)), partition=0)

        def stalled_ones_read() -> bool:
            produce(bootstrap_servers, topic, readings(range(100, 101)), partition=1)
            seen.extend(r.seq for _t, r in tail.poll(0.2)
                        if isinstance(r, SensorReading) and r.seq < 100)
            return len(seen) >= 5
        until(stalled_ones_read, 60, "the stalled partition's records", 0)
        assert seen == [0, 1, 2, 3, 4]
        assert tail.fetch_restarts >= 1
    finally:
        tail.close()


def test_a_tail_at_the_end_or_behind_an_open_transaction_is_not_replaced(
        bootstrap_servers: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    produce(bootstrap_servers, topic, readings(range(3)))
    tail = Tail(bootstrap_servers, {topic: SensorReading}, from_beginning=True, stall_check_s=1)
    transactional = Producer(client_config(bootstrap_servers,
                                           **{"transactional.id": f"tail-test-{topic}"}))
    try:
        assert read(tail, 3, 30) == [0, 1, 2]
        transactional.init_transactions(30)
        transactional.begin_transaction()
        for value in readings(range(3, 6)):
            transactional.produce(topic, value)
        assert transactional.flush(10) == 0
        # Open: read_committed sees nothing and waits (3 s of polling, not sleeping).
        assert not _delivered_within(tail, 3.0)
        transactional.abort_transaction(30)
        assert not _delivered_within(tail, 3.0)  # aborted: never delivered
        assert tail.fetch_restarts == 0
    finally:
        tail.close()


def _delivered_within(tail: Tail, seconds: float) -> bool:
    """Whether the tail delivers anything within `seconds` of polling."""
    return poll_until(lambda: tail.poll(0.2) or None, seconds, 0) is not None


def test_a_topic_that_does_not_exist_is_named_in_the_error(bootstrap_servers: str) -> None:
    missing = "no-such-topic-for-the-tail"
    with pytest.raises(RuntimeError, match=f"topic '{missing}' is not available"):
        Tail(bootstrap_servers, {missing: SensorReading}, from_beginning=True)


def test_a_tail_has_reached_the_ends_it_was_given_only_once_it_read_up_to_them(
        bootstrap_servers: str, new_topic: Callable[..., str]) -> None:
    """What `streamctl status --once` reads before it prints: everything the topics held when
    asked, not just what the first poll returned."""
    topic = new_topic()
    produce(bootstrap_servers, topic, readings(range(5)))
    tail = Tail(bootstrap_servers, {topic: SensorReading}, from_beginning=True)
    try:
        ends = tail.ends_now()
        assert ends == {(topic, 0): 5}
        assert not tail.reached(ends)
        assert read(tail, 5, 30) == [0, 1, 2, 3, 4]
        assert tail.reached(ends)
        produce(bootstrap_servers, topic, readings(range(5, 7)))
        assert tail.reached(ends) and not tail.reached(tail.ends_now())
    finally:
        tail.close()
