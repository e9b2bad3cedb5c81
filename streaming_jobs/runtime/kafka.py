"""Thin typed adapters over confluent-kafka: the only runtime module that imports it.

Owns producer/consumer settings: the idempotent record publisher (metrics, acks), the per-worker
dead-letter producer used inside Spark tasks, and the control-topic consumer that starts at the
end of the topic. Every client gets the job's Kafka security (`streamctl.security.kafka`) through
`client_config`. Neighbours: `control` (consumes), `lifecycle` (publishes), the job's plan
(dead letters).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from schemas.codec import DecodeError, codec_for
from schemas.records import _Record
from streamctl.fetch_guard import STALL_CHECK_S, FetchGuard
from streamctl.security.kafka import IDEMPOTENT, PLAINTEXT, KafkaSecurity, client_config
from streaming_jobs.errors import TemporaryError
from streaming_jobs.runtime.sink.dead_letter import framed, limit_problems
from streaming_jobs.runtime.sink.transactional import DEFAULT_MAX_RECORD_BYTES
from streaming_jobs.runtime.sink.transactional_kafka import Fault, record_fault, topic_limits

log = logging.getLogger(__name__)

ASSIGN_PIN_TIMEOUT_S = 10.0
"""How long a poll keeps asking for its new partitions' end offsets to start them there; the
polls after it go on asking."""
ASSIGN_RETRY_S = 0.5
"""Pause between two such asks, and between two looks for a topic not found yet."""
PARTITIONS_LOOKUP_S = 10.0
"""How often a consumer holding its topic looks for partitions added to it."""
LOG_RANGE_TIMEOUT_S = 30.0
"""How long a topic's log start and end offsets are asked for: a broker killed while it led
a partition is fenced by the quorum within its session timeout (9 s by default), and the
partition's new leader answers after that."""
LEADER_AWAY = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._DESTROY_BROKER,
    KafkaError._ALL_BROKERS_DOWN})
"""What an offsets request answers while a partition's leader is away or being elected
(librdkafka flags none of them retriable on this call)."""
R = TypeVar("R", bound=_Record)


class PublishError(TemporaryError):
    """A record could not be handed to Kafka; the message names topic and key."""


class RecordPublisher:
    """Idempotent, acks=all producer of Avro single-object encoded records."""

    def __init__(self, bootstrap_servers: str, client_id: str, security: KafkaSecurity) -> None:
        self._producer = Producer(client_config(
            bootstrap_servers, security, **IDEMPOTENT, **{
                "client.id": client_id, "linger.ms": 5,
                # A key's partition is CRC-32 % partitions, the hash by which the controller
                # shards the queries: a controller instance reads only the metrics partitions
                # of the shards it leads (controller.core.shards.read_partitions).
                "partitioner": "consistent_random"}))

    def publish(self, topic: str, key: str, record: _Record) -> None:
        value = codec_for(type(record)).encode(record)
        try:
            self._producer.produce(topic, key=key.encode(), value=value, on_delivery=_log_failure)
        except (KafkaException, BufferError) as exc:
            raise PublishError(f"cannot publish to {topic} (key {key}): {exc}") from exc
        self._producer.poll(0)  # serve delivery callbacks without blocking the caller

    def flush(self, timeout_s: float = 10.0) -> int:
        """Messages still undelivered after the timeout."""
        return int(self._producer.flush(timeout_s))

    def close(self, timeout_s: float = 10.0) -> int:
        """Flush, then release the client; returns the messages left undelivered."""
        undelivered = self.flush(timeout_s)
        self._producer.close()
        return undelivered


def _log_failure(err: KafkaError | None, msg: object) -> None:
    if err is not None:
        log.error("delivery failed: %s", err)


class DeadLettersUndelivered(PublishError):
    """Dead letters Kafka did not take (it was away): the task fails and its batch runs again,
    rather than a dead letter being lost."""


class KafkaDeadLetterSink:
    """Sends undecodable input records to the dead-letter topic, with their origin, size and
    the reason in words in headers (and the query that could not read them); a record larger
    than a dead letter may be keeps as much of itself as fits (`dead_letter.framed`)."""

    def __init__(self, producer: Producer, topic: str, query_id: str = "",
                 max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES) -> None:
        self._producer, self._topic, self._query_id = producer, topic, query_id
        self._max_record_bytes = max_record_bytes
        self._sent: list[tuple[bytes | None, DecodeError]] = []
        self._failed: list[tuple[int, KafkaError]] = []

    def send(self, payload: bytes | None, error: DecodeError) -> None:
        self._sent.append((payload, error))
        self._produce(len(self._sent) - 1, payload)

    def _produce(self, index: int, payload: bytes | None, note: str = "") -> None:
        _, error = self._sent[index]
        headers = [("source_topic", str(error.topic)), ("source_partition", str(error.partition)),
                   ("source_offset", str(error.offset)), ("error", error.reason + note),
                   ("query_id", self._query_id)]
        letter = framed(None, payload, headers, self._max_record_bytes)

        def delivered(err: KafkaError | None, _msg: object) -> None:
            if err is not None:
                self._failed.append((index, err))
        try:
            self._producer.produce(self._topic, value=letter.value,
                                   headers=list[tuple[str, str | bytes | None]](letter.headers),
                                   on_delivery=delivered)
        except KafkaException as exc:  # the client's own check, before any broker
            self._failed.append((index, exc.args[0]))
        self._producer.poll(0)

    def flush(self) -> None:
        """Every dead letter delivered: one the broker refuses for what it is goes again with
        its origin and reason only; `DeadLettersUndelivered` when Kafka did not take them."""
        remaining = self._producer.flush(30.0)
        refused, self._failed = self._failed, []
        for index, err in refused:
            if record_fault(err) is Fault.REJECTED:
                self._produce(index, None, f"; its payload was refused too ({err.str()})")
        remaining += self._producer.flush(30.0)
        lost = [err for _, err in self._failed] + [
            err for _, err in refused if record_fault(err) is not Fault.REJECTED]
        self._sent, self._failed = [], []
        if remaining or lost:  # failing the task makes Spark retry it: no dead letter is lost
            raise DeadLettersUndelivered(
                f"{remaining + len(lost)} dead letters undelivered to {self._topic}"
                + (f" ({lost[0].str()})" if lost else ""))


_worker_producers: dict[tuple[str, KafkaSecurity, int], Producer] = {}
_worker_lock = threading.Lock()


@dataclass(frozen=True)
class DeadLetterFactory:
    """Picklable recipe shipped to Spark tasks; one producer per Python worker process and
    broker. The security setting (with its password) travels with the task: on a cluster,
    protect Spark's RPC (`spark.network.crypto.enabled`)."""

    bootstrap_servers: str
    topic: str
    security: KafkaSecurity = PLAINTEXT
    query_id: str = ""
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES

    def __call__(self) -> KafkaDeadLetterSink:
        where = (self.bootstrap_servers, self.security, self.max_record_bytes)
        with _worker_lock:
            producer = _worker_producers.get(where)
            if producer is None:
                producer = Producer(client_config(
                    self.bootstrap_servers, self.security, **IDEMPOTENT,
                    **{"message.max.bytes": self.max_record_bytes}))
                _worker_producers[where] = producer
        return KafkaDeadLetterSink(producer, self.topic, self.query_id, self.max_record_bytes)


class TypedConsumer(Generic[R]):
    """Reads one record type from every partition of a topic, from the end each partition had
    when this consumer first found it, and on from there for as long as it runs.

    It assigns the partitions itself instead of joining its group: every instance reads every
    partition, so a group has nothing to share out, and its protocol only delayed a restarted
    instance (the killed process's member kept the partition until its session ended, 45 s by
    default, and a promotion sent meanwhile was skipped). The group id is only the client's
    name to the broker: nothing is committed. A broker restart or a long pause resumes where it
    was; partitions added to the topic later are read from their start. A client stuck after
    a broker restart (confluentinc/librdkafka#5153) is replaced by a new one where it was
    (`streamctl.fetch_guard`).

    Undecodable messages come back as `DecodeError` (with topic/partition/offset), never raise.
    """

    def __init__(self, bootstrap_servers: str, topic: str, group_id: str,
                 record_type: type[R], security: KafkaSecurity,
                 on_assignment: Callable[[bool], None] = lambda held: None, *,
                 stall_check_s: float = STALL_CHECK_S) -> None:
        """`on_assignment(held)`: once this consumer holds every partition the topic had when
        it first found it, each started at its end (`True`; `assigned` is set then)."""
        self._codec = codec_for(record_type)
        self._topic = topic
        self._on_assignment = on_assignment
        config = client_config(
            bootstrap_servers, security, **{"group.id": group_id, "enable.auto.commit": False,
                                            # Only where a position is lost (the topic made
                                            # anew): what is there was sent after it.
                                            "auto.offset.reset": "earliest"})
        self.assigned = threading.Event()
        """Set once this consumer holds the topic's partitions."""
        self._read: dict[int, int] = {}
        """Per partition held, where reading goes on: where it was assigned, then after the
        last record delivered."""
        self._guard = FetchGuard(lambda: Consumer(config), "control",
                                 lambda: {(topic, p): after for p, after in self._read.items()},
                                 stall_check_s=stall_check_s)
        self._look_again_at = 0.0
        self._problem = ""
        """Why the topic could not be looked up last time ("" when it could)."""

    def _assign_new(self) -> None:
        """Look the topic's partitions up (every `ASSIGN_RETRY_S` until it holds them, every
        `PARTITIONS_LOOKUP_S` after) and assign those it does not hold: at their end while it
        has not found the topic yet, from their start once it has (a partition added since).
        Never raises: the thread that polls must go on (what failed is asked again)."""
        if time.monotonic() < self._look_again_at:
            return
        held = self.assigned.is_set()
        self._look_again_at = time.monotonic() + (PARTITIONS_LOOKUP_S if held else ASSIGN_RETRY_S)
        new = sorted(set(self._partitions()) - self._read.keys())
        deadline = time.monotonic() + ASSIGN_PIN_TIMEOUT_S
        offsets = {p: OFFSET_BEGINNING if held else self._end(p, deadline) for p in new}
        starts = [TopicPartition(self._topic, p, offset)
                  for p, offset in offsets.items() if offset is not None]
        if not starts:
            return
        try:
            self._guard.consumer.incremental_assign(starts)
        except (KafkaException, RuntimeError) as exc:  # RuntimeError: consumer closed
            log.warning("control consumer: cannot assign %s yet (%s)", self._topic, exc)
            return
        self._read.update((tp.partition, tp.offset) for tp in starts)
        if not held and len(starts) == len(new):
            self.assigned.set()
            self._on_assignment(True)

    def _partitions(self) -> list[int]:
        """The topic's partitions; none while it cannot be looked up (said once a change)."""
        try:
            metadata = self._guard.consumer.list_topics(self._topic, timeout=ASSIGN_RETRY_S * 4)
            found = metadata.topics.get(self._topic)
            problem = ("not found" if found is None else
                       str(found.error) if found.error is not None else "")
        except (KafkaException, RuntimeError) as exc:
            found, problem = None, str(exc)
        if problem != self._problem:
            self._problem = problem
            if problem:
                log.warning("control consumer: topic %s cannot be read yet (%s)", self._topic,
                            problem)
        return [] if problem or found is None else list(found.partitions)

    def _end(self, partition: int, deadline: float) -> int | None:
        return _end_offset(self._guard.consumer, TopicPartition(self._topic, partition),
                           deadline)

    def poll(self, timeout_s: float) -> R | DecodeError | None:
        self._assign_new()
        msg = self._guard.consumer.poll(timeout_s)
        error = None if msg is None else msg.error()
        if error is not None and error.code() != KafkaError._PARTITION_EOF:
            log.warning("control consumer: %s", error)
        record = msg if error is None else None
        if record is not None:
            self._read[record.partition() or 0] = (record.offset() or 0) + 1
        delivered = [] if record is None else [(self._topic, record.partition() or 0)]
        # After a replacement, what the old consumer passed counts as read (`FetchGuard.mind`).
        self._read.update((tp.partition, tp.offset)
                          for tp in self._guard.mind(delivered, drained=msg is None))
        if record is None:
            return None
        return self._decode(record.value(), record.topic(), record.partition(), record.offset())

    @property
    def fetch_restarts(self) -> int:
        """How many times a stalled consumer was replaced (`FetchGuard`)."""
        return self._guard.fetch_restarts

    def topic_exists(self, topic: str, timeout_s: float = 5.0) -> bool:
        """Whether the broker knows `topic` (with partitions); False when unreachable too."""
        try:
            metadata = self._guard.consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        except KafkaException as exc:
            log.warning("cannot look up topic %s: %s", topic, exc)
            return False
        return metadata is not None and metadata.error is None and bool(metadata.partitions)

    def _decode(self, value: bytes | None, topic: str | None, partition: int | None,
                offset: int | None) -> R | DecodeError:
        try:
            return self._codec.decode(value, topic=topic, partition=partition, offset=offset)
        except DecodeError as err:
            return err

    def close(self) -> None:
        self._guard.close()


def _end_offset(consumer: Consumer, tp: TopicPartition, deadline: float) -> int | None:
    """`tp`'s end offset, asked again until the `time.monotonic()` `deadline` while the broker
    cannot say it (a partition whose leader is still being elected, a broker coming back);
    at least once. None when it never did."""
    while True:
        remaining = deadline - time.monotonic()
        try:
            found = consumer.get_watermark_offsets(tp, timeout=min(5.0, max(1.0, remaining)))
            problem: object = "no answer"
        except (KafkaException, RuntimeError) as exc:  # RuntimeError: consumer closed
            found, problem = None, exc
        if found is not None:
            return int(found[1])
        if time.monotonic() + ASSIGN_RETRY_S >= deadline:
            log.info("control consumer: end offset of %s[%d] not known yet (%s)",
                     tp.topic, tp.partition, problem)
            return None
        time.sleep(ASSIGN_RETRY_S)


class KafkaLogRanges:
    """Log start and end offsets of topics, from a consumer that never subscribes."""

    def __init__(self, bootstrap_servers: str, security: KafkaSecurity) -> None:
        self._consumer = Consumer(client_config(bootstrap_servers, security, **{
            "group.id": "streamctl-offsets-unused", "enable.auto.commit": False}))
        self._lock = threading.Lock()  # the control thread and the run loop both ask

    def log_range(self, topic: str,
                  timeout_s: float = LOG_RANGE_TIMEOUT_S) -> dict[int, tuple[int, int]]:
        """Partition → (log start, log end); `LookupError` when the topic does not exist or
        a partition's offsets were not told within `timeout_s`."""
        with self._lock:
            try:
                return _log_range(self._consumer, topic, timeout_s)
            except KafkaException as exc:
                raise LookupError(f"cannot read the offsets of {topic!r}: {exc}") from exc

    def close(self) -> None:
        self._consumer.close()


def read_latest(bootstrap_servers: str, topic: str, key: str, record_type: type[R],
                timeout_s: float = 10.0, security: KafkaSecurity = PLAINTEXT) -> R | None:
    """The newest record under `key` in `topic` (read from the start to its current end).

    On a compacted topic that is the key's last value. Undecodable records are skipped with a
    warning naming their position. Raises `LookupError` when the topic is
    missing, `TimeoutError` when the end is not reached in time.
    """
    # Assigned, never commits: the group id is required by librdkafka but never joined.
    consumer = Consumer(client_config(bootstrap_servers, security,
                                      **{"group.id": "unused", "enable.auto.commit": False}))
    try:
        ends = _end_offsets(consumer, topic, timeout_s)
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        return _scan(consumer, ends, key.encode(), codec_for(record_type), timeout_s)
    finally:
        consumer.close()


def _log_range(consumer: Consumer, topic: str,
               timeout_s: float) -> dict[int, tuple[int, int]]:
    """Partition → (log start, log end), asked of the broker now; `LookupError` when the
    topic does not exist."""
    metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if metadata is None or metadata.error is not None or not metadata.partitions:
        raise LookupError(f"topic {topic!r} does not exist")
    deadline = time.monotonic() + timeout_s
    return {p: _watermarks(consumer, TopicPartition(topic, p), deadline)
            for p in metadata.partitions}


def _watermarks(consumer: Consumer, tp: TopicPartition, deadline: float) -> tuple[int, int]:
    """(log start, end) of `tp`, asked again until the `time.monotonic()` `deadline` while its
    leader is away (a broker killed while it led `tp`: the request to it is dropped, and the
    leadership moves once the quorum fences it); other errors at once."""
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                tp, timeout=max(0.1, deadline - time.monotonic()))
            return int(low), int(high)
        except KafkaException as exc:
            error = exc.args[0]
            away = error.code() in LEADER_AWAY or error.retriable()
            if not away or time.monotonic() + ASSIGN_RETRY_S >= deadline:
                raise
            log.info("offsets of %s[%d] not told yet (%s); asking again", tp.topic,
                     tp.partition, error.str())
            time.sleep(ASSIGN_RETRY_S)


def _end_offsets(consumer: Consumer, topic: str, timeout_s: float) -> dict[int, int]:
    return {p: high for p, (_low, high) in _log_range(consumer, topic, timeout_s).items()}


def _scan(consumer: Consumer, ends: dict[int, int], key: bytes, codec: Any,
          timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    positions = {p: 0 for p in ends}
    latest = None
    while any(positions[p] < ends[p] for p in ends):
        if time.monotonic() > deadline:
            raise TimeoutError(f"could not read to the end of the topic in {timeout_s:.0f} s")
        msg = consumer.poll(0.5)
        if msg is None or msg.error() is not None:
            continue
        partition, offset = msg.partition() or 0, msg.offset() or 0
        positions[partition] = offset + 1
        if msg.key() == key:
            try:
                latest = codec.decode(msg.value(), topic=msg.topic(), partition=partition,
                                      offset=offset)
            except DecodeError as err:
                log.warning("skipping an undecodable record: %s", err)
    return latest


def written_topic_problems(bootstrap_servers: str, security: KafkaSecurity,
                           max_record_bytes: int, written: Sequence[tuple[str, str]],
                           timeout_s: float = 30.0) -> list[str]:
    """What stops the job from writing its topics, asked of the broker before Spark starts:
    (what, topic) pairs, e.g. ("output topic", "scores"), that do not exist or take smaller
    records than `max_record_bytes`."""
    topics = [topic for _what, topic in written]
    try:
        limits = topic_limits(client_config(bootstrap_servers, security), topics, timeout_s)
    except LookupError as exc:
        what = next((w for w, t in written if repr(t) in str(exc)), "topic")
        return [f"the {what} {exc.args[0].removeprefix('topic ')}: create it (`streamctl "
                "stack topics --job <job>` creates a job's topics) or name another"]
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise PublishError(f"cannot read the configuration of {', '.join(topics)} at "
                               f"{bootstrap_servers}: {exc.args[0]}") from exc
        log.warning("the job may not read the configuration of %s (grant its principal "
                    "DESCRIBE_CONFIGS on them): its record limit is not checked against "
                    "theirs; a row over a topic's limit fails its batch instead of becoming "
                    "a dead letter", ", ".join(topics))
        return []
    return limit_problems(max_record_bytes, [(what, topic, limits[topic])
                                             for what, topic in written])
