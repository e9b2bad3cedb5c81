"""The guard every process's long-lived, directly assigned consumers share.

A directly assigned librdkafka consumer can stop fetching a partition for good after a broker
restart (confluentinc/librdkafka#5153, open): assigning again may not help, a new consumer
does. `FetchGuard` holds the consumer of such a reader (the controller's metrics and acks, the
job's control tuples, the demo's and the tests' tail) and, every `stall_check_s`, asks the
broker about the partitions that delivered nothing since the last check: when records wait
behind one at the same position two checks in a row, or the client cannot answer either time,
it puts a new consumer in its place, assigned at the positions reached, so that nothing is
skipped or read twice. Per partition, because a broker restart strands only the partitions it
led, while the others may keep a reader busy.

Owns `FetchGuard`, `find_stall`. Neighbours: `controller.kafka.clients`,
`streaming_jobs.runtime.kafka`, `streamctl.tail` (its users).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

log = logging.getLogger(__name__)

Key = tuple[str, int]
"""A partition: its topic and number."""

STALL_CHECK_S = 5.0
"""How often the partitions that delivered nothing are asked about. Long enough that the
question (one ListOffsets round trip per quiet partition) costs nothing beside the fetches;
short enough that a stuck partition, replaced at the second or third check, is read again well
inside `lost_after_min_s` (25 s), the least silence after which the controller judges a query
lost and fails it over, and well inside the 90 s a control tuple waits for its ack."""

ASK_TIMEOUT_S = 2.0
"""How long one check may wait for the broker's answers, all partitions together: a check
runs inside the reader's poll, and during an outage it would otherwise wait per partition."""


@dataclass(frozen=True)
class Stall:
    at: frozenset[tuple[str, int, int]]
    """Where the reader stands (topic, partition, offset) on each partition with records
    waiting, or on each partition asked about when the client could not answer."""
    why: str


def find_stall(consumer: Consumer, reached: Sequence[TopicPartition],
               timeout_s: float = ASK_TIMEOUT_S) -> Stall | None:
    """Whether records wait behind the positions `consumer` has `reached`, or its client cannot
    say (a stuck client answers nothing; during a real outage a new one waits for the broker as
    the old one would); None when neither.

    The end offsets are the consumer's own ListOffsets, so in its own isolation level: for
    read_committed the last stable offset, so records of an open transaction are no stall."""
    deadline = time.monotonic() + timeout_s
    try:
        waiting = [p for p in reached
                   if _records_wait(consumer, p, max(0.1, deadline - time.monotonic()))]
    except KafkaException as exc:  # a timeout or a lost connection: the client's own trouble
        return Stall(_positions(reached), f"its client cannot read the end offsets ({exc})")
    if not waiting:
        return None
    return Stall(_positions(waiting), "records wait on " + ", ".join(
        f"{p.topic}[{p.partition}]@{p.offset}" for p in waiting))


_NOT_THE_CLIENTS = frozenset({KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
                              KafkaError.UNKNOWN_TOPIC_OR_PART})
"""Answers about the cluster, not the client: a partition without a leader for now, or gone.
A new consumer would not fetch it either, so it is no stall."""


def _positions(partitions: Iterable[TopicPartition]) -> frozenset[tuple[str, int, int]]:
    return frozenset((p.topic, p.partition, p.offset) for p in partitions)


def _records_wait(consumer: Consumer, reached: TopicPartition, timeout_s: float) -> bool:
    try:
        low, end = consumer.get_watermark_offsets(
            TopicPartition(reached.topic, reached.partition), timeout=timeout_s)
    except KafkaException as exc:
        if exc.args and isinstance(exc.args[0], KafkaError) \
                and exc.args[0].code() in _NOT_THE_CLIENTS:
            return False
        raise
    # Past the log start too: a position still OFFSET_BEGINNING (nothing read yet), or one
    # that retention deleted, has records waiting only if the partition holds any.
    return int(end) > max(reached.offset, int(low))


class FetchGuard:
    """The consumer of a long-lived, directly assigned reader, replaced when a partition's
    fetch stalled (see the module). The reader keeps its own account of what it read
    (`read`), tells the guard after each poll which partitions delivered (`mind`), and takes
    the consumer of the moment from `consumer` at each use: a replacement changes it."""

    def __init__(self, make: Callable[[], Consumer], role: str,
                 read: Callable[[], Mapping[Key, int]], *, stall_check_s: float = STALL_CHECK_S,
                 on_fetch_restart: Callable[[], None] = lambda: None) -> None:
        """`make()`: a new consumer, unassigned (the first one, and each replacement); `role`
        names the reader in the log lines; `read()`: per partition assigned, the offset after
        the newest record the reader read (where it was assigned, before any);
        `on_fetch_restart()`: each time a stalled consumer is replaced."""
        self._make, self._name, self._read = make, role, read
        self._stall_check_s, self._on_fetch_restart = stall_check_s, on_fetch_restart
        self._consumer = make()
        self._checked_at = time.monotonic()
        self._delivered: set[Key] = set()
        """The partitions that delivered a record since the last check."""
        self._suspected: frozenset[tuple[str, int, int]] = frozenset()
        """Where the last check found a stall: a second check finding one there replaces the
        consumer. One check alone cannot tell a stuck partition from a record that landed a
        moment before it asked."""
        self.fetch_restarts = 0
        """How many times a stalled consumer was replaced."""

    @property
    def consumer(self) -> Consumer:
        """The consumer of the moment."""
        return self._consumer

    def assign(self, starts: list[TopicPartition]) -> None:
        """Assign the consumer at `starts`; the first check comes a `stall_check_s` later (a
        reader that assigns its consumer itself has its first check timed from the guard's
        making)."""
        self._consumer.assign(starts)
        # Not from construction: the set-up's look-ups before this may take seconds.
        self._checked_at = time.monotonic()

    def mind(self, delivered: Iterable[Key], drained: bool = True) -> list[TopicPartition]:
        """After each poll, the partitions it brought records of, and whether it took all the
        client held (`drained`: a poll that filled its batch may have left fetched records
        behind, which a check would take for records not fetched): when two checks in a row
        found a partition stuck at the same position, the positions the new consumer took over
        at, else []. The reader must count what it read as up to them: until the new consumer
        delivers, its position says nothing, and what the old one passed (transaction markers)
        must not look like records waiting at the next check."""
        self._delivered.update(delivered)  # only records count: a stuck client still errs
        now = time.monotonic()
        if not drained or now - self._checked_at < self._stall_check_s:
            return []
        self._checked_at = now
        quiet = {key: offset for key, offset in self._read().items()
                 if key not in self._delivered}
        self._delivered = set()
        stall = find_stall(self._consumer, self._reached(quiet)) if quiet else None
        if stall is None or not stall.at & self._suspected:
            self._suspected = frozenset() if stall is None else stall.at
            return []
        return self._replace(stall.why)

    def _replace(self, why: str) -> list[TopicPartition]:
        """A new consumer assigned at the positions reached on every partition; them, or []
        when it could not be assigned (the old one stays until the next check: a poll never
        fails for it)."""
        reached = self._reached(self._read())
        fresh = self._make()
        try:
            # Incremental: a reader that assigns partitions added later does so incrementally.
            fresh.incremental_assign(reached)
        except KafkaException as exc:
            fresh.close()
            log.warning("%s consumer: %s, and a new consumer could not take over (%s)",
                        self._name, why, exc)
            return []
        old, self._consumer, self._suspected = self._consumer, fresh, frozenset()
        self.fetch_restarts += 1
        self._on_fetch_restart()
        # Self-healing and counted: info, not a warning on the user's console (the demo's).
        log.info("%s consumer: %s, at two checks %.0f s apart: a new consumer goes on from the "
                 "positions reached", self._name, why, self._stall_check_s)
        try:
            old.close()
        except (KafkaException, RuntimeError) as exc:  # a stuck client may fail to close too
            log.warning("%s consumer: the stuck consumer did not close cleanly (%s)",
                        self._name, exc)
        return reached

    def _reached(self, read: Mapping[Key, int]) -> list[TopicPartition]:
        """Per partition of `read`, where reading goes on: after the newest record read
        (where it was assigned, before any), or the consumer's position if further (it also
        counts what read_committed skipped: aborted records, transaction markers). Neither
        skips nor repeats a record: both count only what was handed to the reader."""
        asked = [TopicPartition(topic, p, offset) for (topic, p), offset in sorted(read.items())]
        return [TopicPartition(a.topic, a.partition, max(a.offset, at.offset))
                for a, at in zip(asked, self._consumer.position(asked), strict=True)]

    def close(self) -> None:
        self._consumer.close()
