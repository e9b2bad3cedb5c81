"""Test-side Kafka helpers: produce records, read a topic from the start under a deadline."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from typing import TypeVar

from confluent_kafka import Consumer, Message, Producer

from schemas.codec import codec_for
from schemas.records import _Record

R = TypeVar("R", bound=_Record)


def produce(bootstrap: str, topic: str, items: Iterable[tuple[bytes | None, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for key, value in items:
        producer.produce(topic, key=key, value=value)
        producer.poll(0)
    assert producer.flush(30) == 0


def produce_records(bootstrap: str, topic: str, records: Iterable[tuple[str, _Record]]) -> None:
    produce(bootstrap, topic,
            ((key.encode(), codec_for(type(r)).encode(r)) for key, r in records))


class TopicReader:
    """Reads a topic from the beginning; `until` polls until a predicate holds or times out."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = Consumer({"bootstrap.servers": bootstrap,
                                   "group.id": f"test-{uuid.uuid4()}",
                                   "auto.offset.reset": "earliest"})
        self._consumer.subscribe([topic])
        self.messages: list[Message] = []

    def until(self, done: Callable[[list[Message]], bool], timeout_s: float) -> list[Message]:
        deadline = time.monotonic() + timeout_s
        while not done(self.messages):
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"timed out after {timeout_s} s with {len(self.messages)} msgs"
            msg = self._consumer.poll(min(remaining, 0.5))
            if msg is not None and msg.error() is None:
                self.messages.append(msg)
        return self.messages

    def poll(self, timeout_s: float) -> None:
        """Read at most one more message (waiting up to `timeout_s`)."""
        msg = self._consumer.poll(timeout_s)
        if msg is not None and msg.error() is None:
            self.messages.append(msg)

    def records(self, record_type: type[R]) -> list[R]:
        codec = codec_for(record_type)
        return [codec.decode(m.value()) for m in self.messages]

    def close(self) -> None:
        self._consumer.close()
