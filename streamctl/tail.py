"""Follows streamctl's own topics (metrics, acks, decisions) for the demo and the e2e tests.

Partitions are assigned directly (no consumer group join), from the end or the beginning, so
a watcher sees records within milliseconds of starting. Garbage is counted and reported with
its position, never raised.

Its consumer is held by a `streamctl.fetch_guard.FetchGuard`: a client stuck after a broker
restart (confluentinc/librdkafka#5153; seen here in the broker-restart fault test, where the
watcher saw no record for 240 s while the job and the controller had long resumed, and
assigning the partitions again did not bring it back) is replaced by a new one where it was.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    TopicPartition,
)

from controller.kafka.clients import KafkaSetupError, offsets_at, watermarks
from schemas import DecodeError, codec_for
from schemas.records import _Record
from streamctl.fetch_guard import STALL_CHECK_S, FetchGuard
from streamctl.security.kafka import PLAINTEXT, KafkaSecurity, client_config

UNKNOWN_TOPIC_WAIT_S = 5.0
"""How long a topic the metadata does not list yet may take to appear (propagation to every
broker of a cluster after its creation) before the tail says it is not available."""



@dataclass
class Tail:
    bootstrap_servers: str
    record_types: Mapping[str, type[_Record]]  # topic -> record type on it
    from_beginning: bool = False
    start_at_ms: int | None = None
    """Start at the first record stamped at or after this time (wins over from_beginning)."""
    client_log_level: int = 3
    """librdkafka's own log (syslog levels); 0 for commands that report errors themselves."""
    stall_check_s: float = STALL_CHECK_S
    """How often the tail checks for records it should be fetching (`FetchGuard`)."""
    security: KafkaSecurity = PLAINTEXT
    decode_errors: list[DecodeError] = field(default_factory=list)
    _partitions: dict[str, list[int]] = field(default_factory=dict)
    _starts: list[TopicPartition] = field(default_factory=list)
    """Where the current consumer was assigned to start, per partition."""
    _next: dict[tuple[str, int], int] = field(default_factory=dict)
    """Per partition, the offset after the last record delivered."""

    def __post_init__(self) -> None:
        self._guard = FetchGuard(self._new_consumer, "tail", self._read_up_to,
                                 stall_check_s=self.stall_check_s)
        start = OFFSET_BEGINNING if self.from_beginning else OFFSET_END
        assignment = [TopicPartition(topic, p, start)
                      for topic in self.record_types for p in self.partitions(topic)]
        if self.start_at_ms is not None:
            assignment = offsets_at(self._consumer, assignment, self.start_at_ms, 10.0)
        # Concrete offsets, so a stall check can tell a partition waiting to be read from one
        # with nothing new since the start (read_committed: its end is the last stable offset).
        self._starts = [self._resolve(p) for p in assignment]
        self._guard.assign(self._starts)

    @property
    def _consumer(self) -> Consumer:
        return self._guard.consumer

    @property
    def fetch_restarts(self) -> int:
        """How many times a stalled consumer was replaced."""
        return self._guard.fetch_restarts

    def _read_up_to(self) -> dict[tuple[str, int], int]:
        """Per partition, the offset after the last record delivered (where the current
        consumer started, before any)."""
        return {(s.topic, s.partition): max(s.offset, self._next.get((s.topic, s.partition), -1))
                for s in self._starts}

    def _new_consumer(self) -> Consumer:
        return Consumer(client_config(self.bootstrap_servers, self.security, **{
            "group.id": f"streamctl-tail-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            # Only where a position is gone (retention deleted it): nothing skipped.
            "auto.offset.reset": "earliest",
            "log_level": self.client_log_level,
        }))

    def _resolve(self, start: TopicPartition) -> TopicPartition:
        if start.offset >= 0:
            return start
        # A topic just created has no leader for a moment: `watermarks` waits it out.
        low, high = watermarks(self._consumer, start.topic, start.partition, 10.0)
        return TopicPartition(start.topic, start.partition,
                              low if start.offset == OFFSET_BEGINNING else high)

    def partitions(self, topic: str) -> list[int]:
        if topic not in self._partitions:
            self._partitions[topic] = self._listed_partitions(topic)
        return self._partitions[topic]

    def _listed_partitions(self, topic: str) -> list[int]:
        """The topic's partitions as the metadata lists them. A topic just created on a
        cluster is unknown to the other brokers for a moment: that is waited out for
        `UNKNOWN_TOPIC_WAIT_S`, then it is an error."""
        deadline = time.monotonic() + UNKNOWN_TOPIC_WAIT_S
        while True:
            meta = self._consumer.list_topics(topic, timeout=10).topics[topic]
            if meta.error is None:
                return sorted(meta.partitions)
            if (meta.error.code() != KafkaError.UNKNOWN_TOPIC_OR_PART
                    or time.monotonic() >= deadline):
                raise RuntimeError(f"topic {topic!r} is not available: {meta.error}")
            time.sleep(0.2)

    def poll(self, timeout_s: float = 0.2, max_records: int = 500) -> list[tuple[str, _Record]]:
        messages = self._consumer.consume(max_records, timeout_s)
        out: list[tuple[str, _Record]] = []
        for msg in messages:
            if msg.error() is not None:
                continue  # partition EOF and transient errors: librdkafka retries itself
            topic = msg.topic() or ""
            self._next[(topic, msg.partition() or 0)] = (msg.offset() or 0) + 1
            try:
                record = codec_for(self.record_types[topic]).decode(
                    msg.value(), topic=topic, partition=msg.partition(), offset=msg.offset())
            except DecodeError as err:
                self.decode_errors.append(err)
                continue
            out.append((topic, record))
        delivered = {(m.topic() or "", m.partition() or 0) for m in messages if m.error() is None}
        # A new consumer starts where the old one stopped (`FetchGuard.mind`).
        self._starts = self._guard.mind(delivered, len(messages) < max_records) or self._starts
        return out

    def end_offsets(self, partitions: Iterable[tuple[str, int]],
                    timeout_s: float = 2.0) -> dict[tuple[str, int], int]:
        """The end offset (high watermark) of each partition the broker answers for now; one
        it does not (no such topic, no leader) is left out."""
        found: dict[tuple[str, int], int] = {}
        unknown: set[str] = set()
        for topic, partition in sorted(partitions):
            if topic in unknown:
                continue
            try:
                found[(topic, partition)] = watermarks(self._consumer, topic, partition,
                                                       timeout_s)[1]
            except KafkaSetupError:
                unknown.add(topic)  # its other partitions would wait as long for nothing
        return found

    def ends_now(self) -> dict[tuple[str, int], int]:
        """The end offset of every partition the tail reads, as the broker answers now."""
        return self.end_offsets((s.topic, s.partition) for s in self._starts)

    def reached(self, ends: Mapping[tuple[str, int], int]) -> bool:
        """Whether the tail has read every partition up to `ends` (an earlier `ends_now`):
        its records, or past them (transaction markers, aborted records)."""
        positions = self._consumer.position(self._starts)
        return all(max(p.offset, s.offset, self._next.get((s.topic, s.partition), -1))
                   >= ends.get((s.topic, s.partition), 0)
                   for s, p in zip(self._starts, positions, strict=True))

    def log_end_total(self, topic: str) -> int:
        """Σ of the partitions' end offsets (high watermarks) of `topic`, read now."""
        return sum(watermarks(self._consumer, topic, p, 5.0)[1] for p in self.partitions(topic))

    def close(self) -> None:
        self._guard.close()
