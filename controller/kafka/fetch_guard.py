"""A directly assigned librdkafka consumer can stop fetching for good after a broker restart
(confluentinc/librdkafka#5153, open; assigning again may not help, a new consumer does).
`why_stalled` tells when a consumer is stuck; `FetchGuard` holds the consumer of a long-lived
source (the controller's metrics and acks) and replaces it when the same stall is seen at two
checks in a row. `streamctl.tail` makes the same check; the job's control consumer has its own
copy (`streaming_jobs.runtime.kafka`): the two processes import nothing of each other.
Neighbours: `clients` (the sources that use it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

log = logging.getLogger("controller.kafka")

STALL_CHECK_S = 5.0
"""Quiet time (no record delivered) after which a directly assigned consumer asks whether it is
stuck (`why_stalled`), and again after each further such quiet time. Long enough that a check
(one ListOffsets round trip per partition) costs nothing beside a busy topic's fetches; short
enough that a stuck metrics consumer, replaced at the second check, is replaced well inside
`lost_after_min_s` (25 s), the least silence after which the controller judges a query lost
and fails it over, and a stuck ack consumer well inside `ack_timeout_s` (90 s by default)."""



class FetchGuard:
    """The consumer of a long-lived, directly assigned source, replaced by a new one when its
    fetch stalled (confluentinc/librdkafka#5153): after each `stall_check_s` in which no
    record arrived it asks `why_stalled`, and on the same stall at two such checks in a row
    puts a consumer of the same configuration in its place, assigned at the positions
    reached, counted (`fetch_restarts`, `on_fetch_restart`) and logged.

    The source keeps its own account of what it read (`read`) and takes the consumer of the
    moment from `consumer` at each use: a replacement changes it.
    """

    def __init__(self, config: Mapping[str, Any], role: str, topic: str,
                 read: Callable[[], Mapping[int, int]], *, stall_check_s: float = STALL_CHECK_S,
                 on_fetch_restart: Callable[[str], None] = lambda topic: None) -> None:
        """`config`: the consumer's, each replacement's too; `role` names the consumer in the
        log lines; `topic` is the one it reads; `read()`: per partition assigned, the offset
        after the newest record the source read (where it was assigned, before any);
        `on_fetch_restart(topic)`: each time a stalled consumer is replaced."""
        self._config = dict(config)
        self._name, self._topic, self._read = f"{role} consumer", topic, read
        self._stall_check_s, self._on_fetch_restart = stall_check_s, on_fetch_restart
        self._consumer = Consumer(self._config)
        self._quiet_since = time.monotonic()
        self._suspected: list[tuple[int, int]] | None = None
        """The positions at which the last check found a stall: a second check finding one at
        the same positions replaces the consumer. One check alone cannot tell a stuck consumer
        from a record that landed a moment before it asked."""
        self.fetch_restarts = 0
        """How many times a stalled consumer was replaced (`why_stalled`)."""

    @property
    def consumer(self) -> Consumer:
        """The consumer of the moment."""
        return self._consumer

    def assign(self, starts: list[TopicPartition]) -> None:
        """Assign the consumer at `starts`; the first quiet time counts from here."""
        self._consumer.assign(starts)
        # Not from construction: the set-up's look-ups before this may take seconds.
        self._quiet_since = time.monotonic()

    def mind_the_quiet(self, delivered: bool) -> list[TopicPartition]:
        """After each poll (`delivered`: it brought a record): the positions a new consumer
        took over at, when a quiet time ended in a stall, else []. The source must count
        what it read as up to them: until the new consumer delivers, its position may say
        nothing, and what the old one passed (transaction markers) must not look like records
        waiting at the next check."""
        # Only records count: a stuck client may still hand out errors.
        now = time.monotonic()
        if delivered:
            self._quiet_since, self._suspected = now, None
            return []
        if now - self._quiet_since < self._stall_check_s:
            return []
        self._quiet_since = now
        return self._restart_stalled_fetch()

    def _restart_stalled_fetch(self) -> list[TopicPartition]:
        """A new consumer, of the same configuration, assigned at the positions reached, in
        place of one that fetches nothing while records wait or whose client cannot say; the
        positions, or [] when it stays. One that cannot be assigned leaves the old in place
        until the next quiet time: a poll never fails the cycle for it."""
        reached = self._reached_positions()
        why = why_stalled(self._consumer, reached)
        seen = [(tp.partition, tp.offset) for tp in reached]
        if not why or seen != self._suspected:
            self._suspected = seen if why else None
            return []
        fresh = Consumer(self._config)
        try:
            fresh.assign(reached)
        except KafkaException as exc:
            fresh.close()
            log.warning("%s: %s, and a new consumer could not take over (%s)", self._name,
                        why, exc)
            return []
        self._consumer.close()
        self._consumer, self._suspected = fresh, None
        self.fetch_restarts += 1
        self._on_fetch_restart(self._topic)
        # Self-healing and counted (`on_fetch_restart`): info, not a warning.
        log.info("%s: %s, and no record arrived for %.0f s: a new consumer goes on from the "
                 "positions reached", self._name, why, 2 * self._stall_check_s)
        return reached

    def _reached_positions(self) -> list[TopicPartition]:
        """Per partition read, where reading goes on: after the newest record read (before
        any, where it was assigned), or the consumer's position if further (it also counts
        what read_committed skipped: aborted records, transaction markers). Neither skips
        nor repeats a record."""
        read = [TopicPartition(self._topic, p, after) for p, after in sorted(self._read().items())]
        return [TopicPartition(self._topic, r.partition, max(r.offset, at.offset))
                for r, at in zip(read, self._consumer.position(read), strict=True)]

    def close(self) -> None:
        self._consumer.close()


def why_stalled(consumer: Consumer, reached: Collection[TopicPartition],
                timeout_s: float = 2.0) -> str:
    """Why a directly assigned `consumer` should be replaced by a new one
    (confluentinc/librdkafka#5153): records wait behind the positions it has `reached`, or its
    client cannot say (a stuck client answers nothing; during a real outage a new one waits
    for the broker as the old one would). "" when neither.

    The end offsets are the consumer's own ListOffsets, so in its own isolation level: for
    read_committed (librdkafka's default, which the consumers here keep) the last stable
    offset, so records of an open transaction are not taken for a stall. Each partition is
    asked once, for `timeout_s`, without retries: the caller checks again after its next
    quiet time."""
    try:
        waiting = [p for p in reached if _records_wait(consumer, p, timeout_s)]
    except KafkaException as exc:
        return f"its client cannot read the end offsets ({exc})"
    return ("records wait on " + ", ".join(f"{p.topic}[{p.partition}]@{p.offset}"
                                           for p in waiting)) if waiting else ""


def _records_wait(consumer: Consumer, reached: TopicPartition, timeout_s: float) -> bool:
    low, end = consumer.get_watermark_offsets(TopicPartition(reached.topic, reached.partition),
                                              timeout=timeout_s)
    # Past the log start too: a position still OFFSET_BEGINNING (nothing read yet), or one
    # that retention deleted, has records waiting only if the partition holds any.
    return int(end) > max(reached.offset, int(low))
