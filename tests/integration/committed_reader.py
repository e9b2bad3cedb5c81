"""Test-side `read_committed` reader: everything committed on a topic, read to its end."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition


def read_committed(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[Message]:
    """Every committed record of `topic`, in order per partition; fails after `timeout_s`.

    With `read_committed` a partition's end is its last stable offset, so reaching it on every
    partition means the reader saw all that is committed now, and nothing after.
    """
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True, "auto.offset.reset": "earliest"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        at_end: set[int] = set()
        messages: list[Message] = []
        deadline = time.monotonic() + timeout_s
        while len(at_end) < len(partitions):
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"{topic}: not at the end after {timeout_s} s"
            msg = consumer.poll(min(remaining, 0.5))
            if msg is None:
                continue
            error = msg.error()
            if error is None:
                messages.append(msg)
                at_end.discard(msg.partition() or 0)
            elif error.code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition() or 0)
            else:
                raise AssertionError(f"{topic}: {error}")
        return messages
    finally:
        consumer.close()
