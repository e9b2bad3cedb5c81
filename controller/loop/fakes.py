"""In-memory implementations of every port in `controller.loop.ports`.

Topics are lists of encoded payloads, so the fakes go through the same codec and the same
decode-error path as `kafka.clients`; the port contract test runs against both. `MemoryBus` bundles
the four controller topics with job-side helpers (publish metrics and acks, read what the
controller sent) for loop tests and offline replays.
"""

from __future__ import annotations

import sys
from bisect import bisect_left
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace

from controller.core.recovery import History, Recovered, recorded_memories, recover
from controller.core.shards import NO_QUERY, shard_of
from controller.errors import TemporaryError
from controller.loop.ports import (
    Fenced,
    OnDecodeError,
    PartitionKey,
    RawMessage,
    decode_each,
    ignore_decode_error,
)
from schemas import Ack, ControlTuple, Decision, TaskMetrics, codec_for, topics


@dataclass
class MemoryTopic:
    """A single-partition topic: offsets are list indexes. A record's key and timestamp are
    kept beside it (`keys`, `stamps_ms`: None and 0 when not given)."""

    name: str
    payloads: list[bytes | None] = field(default_factory=list)
    keys: list[str | None] = field(default_factory=list)
    stamps_ms: list[int] = field(default_factory=list)

    def append(self, payload: bytes | None, key: str | None = None, stamp_ms: int = 0) -> None:
        self.payloads.append(payload)
        self.keys.append(key)
        self.stamps_ms.append(stamp_ms)

    def clear(self) -> None:
        self.payloads.clear()
        self.keys.clear()
        self.stamps_ms.clear()

    def read(self, position: int) -> list[RawMessage]:
        return [(p, self.name, 0, offset)
                for offset, p in enumerate(self.payloads[position:], start=position)]


class MemoryMetricsSource:
    """With a `clock`, an empty poll advances it by `timeout_s`, as a real wait would, so a
    loop bounded by `timeout_s` ends on a fake clock too. `max_records` caps what one poll
    returns (the Kafka source's batch), so a test can hold a reader behind its topic; a
    record's publication time is its `batch_end_ms`, as the jobs stamp it. With `read_back_s`
    it divides as a topic of one partition per shard would (`read_shards`): a record is read
    when its key's shard is held, and a shard newly held is read back from the first record
    stamped `read_back_s` before; without, it reads every record."""

    def __init__(self, topic: MemoryTopic, *, from_beginning: bool = False,
                 on_decode_error: OnDecodeError = ignore_decode_error,
                 clock: FakeClock | None = None, max_records: int | None = None,
                 read_back_s: float | None = None) -> None:
        self._topic = topic
        self._position = 0 if from_beginning else len(topic.payloads)
        self._on_error = on_decode_error
        self._clock = clock
        self._max_records = max_records
        self._newest_read_ms: int | None = None
        self._read_back_s = read_back_s
        self._held: tuple[frozenset[int], int] | None = None
        """The shards read and their count, once divided."""
        self._reading_back: list[int] = []
        """Offsets of the gained shards' records still to read back."""

    def read_shards(self, held: frozenset[int], shards: int, now_ms: int) -> bool:
        if self._read_back_s is None or shards == 1:
            return False
        gained = held - self._held[0] if self._held is not None else held
        self._held = held, shards
        if gained:
            since = bisect_left(self._topic.stamps_ms, now_ms - int(self._read_back_s * 1000),
                                hi=self._position)
            self._reading_back = sorted({*self._reading_back, *(
                offset for offset in range(since, self._position)
                if self._shard(offset) in gained)})
        self._reading_back = [o for o in self._reading_back if self._shard(o) in held]
        return True

    def _reads(self, offset: int) -> bool:
        """Whether the record at `offset` is of a shard read (every record, undivided)."""
        key = self._topic.keys[offset]
        return self._held is None or key is None or self._shard(offset) in self._held[0]

    def _shard(self, offset: int) -> int:
        key, held = self._topic.keys[offset], self._held
        return -1 if key is None or held is None else shard_of(key, held[1])

    def poll(self, timeout_s: float) -> list[TaskMetrics]:
        payloads = self._topic.payloads
        room = sys.maxsize if self._max_records is None else self._max_records
        back = self._reading_back[:room]
        del self._reading_back[:room]
        ahead = range(self._position, min(len(payloads), self._position + room - len(back)))
        self._position = ahead.stop
        messages: list[RawMessage] = [(payloads[o], self._topic.name, 0, o)
                                      for o in (*back, *filter(self._reads, ahead))]
        if not messages and self._clock is not None:
            self._clock.advance(timeout_s)
        records = decode_each(codec_for(TaskMetrics), messages, self._on_error)
        if records:
            self._newest_read_ms = records[-1].batch_end_ms
        return records

    def behind_ms(self, now_ms: int) -> int:
        if ((self._position >= len(self._topic.payloads) and not self._reading_back)
                or self._newest_read_ms is None):
            return 0
        return max(0, now_ms - self._newest_read_ms)


class MemoryAckSource:
    """Sees acks appended after it was created, like the Kafka one assigned at the end."""

    def __init__(self, topic: MemoryTopic,
                 on_decode_error: OnDecodeError = ignore_decode_error) -> None:
        self._topic = topic
        self._position = len(topic.payloads)
        self._on_error = on_decode_error

    def poll(self, timeout_s: float) -> list[Ack]:
        messages = self._topic.read(self._position)
        self._position += len(messages)
        return decode_each(codec_for(Ack), messages, self._on_error)


def _unguarded(query_id: str) -> None:
    pass


class MemoryControlSink:
    """`guard` raises `Fenced` when the writer may no longer write for the query
    (`MemoryLeadership`)."""

    def __init__(self, topic: MemoryTopic, guard: Callable[[str], None] = _unguarded,
                 decisions: MemoryTopic | None = None) -> None:
        self._topic = topic
        self._guard = guard
        self._decisions = decisions

    def send(self, control: ControlTuple, decision: Decision | None = None) -> None:
        self._guard(control.query_id)
        self._topic.append(codec_for(ControlTuple).encode(control))
        if decision is not None:
            assert self._decisions is not None, "a decision to send and no decisions topic"
            self._decisions.append(codec_for(Decision).encode(decision))


class MemoryDecisionLog:
    def __init__(self, topic: MemoryTopic, guard: Callable[[str], None] = _unguarded) -> None:
        self._topic = topic
        self._guard = guard

    def write(self, decision: Decision) -> None:
        self._guard(decision.query_id)
        self._topic.append(codec_for(Decision).encode(decision))


class MemoryLease:
    """The lease of each shard that several `MemoryLeadership`s compete for: a test moves it
    (`holders`, or `holder` for every shard at once); `generations` count each shard's
    take-overs, as its transactional id's epoch does on the broker."""

    def __init__(self, holder: str | None = None, shards: int = 1) -> None:
        self.shards = shards
        self.holders: dict[int, str | None] = dict.fromkeys(range(shards), holder)
        self.generations: dict[int, int] = {}

    @property
    def holder(self) -> str | None:
        """The holder of every shard (None when they differ or none has one)."""
        found = set(self.holders.values())
        return found.pop() if len(found) == 1 else None

    @holder.setter
    def holder(self, instance: str | None) -> None:
        self.holders = dict.fromkeys(range(self.shards), instance)


class MemoryLeadership:
    """`Leadership` of `instance` over `lease`, recovering from `bus`. `believes` makes it
    answer `held` with a stale belief (a frozen leader that woke up); its writes through
    `guard` are refused for a shard another instance took over since its own take-over."""

    def __init__(self, lease: MemoryLease, instance: str, bus: MemoryBus, *,
                 issuer: str = "streamctl-controller", cooldown_s: float = 30.0,
                 ack_timeout_s: float = 90.0) -> None:
        self._lease, self.instance, self._bus = lease, instance, bus
        self._issuer, self._cooldown_s, self._ack_timeout_s = issuer, cooldown_s, ack_timeout_s
        self._generations: dict[int, int] = {}
        self.believes: frozenset[int] | None = None
        self.releases = 0
        self.shards = lease.shards

    def held(self) -> frozenset[int]:
        if self.believes is not None:
            return self.believes
        return frozenset(s for s, holder in self._lease.holders.items()
                         if holder == self.instance)

    def take_over(self, shards: frozenset[int], now_ms: int) -> Recovered:
        for shard in shards:
            generation = self._lease.generations.get(shard, 0) + 1
            self._lease.generations[shard] = self._generations[shard] = generation
        history = History(tuple(self._bus.sent_controls()), tuple(self._bus.acks_published()),
                          tuple(self._bus.written_decisions()))
        ours = history.of(lambda q: shard_of(q, self._lease.shards) in shards)
        recovered = recover(ours, now_ms, issuer=self._issuer, cooldown_s=self._cooldown_s,
                            ack_timeout_s=self._ack_timeout_s)
        return replace(recovered, remembered=recorded_memories(ours.decisions))

    def give_up(self, shards: frozenset[int]) -> None:
        for shard in shards:
            self._generations.pop(shard, None)

    def release(self) -> None:
        self.releases += 1
        self._generations.clear()
        self.believes = None
        for shard, holder in self._lease.holders.items():
            if holder == self.instance:
                self._lease.holders[shard] = None

    def guard(self, query_id: str) -> None:
        shard = (min(self._generations, default=-1) if query_id == NO_QUERY
                 else shard_of(query_id, self._lease.shards))
        mine = self._generations.get(shard)
        if mine is None or mine != self._lease.generations.get(shard):
            raise Fenced(f"{self.instance} was fenced on shard {shard} (generation {mine}, "
                         f"the lease's {self._lease.generations.get(shard)})")


class MemoryEndOffsets:
    """`OffsetProbe` over what a test sets (`ends`) and the memory topics it tracks (a
    single-partition topic ends at its length); `down` makes every probe fail."""

    def __init__(self, *tracked: MemoryTopic) -> None:
        self.ends: dict[PartitionKey, int] = {}
        self._tracked = {t.name: t for t in tracked}
        self.down = False
        self.probes = 0

    def end_offsets(self, partitions: Collection[PartitionKey]) -> dict[PartitionKey, int]:
        self.probes += 1
        if self.down:
            raise TemporaryError("the broker is down (fake)")
        # Looked up once each, not merged: a fleet's thousands of partitions were copied
        # every probe.
        found = {k: v for k, v in zip(partitions, map(self.ends.get, partitions), strict=True)
                 if v is not None}
        for name, topic in self._tracked.items():
            if (name, 0) in partitions:
                found[(name, 0)] = len(topic.payloads)
        return found


class FakeClock:
    """Time that moves only when a test says so."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.ms = start_ms

    def now_ms(self) -> int:
        return self.ms

    def advance(self, seconds: float) -> None:
        self.ms += int(seconds * 1000)


class MemoryBus:
    """The controller's four topics in memory, seen from both ends."""

    def __init__(self) -> None:
        self.metrics = MemoryTopic(topics.METRICS)
        self.control = MemoryTopic(topics.CONTROL)
        self.acks = MemoryTopic(topics.ACKS)
        self.decisions = MemoryTopic(topics.DECISIONS)

    def publish_metrics(self, *records: TaskMetrics) -> None:
        for record in records:
            self.metrics.append(codec_for(TaskMetrics).encode(record), key=record.query_id,
                                stamp_ms=record.batch_end_ms)

    def publish_ack(self, ack: Ack) -> None:
        self.acks.append(codec_for(Ack).encode(ack))

    def sent_controls(self) -> list[ControlTuple]:
        return [codec_for(ControlTuple).decode(p) for p in self.control.payloads]

    def written_decisions(self) -> list[Decision]:
        return [codec_for(Decision).decode(p) for p in self.decisions.payloads]

    def acks_published(self) -> list[Ack]:
        return [codec_for(Ack).decode(p) for p in self.acks.payloads]


class MemoryCluster:
    """A shared cluster's status as a test sets it (`ports.ClusterStatus`): each `read` is a
    new reading; `soon` counts the loop's requests for one."""

    def __init__(self, free: int | None) -> None:
        self.free = free
        self._readings = 0 if free is None else 1
        self.soon = 0

    def read(self, free: int | None) -> None:
        self.free = free
        self._readings += free is not None

    def free_cores(self) -> int | None:
        return self.free

    def readings(self) -> int:
        return self._readings

    def reads_begun(self) -> int:
        return self._readings  # a test's reading is taken when it is set

    def read_soon(self) -> None:
        self.soon += 1
