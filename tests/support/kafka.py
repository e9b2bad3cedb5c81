"""Kafka from a test's side: produce bytes or records, follow a topic from its start, and read
what a `read_committed` consumer sees, to the topic's end."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from schemas.codec import codec_for
from schemas.errors import DecodeError
from schemas.records import _Record
from streamctl.security.kafka import IDEMPOTENT, client_config
from tests.support.waiting import until

R = TypeVar("R", bound=_Record)


Value = bytes | None
Item = Value | tuple[Value, Value] | tuple[Value, Value, int]
"""A record to produce: its value, a `(key, value)` pair, or `(key, value, timestamp_ms)`."""


NewTopics = Callable[..., dict[str, str]]
"""`new_topics(name=partitions, …, config={name: {…}})` → {name: a fresh uuid-named topic}."""


def job_topics(new_topics: NewTopics, input_partitions: int = 2, output_partitions: int = 1,
               state: bool = False) -> dict[str, str]:
    """A job's topics as its config's fields (`input_topic`, … `ack_topic`, and a compacted
    `state_topic` if asked for), made in one call."""
    made = new_topics(config={"state": {"cleanup.policy": "compact"}}, input=input_partitions,
                      output=output_partitions, dlq=1, metrics=1, control=1, ack=1,
                      **({"state": 1} if state else {}))
    return {f"{role}_topic": topic for role, topic in made.items()}



def produce(bootstrap: str, topic: str, items: Iterable[Item], partition: int | None = None,
            timestamp_ms: int = 0, max_bytes: int = 1_000_000) -> None:
    """Each item, acknowledged by the broker before this returns; stamped with its own
    timestamp, else `timestamp_ms`, else now. `max_bytes`: the largest record the producer
    sends (its message.max.bytes; the topic must take it too)."""
    producer = Producer(client_config(bootstrap, **IDEMPOTENT,
                                      **{"message.max.bytes": max_bytes}))
    where = {} if partition is None else {"partition": partition}
    for item in items:
        key, value, stamp = _parts(item, timestamp_ms)
        producer.produce(topic, key=key, value=value, timestamp=stamp, **where)
        producer.poll(0)
    assert producer.flush(30) == 0, f"records to {topic} were not acknowledged"


def _parts(item: Item, timestamp_ms: int) -> tuple[Value, Value, int]:
    if not isinstance(item, tuple):
        return None, item, timestamp_ms
    if len(item) == 2:
        return item[0], item[1], timestamp_ms
    return item  # type: ignore[return-value]


def produce_records(bootstrap: str, topic: str, records: Iterable[tuple[str, _Record]],
                    timestamp_ms: int = 0) -> None:
    """`(key, record)` pairs, each single-object encoded with its type's codec."""
    produce(bootstrap, topic,
            ((key.encode(), codec_for(type(r)).encode(r)) for key, r in records),
            timestamp_ms=timestamp_ms)


def read_committed(bootstrap: str, topics: str | Sequence[str],
                   timeout_s: float = 30.0) -> list[Message]:
    """Every committed record of `topics` (one or several), in order per partition, read to
    the end they have now.

    With `read_committed` a partition's end is its last stable offset, so reaching it on every
    partition means the reader saw all that is committed now, and nothing after."""
    names = [topics] if isinstance(topics, str) else list(topics)
    consumer = Consumer(client_config(bootstrap, **{
        "group.id": f"test-{uuid.uuid4()}", "isolation.level": "read_committed",
        "enable.auto.commit": False, "enable.partition.eof": True,
        "auto.offset.reset": "earliest"}))
    try:
        metadata = consumer.list_topics(timeout=10).topics
        partitions = {(t, p) for t in names for p in metadata[t].partitions}
        consumer.assign([TopicPartition(t, p, 0) for t, p in sorted(partitions)])
        at_end: set[tuple[str, int]] = set()
        messages: list[Message] = []

        def read_to_the_end() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None:
                error, where = msg.error(), (msg.topic() or "", msg.partition() or 0)
                if error is None:
                    messages.append(msg)
                    at_end.discard(where)
                elif error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(where)
                else:
                    raise AssertionError(f"{names}: {error}")
            return at_end == partitions

        until(read_to_the_end, timeout_s, f"the end of every partition of {names}", 0)
        return messages
    finally:
        consumer.close()


def read_committed_once_there(bootstrap: str, topics: str | Sequence[str], count: int,
                              timeout_s: float,
                              alive: Callable[[], object] = lambda: True) -> list[Message]:
    """Every committed record of `topics`, to their end, once there are at least `count` of
    them; `alive` may assert that the process writing them still runs."""
    def enough() -> list[Message] | None:
        alive()
        messages = read_committed(bootstrap, topics)
        return messages if len(messages) >= count else None

    return until(enough, timeout_s, f"{count} committed records in {topics}", interval_s=0.5)


def decoded(messages: Iterable[Message], record_type: type[R]) -> list[R]:
    codec = codec_for(record_type)
    return [codec.decode(m.value()) for m in messages]


def decoded_or_none(messages: Iterable[Message], record_type: type[R]) -> list[R | None]:
    """Each message decoded, or None where it is not a record of `record_type` (garbage)."""
    codec = codec_for(record_type)
    out: list[R | None] = []
    for m in messages:
        try:
            out.append(codec.decode(m.value()))
        except DecodeError:
            out.append(None)
    return out


class TopicReader:
    """Follows a topic from the beginning; `until` reads until a predicate over everything
    read so far holds."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = Consumer(client_config(bootstrap, **{
            "group.id": f"test-{uuid.uuid4()}", "auto.offset.reset": "earliest"}))
        self._consumer.subscribe([topic])
        self.messages: list[Message] = []

    def until(self, done: Callable[[list[Message]], bool], timeout_s: float) -> list[Message]:
        def read() -> bool:
            self.poll(0.5)
            return done(self.messages)

        until(read, timeout_s, f"the records awaited ({len(self.messages)} read)", 0)
        return self.messages

    def poll(self, timeout_s: float) -> None:
        """Read at most one more message (waiting up to `timeout_s`)."""
        msg = self._consumer.poll(timeout_s)
        if msg is not None and msg.error() is None:
            self.messages.append(msg)

    def records(self, record_type: type[R]) -> list[R]:
        return decoded(self.messages, record_type)

    def close(self) -> None:
        self._consumer.close()


class SteadyLoad:
    """Records `make(seq)` for seq 0, 1, 2, …, `per_tick` of them every `every_s` until
    stopped, each tick acknowledged before the next; `move_to` moves the producer to another
    topic between ticks (every record sent so far is acknowledged by then). `acked` holds the
    acknowledged records in order, `failed` counts the refused ones."""

    def __init__(self, bootstrap: str, topic: str, make: Callable[[int], tuple[str, _Record]],
                 per_tick: int = 20, every_s: float = 0.1) -> None:
        self._producer = Producer(client_config(bootstrap, **IDEMPOTENT))
        self._topic, self._make, self._per_tick, self._every_s = topic, make, per_tick, every_s
        self._stop = threading.Event()
        self._tick = threading.Lock()
        self.acked: list[_Record] = []
        self.failed = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        seq = 0
        while not self._stop.wait(self._every_s):
            with self._tick:
                made = [self._make(n) for n in range(seq, seq + self._per_tick)]
                seq += self._per_tick
                for key, record in made:
                    self._producer.produce(self._topic, key=key.encode(),
                                           value=codec_for(type(record)).encode(record),
                                           on_delivery=self._delivered(record))
                self._producer.flush(30)

    def _delivered(self, record: _Record) -> Callable[[KafkaError | None, Message], None]:
        def callback(err: KafkaError | None, _msg: Message) -> None:
            if err is None:
                self.acked.append(record)
            else:
                self.failed += 1
        return callback

    def move_to(self, topic: str) -> None:
        with self._tick:
            self._topic = topic

    def stop(self) -> list[_Record]:
        """Stop after the tick under way; every record acknowledged."""
        self._stop.set()
        self._thread.join(60)
        return self.acked


def set_topic_config(bootstrap: str, topic: str, **settings: str) -> None:
    """Change a topic's configuration, e.g. `**{"max.message.bytes": "3000000"}`, and return once
    a broker describes it so. The controller acknowledges the change when it has committed it,
    before the brokers have replayed it: a record produced at once was still judged by the old
    limit (CI, 6 December)."""
    admin = AdminClient(client_config(bootstrap))
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in settings.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)

    def applied() -> bool:
        described = topic_config(bootstrap, topic)
        return all(described.get(name) == value for name, value in settings.items())

    until(applied, 30, f"a broker to describe {topic} with {settings}")


def topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    """A topic's configuration, name → value. The client asks whichever broker it likes, and one
    whose metadata cache has not yet caught up with a new topic answers that it does not know
    it (CI, 2 December): asked again until one knows it."""
    admin = AdminClient(client_config(bootstrap))  # alive until the answer is in
    resource = ConfigResource(ResourceType.TOPIC, topic)

    def described() -> dict[str, str] | None:
        try:
            configs = admin.describe_configs([resource])[resource].result(timeout=10)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
            return None
        return {name: str(entry.value) for name, entry in configs.items()}

    return until(described, 30, f"the configuration of {topic} from a broker that knows it")


def await_transaction_coordinator(bootstrap: str, timeout_s: float = 90.0) -> None:
    """Return once the broker's transaction coordinator answers. A broker just started loads
    its transaction log first and answers "coordinator load in progress" meanwhile: on a busy
    machine longer than a sink's retry budget (CI, 7 December)."""
    producer = Producer(client_config(bootstrap, **{
        "transactional.id": f"coordinator-ready-{uuid.uuid4().hex[:8]}"}))

    def ready() -> bool:
        try:
            producer.init_transactions(10)
        except KafkaException as exc:
            if not exc.args[0].retriable():
                raise
            return False
        return True

    until(ready, timeout_s, f"the transaction coordinator of {bootstrap}", interval_s=0.5)


def delete_records_before(bootstrap: str, topic: str, offsets: dict[int, int]) -> None:
    """What retention does: the log of each partition of `topic` starts at its offset now."""
    admin = AdminClient(client_config(bootstrap))
    futures = admin.delete_records([TopicPartition(topic, p, o) for p, o in offsets.items()],
                                   request_timeout=30)
    for future in futures.values():
        future.result(30)


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Each partition's end offset (high watermark) of `topic`, now."""
    return {p: end for p, (_start, end) in watermarks(bootstrap, topic).items()}


def watermarks(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """Each partition's (log start, end offset) of `topic`, now."""
    consumer = Consumer(client_config(bootstrap, **{"group.id": "unused"}))
    try:
        partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
        found = {}
        for p in partitions:
            start, end = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            found[p] = (int(start), int(end))
        return found
    finally:
        consumer.close()
