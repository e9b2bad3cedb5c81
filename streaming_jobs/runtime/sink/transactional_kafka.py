"""The transactional sink's Kafka adapter: one transactional producer, the marker topic reader.

Owns the producer settings and transaction calls (init, begin, produce, commit, abort), the
mapping of librdkafka's transaction errors to the sink's errors (`classify`), and reading the
last committed marker of a query with a `read_committed` consumer. Neighbours: `transactional`
(the port it implements, marker codec, errors), `sink` (its only user).
"""

from __future__ import annotations

import enum
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from schemas.records import CommitMarker
from security.kafka import IDEMPOTENT, PLAINTEXT, KafkaSecurity, client_config
from streaming_jobs.runtime.sink.transactional import (
    DEFAULT_MARKER_TOPIC,
    OutputBatch,
    SinkBatchAborted,
    SinkFenced,
    SinkUnavailable,
    decode_marker,
    encode_marker,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TransactionalSettings:
    """Where the sink writes its markers and how long it waits for Kafka."""

    bootstrap_servers: str
    transactional_id: str
    """Stable per query and sink: a new producer with it fences every older one."""
    marker_topic: str = DEFAULT_MARKER_TOPIC
    """Compacted topic of commit markers, keyed by query id (created if missing)."""
    transaction_timeout_ms: int = 60_000
    """After this the broker aborts an open transaction of a dead instance. Until then it
    holds back `read_committed` readers of the partitions it wrote to."""
    retry_budget_s: float = 30.0
    """How long one call (init, commit, abort, marker read) may retry retriable errors."""
    security: KafkaSecurity = PLAINTEXT
    """How the producer and the marker reader authenticate (the job's setting)."""

    def client(self, **settings: Any) -> dict[str, Any]:
        return client_config(self.bootstrap_servers, self.security, **settings)


class Action(enum.Enum):
    RETRY = "retry"
    ABORT = "abort"
    FENCED = "fenced"
    FATAL = "fatal"


_FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                           KafkaError.INVALID_PRODUCER_EPOCH})


def classify(error: KafkaError) -> Action:
    """What to do next about a transaction call's error (librdkafka's own flags first)."""
    if error.code() in _FENCED_CODES:
        return Action.FENCED
    if error.fatal():
        return Action.FATAL
    if error.txn_requires_abort():
        return Action.ABORT
    if error.retriable() or error.code() == KafkaError._TIMED_OUT:
        return Action.RETRY
    return Action.FATAL


class KafkaTransactionalWriter:
    """`TransactionalWriter` over a confluent-kafka transactional producer."""

    def __init__(self, settings: TransactionalSettings) -> None:
        self._settings = settings
        self._producer: Producer | None = None
        self._known_topics: set[str] = set()

    def start(self, query_id: str) -> CommitMarker | None:
        """Fence older instances, then read the query's last marker (in that order: only after
        `init_transactions` can no transaction of ours still be open)."""
        s = self._settings
        _reachable(lambda: ensure_marker_topic(s.client(), s.marker_topic, s.retry_budget_s),
                   s.marker_topic)
        self._drop()  # a previous producer (an aborted batch, an unknown outcome) is done
        self._producer = Producer(s.client(**{
            "transactional.id": s.transactional_id,
            "transaction.timeout.ms": s.transaction_timeout_ms, **IDEMPOTENT, "linger.ms": 5,
            # Java's partitioner, as Spark's own Kafka sink uses: a key keeps its partition.
            "partitioner": "murmur2_random",
        }))
        self._call("init_transactions", self._producer.init_transactions)
        # Another query's transaction ends at the latest when the broker times it out.
        wait_s = s.transaction_timeout_ms / 1000 + s.retry_budget_s
        return _reachable(lambda: read_last_marker(s.client(), s.marker_topic, query_id,
                                                   wait_s), s.marker_topic)

    def commit(self, topic: str, batch: OutputBatch, marker: CommitMarker) -> None:
        producer = self._require_producer()
        self._check_topic(producer, topic)
        try:
            producer.begin_transaction()
        except KafkaException as exc:
            self._raise_for("begin_transaction", exc.args[0], None)
        try:
            for key, value in zip(batch.keys, batch.values, strict=True):
                self._produce(producer, topic, key, value)
            self._produce(producer, self._settings.marker_topic, marker.query_id.encode(),
                          encode_marker(marker))
        except KafkaException as exc:
            self._raise_for(f"produce to {topic}", exc.args[0], producer)
        self._call("commit_transaction", producer.commit_transaction, producer)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.close()  # no transaction is open between batches
            self._producer = None

    def _drop(self) -> None:
        """Forget a producer whose transaction state is unknown, without waiting on it: its
        queued records must never be sent (the next `start` fences what it may have begun)."""
        if self._producer is not None:
            self._producer.purge()
            self._producer = None

    def _require_producer(self) -> Producer:
        if self._producer is None:
            raise RuntimeError("KafkaTransactionalWriter.commit before start")
        return self._producer

    def _check_topic(self, producer: Producer, topic: str) -> None:
        """A missing topic would only fail at commit, after the transaction timeout."""
        if topic in self._known_topics:
            return
        metadata = producer.list_topics(topic, timeout=self._settings.retry_budget_s)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise SinkUnavailable(f"output topic {topic} does not exist or has no leader: "
                                  f"{found.error if found is not None else 'not in metadata'}")
        self._known_topics.add(topic)

    @staticmethod
    def _produce(producer: Producer, topic: str, key: bytes | None, value: bytes | None) -> None:
        while True:
            try:
                producer.produce(topic, key=key, value=value)
                return
            except BufferError:  # local queue full: deliver some, then go on
                producer.poll(0.1)

    def _call(self, what: str, call: object, producer: Producer | None = None) -> None:
        """Run a transaction call, retrying retriable errors within the retry budget."""
        deadline = time.monotonic() + self._settings.retry_budget_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                call(max(remaining, 0.1))  # type: ignore[operator]
                return
            except KafkaException as exc:
                error = exc.args[0]
                if classify(error) is Action.RETRY and time.monotonic() < deadline:
                    log.warning("%s: retriable error, retrying: %s", what, error)
                    continue
                self._raise_for(what, error, producer)

    def _raise_for(self, what: str, error: KafkaError, producer: Producer | None) -> None:
        s = self._settings
        action = classify(error)
        context = f"{what} (transactional.id {s.transactional_id}): {error}"
        if action is Action.FENCED:
            self._producer = None
            raise SinkFenced(f"another instance with a higher epoch owns this sink; {context}")
        if action is Action.ABORT and producer is not None and _aborted(producer, s):
            raise SinkBatchAborted(f"transaction aborted, nothing of it is visible; {context}; "
                                   "the next batch re-initialises the producer")
        self._drop()  # outcome unknown or producer unusable: start afresh next batch
        raise SinkUnavailable(f"{context}; the next batch re-initialises the producer")


T = TypeVar("T")


def _reachable(call: Callable[[], T], topic: str) -> T:
    """`call`, with Kafka being unreachable (metadata timeouts) as `SinkUnavailable`."""
    try:
        return call()
    except KafkaException as exc:
        raise SinkUnavailable(f"marker topic {topic}: Kafka unreachable ({exc.args[0]})") \
            from exc


def _aborted(producer: Producer, settings: TransactionalSettings) -> bool:
    """Abort the open transaction; False when even that fails (the broker is away): the
    outcome is then resolved by the next producer's `init_transactions`."""
    try:
        producer.abort_transaction(settings.retry_budget_s)
    except KafkaException as exc:
        log.warning("abort_transaction (transactional.id %s) failed: %s",
                    settings.transactional_id, exc.args[0])
        return False
    return True


def ensure_marker_topic(client: Mapping[str, Any], topic: str, timeout_s: float) -> None:
    """Create the compacted marker topic when it does not exist (brokers here never
    auto-create topics, and a job should not need a separate set-up step for it). With ACLs
    the job may not create topics: the topic-init service creates it (`stack.defaults`)."""
    admin = AdminClient(dict(client))
    if topic in admin.list_topics(timeout=timeout_s).topics:
        return
    spec = NewTopic(topic, 1, -1, config={"cleanup.policy": "compact"})
    try:
        admin.create_topics([spec], request_timeout=timeout_s)[topic].result(timeout_s)
        log.info("created the compacted marker topic %s", topic)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # another instance won
            raise SinkUnavailable(f"cannot create marker topic {topic}: {exc}") from exc


def read_last_marker(client: Mapping[str, Any], topic: str, query_id: str,
                     timeout_s: float) -> CommitMarker | None:
    """The last committed marker of `query_id`, read with `read_committed`.

    Reads every partition up to its end as it is *now, uncommitted records included*: another
    query's open transaction holds back the last stable offset, and a marker of ours behind
    it would be missed by stopping at that offset. So this waits (within `timeout_s`, which
    should exceed the transaction timeout) until every such transaction is resolved.
    """
    ends = _end_offsets(client, topic, timeout_s)
    consumer = Consumer({
        **client, "group.id": f"streamctl-markers-{uuid.uuid4()}",
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "enable.partition.eof": True, "auto.offset.reset": "earliest",
    })
    try:
        return _scan(consumer, topic, ends, query_id, timeout_s)
    finally:
        consumer.close()


def _end_offsets(client: Mapping[str, Any], topic: str, timeout_s: float) -> dict[int, int]:
    from confluent_kafka import IsolationLevel

    admin = AdminClient(dict(client))
    partitions = admin.list_topics(topic, timeout=timeout_s).topics[topic].partitions
    request = {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions}
    futures = admin.list_offsets(request, isolation_level=IsolationLevel.READ_UNCOMMITTED,
                                 request_timeout=timeout_s)
    return {tp.partition: f.result(timeout_s).offset for tp, f in futures.items()}


def _scan(consumer: Consumer, topic: str, ends: dict[int, int], query_id: str,
          timeout_s: float) -> CommitMarker | None:
    pending = {p for p, end in ends.items() if end > 0}
    consumer.assign([TopicPartition(topic, p, 0) for p in pending])
    key, last = query_id.encode(), None
    deadline = time.monotonic() + timeout_s
    while pending:
        if time.monotonic() > deadline:
            raise SinkUnavailable(
                f"marker topic {topic}: partitions {sorted(pending)} not readable up to "
                f"{ends} within {timeout_s} s (an open transaction holds them back)")
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        error, partition, offset = msg.error(), msg.partition() or 0, msg.offset() or 0
        if error is not None:
            if error.code() != KafkaError._PARTITION_EOF:
                raise SinkUnavailable(f"marker topic {topic}: {error}")
            if offset >= ends[partition]:  # the EOF's offset: past every transaction
                pending.discard(partition)
            continue
        if msg.key() == key:
            last = decode_marker(msg.value(), topic=topic, partition=partition, offset=offset)
        if offset + 1 >= ends[partition]:
            pending.discard(partition)
    return last
