"""Reads a time range of the metrics topic for `controller record` and `controller replay`
(a Kafka adapter: with `clients` and `history`, the only controller modules that import
confluent_kafka).

Owns positioning by time: every partition starts at the first offset whose timestamp is at
or after `from_ms`, or at its end where nothing is stamped so late yet (`clients.offsets_at`),
and is finished at the first record stamped well after `to_ms` or, once the wall clock is past
`to_ms`, at the partition's end. So the same call
copies last night's range or records the next five minutes live. The consumer is assigned
(no group join, never commits). Bad payloads are handed to the caller with their position,
never raised. Neighbours: `trace` (the entry type), `replay` and `cli` (the callers).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from controller.kafka.clients import KafkaSetupError, offsets_at
from controller.replay.trace import BadRecord, TraceEntry
from schemas import DecodeError, TaskMetrics, codec_for
from streamctl.security.kafka import PLAINTEXT, KafkaSecurity, client_config

_GRACE_MS = 2_000
"""After `to_ms` on the wall clock, how long records stamped before it may still arrive
(a producer's linger and retries)."""

_DISORDER_MS = 30_000
"""How far timestamps may run out of order within a partition (several producers, retries):
a record stamped after `to_ms` is skipped, and only one stamped later than `to_ms` by more
than this ends the partition."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def read_metrics(bootstrap_servers: str, topic: str, from_ms: int, to_ms: int,
                 on_bad: Callable[[BadRecord], None], *, timeout_s: float = 60.0,
                 security: KafkaSecurity = PLAINTEXT) -> Iterator[TraceEntry]:
    """Metrics records of `topic` stamped in [from_ms, to_ms], partition by partition in
    offset order. Waits for the wall clock to pass `to_ms` (live recording); gives up
    `timeout_s` after that with what it has."""
    consumer = Consumer(client_config(bootstrap_servers, security, **{
        "group.id": f"streamctl-trace-{uuid.uuid4()}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "log_level": 3,
    }))
    try:
        starts = _start_offsets(consumer, topic, from_ms)
        consumer.assign(starts)
        yield from _consume(consumer, topic, {tp.partition for tp in starts}, from_ms, to_ms,
                            on_bad, deadline_ms=max(to_ms, _now_ms()) + int(timeout_s * 1000))
    finally:
        consumer.close()


def _start_offsets(consumer: Consumer, topic: str, from_ms: int) -> list[TopicPartition]:
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
    except KafkaException as exc:
        raise KafkaSetupError(f"cannot reach Kafka to look up topic {topic!r}: {exc}") from exc
    if metadata is None or metadata.error is not None or not metadata.partitions:
        raise KafkaSetupError(f"topic {topic!r} does not exist")
    return offsets_at(consumer, [TopicPartition(topic, p) for p in sorted(metadata.partitions)],
                      from_ms, timeout_s=10)


def _consume(consumer: Consumer, topic: str, open_partitions: set[int], from_ms: int,
             to_ms: int, on_bad: Callable[[BadRecord], None], *,
             deadline_ms: int) -> Iterator[TraceEntry]:
    codec = codec_for(TaskMetrics)
    at_end: set[int] = set()
    while open_partitions and _now_ms() < deadline_ms:
        if _now_ms() > to_ms + _GRACE_MS and open_partitions <= at_end:
            return
        for message in consumer.consume(num_messages=500, timeout=0.5):
            partition = message.partition() or 0
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(partition)
                continue
            at_end.discard(partition)
            if partition not in open_partitions:
                continue
            stamp = message.timestamp()[1]
            if stamp < from_ms:
                continue  # stamped out of order, before the range, after its first record
            if stamp > to_ms:
                if stamp > to_ms + _DISORDER_MS:
                    open_partitions.discard(partition)
                continue
            offset = message.offset() or 0
            try:
                metrics = codec.decode(message.value(), topic=topic, partition=partition,
                                       offset=offset)
            except DecodeError as exc:
                on_bad(BadRecord(f"{topic}[{partition}]@{offset}", exc.reason))
                continue
            yield TraceEntry(stamp, metrics, partition, offset)
