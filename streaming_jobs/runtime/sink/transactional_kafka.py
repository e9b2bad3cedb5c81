"""The transactional sink's Kafka adapter: one transactional producer, the marker topic reader.

Owns the producer settings and transaction calls (init, begin, produce, commit, abort), the
mapping of librdkafka's errors to what the sink does next — by code: retry a transaction call
(`classify`), send a record the broker refuses for what it is to the dead-letter topic, or stop
on a setup the broker refuses (`record_fault`) — the output topics' limits (`topic_limits`),
and reading the last committed marker of a query with a `read_committed` consumer.
Neighbours: `transactional` (the port it implements, marker codec, errors), `dead_letter`
(sizes and framing), `sink` (its only user).
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
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, OffsetSpec, ResourceType

from schemas.records import CommitMarker
from streamctl.security.kafka import IDEMPOTENT, PLAINTEXT, KafkaSecurity, client_config
from streaming_jobs.runtime.sink.dead_letter import (
    LetterSpec,
    Outgoing,
    Rejected,
    TopicLimits,
    limit_problems,
    outgoing,
    screen,
)
from streaming_jobs.runtime.sink.transactional import (
    DEFAULT_MARKER_TOPIC,
    DEFAULT_MAX_RECORD_BYTES,
    OutputBatch,
    SinkBatchAborted,
    SinkFenced,
    SinkRefused,
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
    dead_letter_topic: str = ""
    """Where an output row the output topic cannot take goes, in the batch's transaction
    (empty: nowhere, and such a row fails the batch)."""
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES
    """The largest record the producer sends (its `message.max.bytes`); a row over it, or over
    its topic's `max.message.bytes`, is a dead letter."""

    def client(self, **settings: Any) -> dict[str, Any]:
        return client_config(self.bootstrap_servers, self.security, **settings)


class Action(enum.Enum):
    RETRY = "retry"
    ABORT = "abort"
    FENCED = "fenced"
    FATAL = "fatal"


_FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                           KafkaError.INVALID_PRODUCER_EPOCH})

RECORD_REJECTED = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_MSG_SIZE, KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_RECORD, KafkaError.INVALID_MSG, KafkaError.INVALID_TIMESTAMP,
    KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT})
"""Codes of a record the broker (or the client) refuses for what it is: sending it again
fails again, so it is a dead letter."""
SETUP_REFUSED = frozenset({
    KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError._AUTHENTICATION, KafkaError.TOPIC_EXCEPTION, KafkaError.UNSUPPORTED_VERSION})
"""Codes of a setup the broker refuses (credentials, ACLs, a topic name): no retry helps
until an operator changes it."""


class Fault(enum.Enum):
    REJECTED = "rejected"
    """The record: send it to the dead-letter topic."""
    REFUSED = "refused"
    """The setup: stop and say what to change."""
    TRANSIENT = "transient"
    """Kafka away or busy: retry the batch."""


def record_fault(error: KafkaError) -> Fault:
    """What a record's delivery error means, by its code."""
    if error.code() in RECORD_REJECTED:
        return Fault.REJECTED
    if error.code() in SETUP_REFUSED:
        return Fault.REFUSED
    return Fault.TRANSIENT


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
        self._limits: dict[str, TopicLimits] = {}

    def start(self, query_id: str,
              before_fence: Callable[[], None] = lambda: None) -> CommitMarker | None:
        """Fence older instances, then read the query's last marker (in that order: only after
        `init_transactions` can no transaction of ours still be open)."""
        s = self._settings
        _reachable(lambda: ensure_marker_topic(s.client(), s.marker_topic, s.retry_budget_s),
                   s.marker_topic)
        before_fence()
        self._renew()
        # Another query's transaction ends at the latest when the broker times it out.
        wait_s = s.transaction_timeout_ms / 1000 + s.retry_budget_s
        return _reachable(lambda: read_last_marker(s.client(), s.marker_topic, query_id,
                                                   wait_s), s.marker_topic)

    def _renew(self) -> Producer:
        """A new producer under the transactional id, its transactions initialised: it fences
        every older one, ours included (a previous producer — an aborted batch, an unknown
        outcome, sequence numbers spent on refused records — is done)."""
        s = self._settings
        self._drop()
        self._producer = Producer(s.client(**{
            "transactional.id": s.transactional_id,
            "transaction.timeout.ms": s.transaction_timeout_ms, **IDEMPOTENT, "linger.ms": 5,
            # A record batch never exceeds what one record may be: no small row is refused
            # for sharing a batch with a large one.
            "message.max.bytes": s.max_record_bytes,
            # Java's partitioner, as Spark's own Kafka sink uses: a key keeps its partition.
            "partitioner": "murmur2_random",
        }))
        self._call("init_transactions", self._producer.init_transactions)
        return self._producer

    def commit(self, topic: str, batch: OutputBatch,
               marker: CommitMarker) -> tuple[Rejected, ...]:
        """Rows, dead letters and marker in one transaction; the rows sent as dead letters.

        Rows `topic` cannot take by its configuration are screened out first. Records the
        broker still refuses for what they are (its limits changed, or a rule the screen does
        not know) abort the transaction, which is written again with the limits read afresh
        and one record per request, so that a refusal names its own record and not the
        others it shared a request with; a row refused then is a dead letter next time, a
        refused dead letter goes without its payload. At most three transactions."""
        producer = self._require_producer()
        rejected = self._screen(topic, batch)
        bare: frozenset[int] = frozenset()
        for attempt in range(3):
            records = outgoing(topic, batch.keys, batch.values, rejected,
                               self._letters(marker, bare))
            refused = self._transaction(producer, records, marker, one_by_one=attempt > 0)
            if not refused:
                return rejected
            self._limits.clear()  # they may have changed since they were read
            rejected = self._screen(topic, batch)
            if attempt > 0:  # one record per request: each refusal is the record's own
                rejected = _merged(rejected, tuple(
                    Rejected(record.row, f"refused by the broker: {error.str()}")
                    for record, error in refused if not record.letter))
                bare |= {record.row for record, _error in refused if record.letter}
            # Refused records spent sequence numbers the broker never saw: the producer's next
            # transaction would fail on the gap, so a new one takes over.
            producer = self._renew()
        raise SinkRefused(f"{topic}: the broker refused records of batch {marker.batch_id} "
                          f"in three transactions ({len(rejected)} rows made dead letters)")

    def _screen(self, topic: str, batch: OutputBatch) -> tuple[Rejected, ...]:
        rejected = screen(batch.keys, batch.values, topic, self._topic_limits(topic),
                          self._settings.max_record_bytes)
        if rejected and not self._settings.dead_letter_topic:
            raise SinkRefused(f"{len(rejected)} rows cannot be written to {topic} "
                              f"({rejected[0].reason}) and the sink has no dead-letter topic")
        return rejected

    def _letters(self, marker: CommitMarker, bare: frozenset[int]) -> LetterSpec:
        s = self._settings
        limit = s.max_record_bytes
        if s.dead_letter_topic:
            limit = min(limit, self._topic_limits(s.dead_letter_topic).max_message_bytes)
        return LetterSpec(s.dead_letter_topic, [
            ("stage", "output"), ("query_id", marker.query_id),
            ("batch_id", str(marker.batch_id))], limit, bare)

    def _transaction(self, producer: Producer, records: list[Outgoing], marker: CommitMarker,
                     *, one_by_one: bool) -> list[tuple[Outgoing, KafkaError]]:
        """One attempt: () once committed, else the records the broker refused for what they
        are (the transaction then aborted: nothing of it is visible). `one_by_one` sends each
        record in a request of its own, so that a refusal is the record's own."""
        try:
            producer.begin_transaction()
        except KafkaException as exc:
            self._raise_for("begin_transaction", exc.args[0], None)
        refused: list[tuple[Outgoing, KafkaError]] = []

        def watching(record: Outgoing) -> Callable[[KafkaError | None, object], None]:
            def delivered(error: KafkaError | None, _msg: object) -> None:
                if error is not None and record_fault(error) is Fault.REJECTED:
                    refused.append((record, error))
            return delivered

        try:
            for record in records:
                self._produce(producer, record.topic, record.key, record.value,
                              headers=record.headers, on_delivery=watching(record))
                if one_by_one:
                    producer.flush(self._settings.retry_budget_s)
                    if refused:
                        break
            else:
                self._produce(producer, self._settings.marker_topic, marker.query_id.encode(),
                              encode_marker(marker))
        except KafkaException as exc:
            # A refusal delivered while records were still being produced leaves the
            # transaction in an abortable state, and the next produce says so (_STATE).
            if exc.args[0].code() != KafkaError._STATE:
                self._raise_for(f"produce to {record.topic}", exc.args[0], producer)
            producer.flush(self._settings.retry_budget_s)
            if not refused:
                self._raise_for(f"produce to {record.topic}", exc.args[0], producer)
        if refused:
            if _aborted(producer, self._settings):
                return refused
            self._drop()
            raise SinkUnavailable(f"could not abort a transaction the broker refused records "
                                  f"of ({refused[0][1].str()}); the next batch re-initialises "
                                  "the producer")
        try:
            self._call("commit_transaction", producer.commit_transaction, producer)
        except (SinkBatchAborted, SinkUnavailable):
            if refused and self._producer is producer:  # aborted: the producer goes on
                return refused
            raise
        return []

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

    def check_topic(self, topic: str) -> None:
        """`SinkRefused` unless `topic` exists and takes the job's largest record."""
        try:
            limits = self._topic_limits(topic)
        except SinkUnavailable as exc:
            raise SinkRefused(str(exc)) from exc
        problems = limit_problems(self._settings.max_record_bytes,
                                  [("output topic", topic, limits)])
        if problems:
            raise SinkRefused(problems[0])

    def _topic_limits(self, topic: str) -> TopicLimits:
        """The topic's limits, read once (a missing topic would only fail at commit, after the
        transaction timeout)."""
        if topic not in self._limits:
            s = self._settings
            try:
                found = topic_limits(s.client(), [topic], s.retry_budget_s)[topic]
            except LookupError as exc:
                raise SinkUnavailable(f"output topic {topic} does not exist ({exc})") from exc
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    raise SinkUnavailable(f"cannot read the configuration of {topic}: Kafka "
                                          f"unreachable ({exc.args[0]})") from exc
                # Not allowed to read it: the broker's refusals still make dead letters.
                log.warning("may not read the configuration of %s (DESCRIBE_CONFIGS): taking "
                            "records up to max_record_bytes %d there", topic,
                            s.max_record_bytes)
                found = TopicLimits(s.max_record_bytes)
            self._limits[topic] = found
        return self._limits[topic]

    @staticmethod
    def _produce(producer: Producer, topic: str, key: bytes | None, value: bytes | None,
                 **extra: Any) -> None:
        while True:
            try:
                producer.produce(topic, key=key, value=value, **extra)
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
        if producer is not None:
            error = fatal_cause(error, producer)
        action = classify(error)
        context = f"{what} (transactional.id {s.transactional_id}): {error}"
        if action is Action.FENCED:
            self._producer = None
            raise SinkFenced(f"another instance with a higher epoch owns this sink; {context}")
        if error.code() in SETUP_REFUSED:
            self._drop()
            raise SinkRefused(f"Kafka refuses the sink's setup; {context}")
        if action is Action.ABORT and producer is not None and _aborted(producer, s):
            raise SinkBatchAborted(f"transaction aborted, nothing of it is visible; {context}; "
                                   "the next batch re-initialises the producer")
        self._drop()  # outcome unknown or producer unusable: start afresh next batch
        raise SinkUnavailable(f"{context}; the next batch re-initialises the producer")


def fatal_cause(error: KafkaError, producer: Producer) -> KafkaError:
    """The error behind a generic `_FATAL`: a fatal error found by the producer's own thread
    (fencing that surfaced while records were being produced) reaches `produce` as `_FATAL`
    only, while every transaction call of that producer raises the cause. Without it a fenced
    instance would take itself for one Kafka was away from, and fence the newer one back."""
    if error.code() != KafkaError._FATAL:
        return error
    try:
        producer.abort_transaction(0.1)  # refused at once with the cause: the producer is dead
    except KafkaException as exc:
        cause: KafkaError = exc.args[0]
        # Only a fatal cause is the one behind it (a timeout would read as retriable).
        if cause.fatal() or cause.code() in _FENCED_CODES:
            return cause
    return error


def _merged(rejected: tuple[Rejected, ...], more: tuple[Rejected, ...]) -> tuple[Rejected, ...]:
    known = {r.index for r in rejected}
    return tuple(sorted((*rejected, *(r for r in more if r.index not in known)),
                        key=lambda r: r.index))


def topic_limits(client: Mapping[str, Any], topics: list[str],
                 timeout_s: float) -> dict[str, TopicLimits]:
    """Each topic's `max.message.bytes` and whether it is compacted, as the broker resolves its
    configuration (its own defaults included); `KafkaException` when it cannot be asked,
    `LookupError` naming a topic that does not exist."""
    admin = AdminClient(dict(client))
    resources = [ConfigResource(ResourceType.TOPIC, topic) for topic in topics]
    found = {}
    for resource, future in admin.describe_configs(resources,
                                                   request_timeout=timeout_s).items():
        try:
            config = future.result(timeout_s)
        except KafkaException as exc:
            if exc.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
                raise LookupError(f"topic {resource.name!r} does not exist") from exc
            raise
        found[resource.name] = TopicLimits(
            int(config["max.message.bytes"].value),
            "compact" in (config["cleanup.policy"].value or ""))
    return found


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
    the job may not create topics: the topic-init service creates it
    (`streamctl.stack.defaults`)."""
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
