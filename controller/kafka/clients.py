"""Kafka adapters of the controller's ports.

Owns the client configurations (every client gets the Kafka security of `KafkaSettings`,
`streamctl.security.kafka`): the metrics consumer (every partition, or those of the shards led
when the topic divides into them, from the model's window back by default), the ack consumer
(assigned at the end of every partition before anything is sent, so no ack can slip past it),
and the transactional producers (`acks=all`, one per shard led) shared by the control sink and
the decision log; and the offset look-ups they and the tools share (`watermarks`, `offsets_at`:
positioning by time). Payloads go through `schemas` codecs; bad ones through
`ports.decode_each`. Neighbours: `ports` (the interfaces), `app` (wiring), `fakes` (the
in-memory twins).

The metrics and the ack consumer are directly assigned: each holds its consumer through a
`streamctl.fetch_guard.FetchGuard`, which replaces one stuck after a broker restart.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from typing import Any, Protocol

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from controller.core.shards import (
    NO_QUERY,
    describe,
    read_partitions,
    shard_of,
    transactional_id,
)
from controller.errors import TemporaryError, UserError
from controller.loop.ports import (
    DeliveryError,
    Fenced,
    OnDecodeError,
    PartitionKey,
    RawMessage,
    decode_each,
)
from controller.settings import KafkaSettings
from schemas import Ack, ControlTuple, Decision, TaskMetrics, auth, codec_for
from streamctl.fetch_guard import STALL_CHECK_S, FetchGuard
from streamctl.security.kafka import IDEMPOTENT
from streamctl.security.kafka import client_config as kafka_client_config

log = logging.getLogger("controller.kafka")

_MAX_BATCH = 500
"""Records per consume call: a cycle's worth for dozens of queries at sub-second triggers."""


NO_KEY = (f"no control key: set {auth.KEY_ENV} or {auth.KEY_FILE_ENV} to the key the jobs "
          "verify (they reject unsigned control tuples)")


class KafkaSetupError(UserError):
    """The broker or a topic is not there; the message says which, and the process stops."""


def _log_client_error(error: KafkaError) -> None:
    # librdkafka retries transient errors (broker down, leader moves) on its own; only a fatal
    # one needs a human.
    if error.fatal():
        log.error("kafka client fatal error: %s", error)
    else:
        log.debug("kafka client error (retrying): %s", error)


def client_config(settings: KafkaSettings, **extra: Any) -> dict[str, Any]:
    """What every controller client shares: where Kafka is, how to log in
    (`streamctl.security.kafka`), error logging."""
    return kafka_client_config(
        settings.bootstrap_servers, settings.security, **{
        "error_cb": _log_client_error,
        "logger": log,
        # syslog level 3: librdkafka's own chatter (connection attempts, rebalances) stays out
        # of the operator's status output; errors still show.
        "log_level": 3,
        **extra})


def _raw(messages: list[Message]) -> list[RawMessage]:
    raw = []
    for message in messages:
        error = message.error()
        if error is None:
            # A consumed message always has its position; the Optional types are for produce.
            raw.append((message.value(), message.topic() or "", message.partition() or 0,
                        message.offset() or 0))
        elif error.code() != KafkaError._PARTITION_EOF:
            log.warning("consume error on %s: %s", message.topic(), error)
    return raw


def _assigned_consumer_config(settings: KafkaSettings, role: str) -> dict[str, Any]:
    return {
        **client_config(settings),
        # Never commits: a throwaway group id keeps it out of anyone's group.
        "group.id": f"{settings.group_id}.{role}.{uuid.uuid4()}",
        "enable.auto.commit": False,
        # Only where a position is gone (retention deleted it): nothing skipped.
        "auto.offset.reset": "earliest",
    }


class KafkaMetricsSource:
    """`MetricsSource` over the partitions of the metrics topic, from `read_back_s` back (or
    their end, or their beginning: `metrics_offset_reset`): every partition, until told to
    read only the shards this instance leads (`read_shards`).

    Assigned, not subscribed: which partitions an instance reads follows the shards it leads
    (the lease's group), not a group of its own; with one shard every instance reads every
    job's metrics (a follower keeps its models warm for the moment it leads). Its consumer is
    replaced when its fetch stalled (`FetchGuard`).
    """

    def __init__(self, settings: KafkaSettings, on_decode_error: OnDecodeError,
                 read_back_s: float, setup_timeout_s: float = 10.0, *,
                 stall_check_s: float = STALL_CHECK_S,
                 on_fetch_restart: Callable[[str], None] = lambda topic: None) -> None:
        """`read_back_s`: how far back 'window' (`metrics_offset_reset`) starts;
        `on_fetch_restart(topic)`: each time a stalled consumer is replaced."""
        self._on_error = on_decode_error
        self._settings, self._read_back_s = settings, read_back_s
        self._timeout_s = setup_timeout_s
        topic = settings.metrics_topic
        config = _assigned_consumer_config(settings, "metrics")
        self._guard = FetchGuard(
            lambda: Consumer(config), "metrics",
            lambda: {(topic, p): after for p, (after, _) in self._read.items()},
            stall_check_s=stall_check_s, on_fetch_restart=lambda: on_fetch_restart(topic))
        try:
            starts = _metrics_starts(self._guard.consumer, settings,
                                     int((time.time() - read_back_s) * 1000), setup_timeout_s)
            self._guard.assign(starts)
        except BaseException:
            self._guard.close()
            raise
        self._partitions = len(starts)
        self._read = {tp.partition: (tp.offset, 0) for tp in starts}
        """Per partition read: the offset after the newest record read, and its timestamp."""

    @property
    def fetch_restarts(self) -> int:
        """How many times a stalled consumer was replaced (`FetchGuard`)."""
        return self._guard.fetch_restarts

    def read_shards(self, held: frozenset[int], shards: int, now_ms: int) -> bool:
        wanted = read_partitions(held, shards, self._partitions)
        if wanted is None:
            return False
        topic = self._settings.metrics_topic
        lost = [TopicPartition(topic, p) for p in sorted(self._read.keys() - wanted)]
        gained = sorted(wanted - self._read.keys())
        consumer = self._guard.consumer
        try:
            # A shard taken over is read back the window, whatever `metrics_offset_reset`
            # chose at start: its queries are modelled, and their standbys counted, at once.
            starts = (_metrics_starts(consumer, self._settings,
                                      now_ms - int(self._read_back_s * 1000), self._timeout_s,
                                      gained, start="window") if gained else [])
        except KafkaSetupError as exc:
            raise TemporaryError(f"cannot read back the metrics of {describe(held, shards)}: "
                                 f"{exc}") from exc
        if lost:
            consumer.incremental_unassign(lost)
        if starts:
            consumer.incremental_assign(starts)
        for tp in lost:
            del self._read[tp.partition]
        self._read |= {tp.partition: (tp.offset, 0) for tp in starts}
        return True

    def poll(self, timeout_s: float) -> list[TaskMetrics]:
        """What arrived, as soon as anything did (at most `timeout_s`): `consume` with a
        batch size waits for the whole batch or the timeout, which would hold every cycle,
        and so every decision, for the full timeout when records trickle in."""
        consumer = self._guard.consumer
        messages = consumer.consume(num_messages=1, timeout=timeout_s)
        if messages:
            messages += consumer.consume(num_messages=_MAX_BATCH - 1, timeout=0)
        delivered = []
        for message in messages:
            partition = message.partition() or 0
            if message.error() is None and partition in self._read:  # not one just given up
                self._read[partition] = ((message.offset() or 0) + 1, message.timestamp()[1])
                delivered.append((self._settings.metrics_topic, partition))
        # After a replacement, what the old consumer passed counts as read (`FetchGuard.mind`).
        self._read |= {tp.partition: (tp.offset, self._read[tp.partition][1])
                       for tp in self._guard.mind(delivered, len(messages) < _MAX_BATCH)}
        return decode_each(codec_for(TaskMetrics), _raw(messages), self._on_error)

    def behind_ms(self, now_ms: int) -> int:
        """From the high watermarks the consumer's fetches last brought (no request): the age
        of the newest record read on each partition with records still unread there."""
        behind = 0
        topic = self._settings.metrics_topic
        for partition, (after, stamp_ms) in self._read.items():
            _low, high = self._guard.consumer.get_watermark_offsets(
                TopicPartition(topic, partition), cached=True)
            if high >= 0 and after >= 0 and after < high and stamp_ms > 0:
                behind = max(behind, now_ms - stamp_ms)
        return behind

    def close(self) -> None:
        self._guard.close()


def _metrics_starts(consumer: Consumer, settings: KafkaSettings, since_ms: int,
                    timeout_s: float, partitions: Collection[int] | None = None,
                    start: str | None = None) -> list[TopicPartition]:
    """Each of the `partitions` of the metrics topic (None: all) at `start` (None:
    `metrics_offset_reset`): for 'window', its first record stamped since `since_ms`, for
    'earliest' its beginning, else its end. Ends are explicit offsets: OFFSET_END resolves
    lazily, past whatever was written meanwhile."""
    topic, start = settings.metrics_topic, start or settings.metrics_offset_reset
    chosen = partitions_of(consumer, topic, timeout_s) if partitions is None else partitions
    if start == "earliest":
        return [TopicPartition(topic, p, OFFSET_BEGINNING) for p in chosen]
    ends = {p: watermarks(consumer, topic, p, timeout_s)[1] for p in chosen}
    if start == "latest":
        return [TopicPartition(topic, p, offset) for p, offset in ends.items()]
    starts = offsets_since(consumer, topic, since_ms, ends, timeout_s)
    return [TopicPartition(topic, p, offset) for p, offset in starts.items()]


def offsets_since(consumer: Consumer, topic: str, since_ms: int, ends: dict[int, int],
                  timeout_s: float) -> dict[int, int]:
    """Per partition of `ends`, the first offset stamped at or after `since_ms`, or its end
    when nothing is (the broker answers -1)."""
    try:
        found = consumer.offsets_for_times([TopicPartition(topic, p, since_ms) for p in ends],
                                           timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaSetupError(f"cannot look up the offsets of {topic!r} stamped since "
                              f"{since_ms}: {exc}") from exc
    return {tp.partition: tp.offset if tp.offset >= 0 else ends[tp.partition] for tp in found}


class KafkaAckSource:
    """`AckSource` assigned to the current end of every partition of the ack topic.

    Assigning explicit end offsets at construction (instead of subscribing with 'latest', which
    resolves lazily) means any ack written after this returns is seen, however fast the job is.
    Its consumer is replaced when its fetch stalled (`FetchGuard`): a stuck one would miss
    every ack, and each control tuple would end in an ack timeout.
    """

    def __init__(self, settings: KafkaSettings, on_decode_error: OnDecodeError,
                 setup_timeout_s: float = 10.0, *, stall_check_s: float = STALL_CHECK_S,
                 on_fetch_restart: Callable[[str], None] = lambda topic: None) -> None:
        """`on_fetch_restart(topic)`: each time a stalled consumer is replaced."""
        self._on_error = on_decode_error
        topic = settings.ack_topic
        config = _assigned_consumer_config(settings, "acks")
        self._guard = FetchGuard(
            lambda: Consumer(config), "acks",
            lambda: {(topic, p): after for p, after in self._read.items()},
            stall_check_s=stall_check_s, on_fetch_restart=lambda: on_fetch_restart(topic))
        try:
            starts = _end_offsets(self._guard.consumer, settings.ack_topic, setup_timeout_s)
            self._guard.assign(starts)
        except BaseException:
            self._guard.close()
            raise
        self._read = {tp.partition: tp.offset for tp in starts}
        """Per partition, the offset after the newest ack read (its end at start, before any)."""

    @property
    def fetch_restarts(self) -> int:
        """How many times a stalled consumer was replaced (`FetchGuard`)."""
        return self._guard.fetch_restarts

    def poll(self, timeout_s: float) -> list[Ack]:
        messages = self._guard.consumer.consume(num_messages=_MAX_BATCH, timeout=timeout_s)
        delivered = []
        for message in messages:
            if message.error() is None:
                self._read[message.partition() or 0] = (message.offset() or 0) + 1
                delivered.append((message.topic() or "", message.partition() or 0))
        # After a replacement, what the old consumer passed counts as read (`FetchGuard.mind`).
        self._read |= {tp.partition: tp.offset
                       for tp in self._guard.mind(delivered, len(messages) < _MAX_BATCH)}
        return decode_each(codec_for(Ack), _raw(messages), self._on_error)

    def close(self) -> None:
        self._guard.close()


def partitions_of(consumer: Consumer, topic: str, timeout_s: float) -> list[int]:
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    except KafkaException as exc:
        raise KafkaSetupError(f"cannot reach Kafka to look up topic {topic!r}: {exc}") from exc
    if metadata is None or metadata.error is not None or not metadata.partitions:
        raise KafkaSetupError(f"topic {topic!r} does not exist; create it first "
                              "(`streamctl stack up` creates the default topics)")
    return sorted(metadata.partitions)


def _end_offsets(consumer: Consumer, topic: str, timeout_s: float) -> list[TopicPartition]:
    return [TopicPartition(topic, p, watermarks(consumer, topic, p, timeout_s)[1])
            for p in partitions_of(consumer, topic, timeout_s)]


_NO_LEADER_YET = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TRANSPORT, KafkaError._TIMED_OUT,
})
"""What a topic just created, or a broker just restarted, answers until its leader is elected."""


def watermarks(consumer: Consumer, topic: str, partition: int,
               timeout_s: float) -> tuple[int, int]:
    """(log start, end) of one partition, asked again while it has no leader yet (librdkafka
    does not flag those errors retriable on this call); `KafkaSetupError` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=max(0.1, deadline - time.monotonic()))
            return int(low), int(high)
        except KafkaException as exc:
            error = exc.args[0]
            if ((error.code() not in _NO_LEADER_YET and not error.retriable())
                    or time.monotonic() >= deadline):
                raise KafkaSetupError(f"cannot read the offsets of {topic!r} partition "
                                      f"{partition}: {error.str()}") from exc
            time.sleep(0.2)


def offsets_at(consumer: Consumer, partitions: Sequence[TopicPartition], at_ms: int,
               timeout_s: float) -> list[TopicPartition]:
    """Per partition, the first offset stamped at or after `at_ms`, or, where nothing is
    stamped yet, the partition's end as read before that lookup: a record written after the
    lookup lies at or past it. ("The end" left for the client to resolve when fetching begins
    would skip one written between the lookup and the fetch.) `KafkaSetupError` when either
    cannot be read."""
    ends = {(p.topic, p.partition): watermarks(consumer, p.topic, p.partition, timeout_s)[1]
            for p in partitions}
    try:
        found = consumer.offsets_for_times(
            [TopicPartition(p.topic, p.partition, at_ms) for p in partitions], timeout=timeout_s)
    except KafkaException as exc:
        raise KafkaSetupError(f"cannot look up offsets by time: {exc}") from exc
    starts = []
    for tp in found:
        if tp.error is not None:
            raise KafkaSetupError(f"cannot look up {tp.topic}[{tp.partition}] by time: "
                                  f"{tp.error}")
        starts.append(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0
                                     else ends[(tp.topic, tp.partition)]))
    return starts


class KafkaEndOffsets:
    """`OffsetProbe` asking for every partition in one ListOffsets request per broker that
    leads some (one call of the client's `list_offsets`).

    Read committed: a job that reads committed records plans its batches against the last
    stable offset, and an open transaction upstream must not look like a backlog.
    """

    def __init__(self, settings: KafkaSettings, timeout_s: float = 2.0) -> None:
        self._timeout_s = timeout_s
        self._admin = AdminClient(client_config(settings))

    def end_offsets(self, partitions: Collection[PartitionKey]) -> dict[PartitionKey, int]:
        if not partitions:
            return {}
        asked = {TopicPartition(topic, p): OffsetSpec.latest() for topic, p in partitions}
        try:
            futures = self._admin.list_offsets(asked, isolation_level=IsolationLevel.READ_COMMITTED,
                                               request_timeout=self._timeout_s)
        except KafkaException as exc:
            raise TemporaryError(f"cannot ask the broker for end offsets: {exc}") from exc
        found: dict[PartitionKey, int] = {}
        for tp, future in futures.items():
            try:
                found[(tp.topic, tp.partition)] = int(future.result().offset)
            except KafkaException as exc:  # one partition without a leader: leave it out
                log.debug("no end offset for %s/%d: %s", tp.topic, tp.partition, exc)
        if not found:
            raise TemporaryError(f"the broker answered for none of {len(asked)} partitions")
        return found


class KafkaWriter:
    """A leader's producer: every write is one transaction under a transactional id shared by
    the controller instances (the group's name, or one shard's: `ShardWriters`), and returns
    once committed.

    `fence` (at each election) initialises the id: the broker then aborts whatever an earlier
    leader left open and refuses that leader's producer from then on, so a deposed leader that
    still believes it leads cannot get a record onto the control topic or the decision log
    (`Fenced`). The jobs and every reader of those topics read committed.
    """

    def __init__(self, settings: KafkaSettings, delivery_timeout_s: float = 15.0,
                 transactional_id: str | None = None) -> None:
        self._settings = settings
        self._timeout_s = delivery_timeout_s
        self._id = transactional_id or settings.group_id
        self._producer: Producer | None = None

    def fence(self) -> None:
        """Take the transactional id over (a new producer: a fenced one is dead for good)."""
        self.close()
        producer = Producer(client_config(
            self._settings, **IDEMPOTENT, **{
                "transactional.id": self._id,
                "delivery.timeout.ms": int(self._timeout_s * 1000),
                "transaction.timeout.ms": int(4 * self._timeout_s * 1000)}))
        try:
            producer.init_transactions(self._timeout_s)
        except KafkaException as exc:
            raise TemporaryError(f"cannot take over the transactional id "
                                 f"{self._id!r}: {exc.args[0].str()}") from exc
        self._producer = producer

    def write_for(self, query_id: str, *records: tuple[str, str, bytes]) -> None:
        """`write`: one writer serves every query."""
        self.write(*records)

    def write(self, *records: tuple[str, str, bytes]) -> None:
        """Write (topic, key, value) records in one transaction: all of them or none."""
        producer = self._producer
        if producer is None:
            raise Fenced("this instance does not lead: it has no transactional producer")
        topics = ", ".join(sorted({topic for topic, _, _ in records}))
        outcome: list[KafkaError | None] = []
        try:
            producer.begin_transaction()
            for topic, key, value in records:
                producer.produce(topic, key=key.encode(), value=value,
                                 on_delivery=lambda err, _msg: outcome.append(err))
            # Control tuples are rare and must be durable before we wait for their ack, so
            # each write is its own transaction instead of a batch.
            producer.commit_transaction(self._timeout_s)
        except (KafkaException, BufferError) as exc:
            raise self._failed(topics, exc) from exc
        failed = [err for err in outcome if err is not None]
        if failed:
            raise DeliveryError(f"delivery to {topics} failed: {failed[0]}")

    def _failed(self, topic: str, exc: Exception) -> DeliveryError:
        error = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if error is not None and error.fatal():  # fenced by a newer leader (or worse)
            self._producer = None
            return Fenced(f"writing to {topic}: {error.str()}")
        if self._producer is not None and (error is None or error.txn_requires_abort()):
            try:
                self._producer.abort_transaction(self._timeout_s)
            except KafkaException as abort_exc:
                log.warning("could not abort a failed write's transaction: %s", abort_exc)
        return DeliveryError(f"could not write to {topic}: {exc}")

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self._timeout_s)
            self._producer = None


class ShardWriters:
    """One `KafkaWriter` per shard this instance leads, each under its shard's transactional id
    (`shards.transactional_id`): a query's records go through its shard's writer, the
    controller's own (`NO_QUERY`) through the lowest shard held. So a new leader of one shard
    fences that shard's earlier leader and no other, and a write for a shard this instance
    does not hold is `Fenced`."""

    def __init__(self, settings: KafkaSettings, shards: int,
                 delivery_timeout_s: float = 15.0) -> None:
        self._settings, self._shards, self._timeout_s = settings, shards, delivery_timeout_s
        self._held: dict[int, KafkaWriter] = {}

    def fence(self, shard: int) -> None:
        """Take the shard's transactional id over (`KafkaWriter.fence`)."""
        self.drop(shard)
        writer = KafkaWriter(self._settings, self._timeout_s,
                             transactional_id(self._settings.group_id, shard, self._shards))
        writer.fence()
        self._held[shard] = writer

    def drop(self, shard: int) -> None:
        """Stop writing for the shard (another instance leads it now)."""
        writer = self._held.pop(shard, None)
        if writer is not None:
            writer.close()

    def write_for(self, query_id: str, *records: tuple[str, str, bytes]) -> None:
        shard = (min(self._held, default=-1) if query_id == NO_QUERY
                 else shard_of(query_id, self._shards))
        writer = self._held.get(shard)
        if writer is None:
            raise Fenced(f"this instance does not lead the shard of {query_id or 'the controller'}"
                         f" ({describe([s for s in (shard,) if s >= 0], self._shards)})")
        try:
            writer.write(*records)
        except Fenced:
            self._held.pop(shard, None)
            raise

    def close(self) -> None:
        for shard in list(self._held):
            self.drop(shard)


class QueryWriter(Protocol):
    """Writes a query's records in one transaction (`KafkaWriter`, `ShardWriters`)."""

    def write_for(self, query_id: str, *records: tuple[str, str, bytes]) -> None: ...


class KafkaControlSink:
    """`ControlSink` keyed by query id and parameter: the control topic is compacted, so the
    last tuple per key survives for a restarted controller (a tuple that sets knobs `together`
    is keyed by its own; the job's state topic holds every knob's value in force). The
    topic has one partition, so all tuples keep their order whatever the key. A tuple's decision
    record goes to `decisions_topic` in the tuple's own transaction."""

    def __init__(self, writer: QueryWriter, topic: str, key: str,
                 decisions_topic: str | None = None) -> None:
        self._writer = writer
        self._topic = topic
        self._key = key.encode()
        self._decisions_topic = decisions_topic

    def send(self, control: ControlTuple, decision: Decision | None = None) -> None:
        """Signs every tuple: only holders of the key can reconfigure a job."""
        if not self._key:
            raise DeliveryError(NO_KEY)
        signed = auth.sign(control, self._key)
        records = [(self._topic, f"{control.query_id}/{control.parameter}",
                    codec_for(ControlTuple).encode(signed))]
        if decision is not None:
            if self._decisions_topic is None:
                raise ValueError("a decision record to send with a control tuple, and no "
                                 "decisions topic given to KafkaControlSink")
            records.append((self._decisions_topic, decision.query_id,
                            codec_for(Decision).encode(decision)))
        self._writer.write_for(control.query_id, *records)


class KafkaDecisionLog:
    """`DecisionLog` on the decisions topic, keyed by query id."""

    def __init__(self, writer: QueryWriter, topic: str) -> None:
        self._writer = writer
        self._topic = topic

    def write(self, decision: Decision) -> None:
        self._writer.write_for(decision.query_id, (self._topic, decision.query_id,
                                                   codec_for(Decision).encode(decision)))
