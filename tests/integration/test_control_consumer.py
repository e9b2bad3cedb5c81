"""The job's control consumer on the real broker: it takes its topic's partitions itself, so a
restarted instance reads at once even while its killed predecessor's group member still holds
the partition, from the topic's end; a partition added later is read from its start; a consumer
whose fetch stalled is replaced by one at the position reached."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from prometheus_client import CollectorRegistry

from schemas import SensorReading, codec_for
from streamctl.security.kafka import PLAINTEXT, client_config
from streaming_jobs.runtime.kafka import TypedConsumer
from streaming_jobs.runtime.observe.prometheus import JobPrometheus
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


def test_while_its_group_holds_the_partition_it_reads_at_once_from_the_end(
        bootstrap_servers: str, new_topic: Callable[..., str]) -> None:
    """A group member left over from a killed process (its session not over yet) holds the
    partition; the restarted instance's consumer, in the same group, reads anyway."""
    topic = new_topic()
    group = f"group-{topic}"
    produce(bootstrap_servers, topic, [record(0)])  # before the consumer: not for it
    left_over = Consumer(client_config(bootstrap_servers, **{
        "group.id": group, "enable.auto.commit": False}))
    took: list[bool] = []
    left_over.subscribe([topic], on_assign=lambda _c, parts: took.append(bool(parts)))
    held: list[bool] = []
    consumer: TypedConsumer[SensorReading] | None = None
    try:
        until(lambda: (left_over.poll(0.2), any(took))[1], 60, "the left-over member's partition")
        consumer = TypedConsumer(bootstrap_servers, topic, group, SensorReading, PLAINTEXT,
                                 on_assignment=held.append)
        started = consumer
        until(lambda: (started.poll(0.2), started.assigned.is_set())[1], 30,
              "the restarted consumer holding the topic")
        assert held == [True]
        produce(bootstrap_servers, topic, [record(1)])
        assert next_seq(consumer) == 1
        left_over.poll(0.2)
        assert took == [True]  # the left-over member kept its partition all along
    finally:
        left_over.close()
        if consumer is not None:
            consumer.close()


def test_a_partition_added_to_the_topic_is_read_from_its_start(
        bootstrap_servers: str, new_topic: Callable[..., str]) -> None:
    topic = new_topic()
    consumer = TypedConsumer(bootstrap_servers, topic, f"group-{topic}", SensorReading,
                             PLAINTEXT)
    try:
        until(lambda: (consumer.poll(0.2), consumer.assigned.is_set())[1], 30, "the topic held")
        admin = AdminClient(client_config(bootstrap_servers))
        admin.create_partitions([NewPartitions(topic, 2)])[topic].result(30)
        # Sent before the consumer looks for new partitions: read all the same.
        produce(bootstrap_servers, topic, [record(7)], partition=1)
        assert next_seq(consumer) == 7
    finally:
        consumer.close()


def test_a_stalled_fetch_is_replaced_and_goes_on_where_it_stopped(
        bootstrap_servers: str, new_topic: Callable[..., str]) -> None:
    """Records wait that the consumer does not fetch: a new consumer at the position reached
    reads them next, in order (none skipped, none read again), and the replacement is
    counted, on the job's Prometheus counter too."""
    topic = new_topic()
    consumer = TypedConsumer(bootstrap_servers, topic, f"group-{topic}", SensorReading,
                             PLAINTEXT, stall_check_s=1)
    try:
        until(lambda: (consumer.poll(0.2), consumer.assigned.is_set())[1], 30, "the topic held")
        produce(bootstrap_servers, topic, [record(seq) for seq in (1, 2, 3)])
        assert [next_seq(consumer) for _ in range(3)] == [1, 2, 3]
        # A paused partition fetches nothing: the symptom of librdkafka#5153, made on purpose.
        consumer._guard.consumer.pause([TopicPartition(topic, 0)])
        produce(bootstrap_servers, topic, [record(seq) for seq in (4, 5, 6)])
        assert [next_seq(consumer) for _ in range(3)] == [4, 5, 6]
        assert consumer.fetch_restarts >= 1  # another if the new one is slow to deliver
        prometheus = JobPrometheus(CollectorRegistry())
        prometheus.watch_control_consumer("q", lambda: consumer.fetch_restarts)
        assert prometheus.registry.get_sample_value(
            "streamctl_job_control_fetch_restarts_total", {"query": "q"}) == \
            consumer.fetch_restarts
    finally:
        consumer.close()
