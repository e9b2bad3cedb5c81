"""Follows streamctl's own topics (metrics, acks, decisions) for the demo and the e2e tests.

Partitions are assigned directly (no consumer group join), from the end or the beginning, so
a watcher sees records within milliseconds of starting. Garbage is counted and reported with
its position, never raised.

A directly assigned librdkafka consumer can stop fetching for good after a broker restart
(confluentinc/librdkafka#5153, open; seen here in the broker-restart fault test: the watcher
saw no record for 240 s while the job and the controller had long resumed, and assigning the
partitions again did not bring it back). The workaround that issue gives is a new consumer. So
each time a poll has returned no record for `stall_check_s`, the tail asks for each
partition's end offset (`controller.kafka.fetch_guard.why_stalled`, the check the controller's
consumers make too) and, if records wait behind the same positions at two such checks in a
row, or its client cannot answer at either, replaces its consumer with a new one assigned at
the positions it has reached: that neither skips nor repeats a record.
"""

from __future__ import annotations

import logging
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

from controller.kafka.clients import KafkaSetupError, watermarks
from controller.kafka.fetch_guard import STALL_CHECK_S, why_stalled
from schemas import DecodeError, codec_for
from schemas.records import _Record
from streamctl.security.kafka import PLAINTEXT, KafkaSecurity, client_config

UNKNOWN_TOPIC_WAIT_S = 5.0
"""How long a topic the metadata does not list yet may take to appear (propagation to every
broker of a cluster after its creation) before the tail says it is not available."""

log = logging.getLogger(__name__)


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
    """Quiet time after which the tail checks for records it should be fetching (see above):
    long enough that a check costs nothing on a busy topic, short against a test's budget."""
    security: KafkaSecurity = PLAINTEXT
    decode_errors: list[DecodeError] = field(default_factory=list)
    fetch_restarts: int = 0
    """How many times a stalled consumer was replaced."""
    _partitions: dict[str, list[int]] = field(default_factory=dict)
    _starts: list[TopicPartition] = field(default_factory=list)
    """Where the current consumer was assigned to start, per partition."""
    _next: dict[tuple[str, int], int] = field(default_factory=dict)
    """Per partition, the offset after the last record delivered."""
    _quiet_since: float = field(default_factory=time.monotonic)
    _suspected: list[tuple[str, int, int]] | None = None
    """The positions at which the last check found a stall (see `_restart_stalled_fetch`)."""

    def __post_init__(self) -> None:
        self._consumer = self._new_consumer()
        start = OFFSET_BEGINNING if self.from_beginning else OFFSET_END
        assignment = [
            TopicPartition(topic, p, start if self.start_at_ms is None else self.start_at_ms)
            for topic in self.record_types
            for p in self.partitions(topic)
        ]
        if self.start_at_ms is not None:
            # A partition with nothing newer comes back at offset -1 (its end): start there.
            assignment = self._consumer.offsets_for_times(assignment, timeout=10)
        # Concrete offsets, so a stall check can tell a partition waiting to be read from one
        # with nothing new since the start (read_committed: its end is the last stable offset).
        self._starts = [self._resolve(p) for p in assignment]
        self._consumer.assign(self._starts)

    def _new_consumer(self) -> Consumer:
        return Consumer(client_config(self.bootstrap_servers, self.security, **{
            "group.id": f"streamctl-tail-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
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
        now = time.monotonic()
        # Only records count: a stuck client may still hand out errors.
        if any(msg.error() is None for msg in messages):
            self._quiet_since, self._suspected = now, None
        elif now - self._quiet_since >= self.stall_check_s:
            self._quiet_since = now
            self._restart_stalled_fetch()
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
        return out

    def _restart_stalled_fetch(self) -> None:
        """Replace the consumer with a new one at the positions reached when `why_stalled`
        finds records it does not fetch, or its client cannot say, at the same positions two
        quiet times in a row."""
        reached = self._reached_positions()
        why = why_stalled(self._consumer, reached)
        seen = [(tp.topic, tp.partition, tp.offset) for tp in reached]
        if not why or seen != self._suspected:  # once may be a record landing as it asked
            self._suspected = seen if why else None
            return
        self.fetch_restarts += 1
        # Self-healing and counted: info, not a warning on the user's console (the demo's).
        log.info("%s, and no record arrived for %.0f s: a new consumer goes on from the "
                 "positions reached", why, 2 * self.stall_check_s)
        self._consumer.close()
        self._consumer = self._new_consumer()
        self._consumer.assign(reached)
        self._starts, self._suspected = reached, None

    def _reached_positions(self) -> list[TopicPartition]:
        """Per partition, where reading goes on: past the last record delivered, or the
        consumer's position if further (it also counts what read_committed skipped: aborted
        records, transaction markers), and never before where this consumer started."""
        return [TopicPartition(s.topic, s.partition, max(
                    p.offset, s.offset, self._next.get((s.topic, s.partition), s.offset)))
                for s, p in zip(self._starts, self._consumer.position(self._starts),
                                strict=True)]

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
        self._consumer.close()
