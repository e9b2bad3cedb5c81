"""Reads the controller's own history from Kafka at start-up (a Kafka adapter, like
`kafka.clients` and `kafka.traces`).

Owns reading a topic up to the end it had when the read began: the compacted control topic
from its beginning (the last tuple per key survives compaction), the acks and the decision
log from a point in time. The consumer is assigned (no group join, never commits) and reads
`read_committed`. Garbage is handed to the caller's decode-error handler with its position.
Neighbours: `recovery` (the pure fold), `app` (calls `read_history` before the loop starts).
"""

from __future__ import annotations

import time
import uuid
from typing import TypeVar

from confluent_kafka import Consumer, TopicPartition

from controller.core.recovery import History
from controller.kafka.clients import (
    KafkaSetupError,
    client_config,
    offsets_since,
    partitions_of,
    watermarks,
)
from controller.loop.ports import OnDecodeError
from controller.settings import KafkaSettings
from schemas import Ack, ControlTuple, Decision, DecodeError, codec_for
from schemas.records import _Record

R = TypeVar("R", bound=_Record)


def read_history(settings: KafkaSettings, since_ms: int, on_decode_error: OnDecodeError,
                 timeout_s: float = 30.0) -> History:
    """Every control tuple still on the (compacted) control topic, and the acks and decisions
    stamped at or after `since_ms`."""
    return History(
        tuples=tuple(read_until_end(settings, settings.control_topic,
                                    ControlTuple, None, on_decode_error, timeout_s)),
        acks=tuple(read_until_end(settings, settings.ack_topic, Ack,
                                  since_ms, on_decode_error, timeout_s)),
        decisions=tuple(read_until_end(settings, settings.decisions_topic,
                                       Decision, since_ms, on_decode_error, timeout_s)))


def read_until_end(settings: KafkaSettings, topic: str, record_type: type[R],
                   since_ms: int | None, on_decode_error: OnDecodeError,
                   timeout_s: float) -> list[R]:
    """Records of `topic` from `since_ms` (None: the beginning) to the end it has now."""
    consumer = Consumer(client_config(settings, **{
        "group.id": f"streamctl-recovery-{uuid.uuid4()}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
    }))
    try:
        starts, ends = _positions(consumer, topic, since_ms, timeout_s)
        pending = {p: end for p, end in ends.items() if starts[p] < end}
        consumer.assign([TopicPartition(topic, p, starts[p]) for p in pending])
        return _consume(consumer, topic, record_type, pending, on_decode_error, timeout_s)
    finally:
        consumer.close()


def _positions(consumer: Consumer, topic: str, since_ms: int | None,
               timeout_s: float) -> tuple[dict[int, int], dict[int, int]]:
    ends, starts = {}, {}
    for p in partitions_of(consumer, topic, timeout_s):
        low, high = watermarks(consumer, topic, p, timeout_s)
        ends[p], starts[p] = high, low
    if since_ms is not None:  # nothing stamped since: starts at its end, nothing to read
        starts |= offsets_since(consumer, topic, since_ms, ends, timeout_s)
    return starts, ends


def _consume(consumer: Consumer, topic: str, record_type: type[R], pending: dict[int, int],
             on_decode_error: OnDecodeError, timeout_s: float) -> list[R]:
    codec = codec_for(record_type)
    out: list[R] = []
    deadline = time.monotonic() + timeout_s
    while pending:
        if time.monotonic() > deadline:
            raise KafkaSetupError(f"could not read {topic!r} to its end within {timeout_s:.0f} s "
                                  f"(partitions left: {sorted(pending)})")
        for message in consumer.consume(num_messages=500, timeout=0.5):
            if message.error() is not None:
                continue  # partition EOF, transient errors: librdkafka retries
            partition, offset = message.partition() or 0, message.offset() or 0
            # An aborted transaction's records and markers are skipped, so a partition can end
            # without a record at end - 1: its position tells when it is done.
            try:
                out.append(codec.decode(message.value(), topic=topic, partition=partition,
                                        offset=offset))
            except DecodeError as exc:
                on_decode_error(exc)
            if offset + 1 >= pending.get(partition, 0):
                pending.pop(partition, None)
        for tp in consumer.position([TopicPartition(topic, p) for p in list(pending)]):
            if tp.offset >= pending.get(tp.partition, 0) > 0:
                pending.pop(tp.partition, None)
    return out
