"""The effects the control loop needs, as small interfaces, plus the real clock.

Owns the port protocols `cycle` is written against. Implementations: `kafka.clients` (Kafka),
`fakes` (in memory, for tests and replays), `prom` (the observer). `decode_each` is the one
place a payload becomes a record on the way in, so a bad record is counted and skipped the
same way by every source.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable
from typing import Protocol, TypeVar

from controller.core.arrival import PartitionKey
from controller.core.model import QueryModel
from controller.core.outage import Outage
from controller.core.recovery import Recovered
from controller.errors import TemporaryError
from schemas import Ack, Codec, ControlTuple, Decision, DecodeError, TaskMetrics
from schemas.records import _Record

R = TypeVar("R", bound=_Record)

OnDecodeError = Callable[[DecodeError], None]
"""Told about every payload that did not decode, with topic, partition and offset filled in."""

RawMessage = tuple[bytes | None, str, int, int]
"""(payload, topic, partition, offset) as read from a topic."""


class DeliveryError(TemporaryError):
    """A write did not reach the broker; the loop logs it and tries again after a cooldown."""


class Fenced(DeliveryError):
    """A newer leader took over the writes: this instance no longer leads and must not write
    again before it is elected anew."""


class MetricsSource(Protocol):
    def behind_ms(self, now_ms: int) -> int:
        """How far behind the metrics topic the reader is at `now_ms`: 0 when it has read all
        that was published, else how long ago the newest record it read was published."""
        ...

    def poll(self, timeout_s: float) -> list[TaskMetrics]:
        """Metrics that arrived, waiting at most `timeout_s` for the first; never raises on a
        bad payload (it goes to the source's decode-error handler)."""
        ...

    def read_shards(self, held: frozenset[int], shards: int, now_ms: int) -> bool:
        """From now on read only the metrics of the queries of the `held` shards of `shards`,
        those of a shard newly held from the window back (as a starting controller reads its
        window back); True when it does, False when it reads every query's metrics as before
        (its topic cannot be divided so: `core.shards.read_partitions`). Raises
        `TemporaryError` when the broker cannot say where the window starts."""
        ...


class AckSource(Protocol):
    def poll(self, timeout_s: float) -> list[Ack]:
        """Acks written since the source was created, like `MetricsSource.poll`."""
        ...


class OffsetProbe(Protocol):
    def end_offsets(self, partitions: Collection[PartitionKey]) -> dict[PartitionKey, int]:
        """The end offset (of committed records) of each partition, as the broker has it now;
        a partition it could not answer for is left out. Raises `TemporaryError` when the
        broker cannot be asked at all."""
        ...


class ClusterStatus(Protocol):
    def free_cores(self) -> int | None:
        """The free cores of the shared cluster's live workers, as last read; returns at once
        (the reading is refreshed elsewhere). None while unknown or stale."""
        ...

    def readings(self) -> int:
        """Which reading the free cores are from, counted as readings begin (it grows with
        each good one): they are divided at each new one among the queries that wanted
        cores before it."""
        ...

    def reads_begun(self) -> int:
        """How many reads have begun: `readings` passes it only with a reading begun after
        now, which shows the executors a request applied now started (one under way may
        not)."""
        ...

    def read_soon(self) -> None:
        """A query came to want cores: read the status once the collection time has passed
        since the first such want, unless a reading is due sooner."""
        ...


class ControlSink(Protocol):
    def send(self, control: ControlTuple, decision: Decision | None = None) -> None:
        """Write one control tuple durably (returns once the broker has it), with the decision
        record that issued it when given: both or neither, so a controller killed between them
        cannot leave a tuple on the control topic that the audit log does not explain."""
        ...


class DecisionLog(Protocol):
    def write(self, decision: Decision) -> None:
        """Append one decision to the audit log."""
        ...


class Leadership(Protocol):
    """Which shards of the queries this controller instance leads (`kafka.lease`,
    `fakes.MemoryLeadership`); `core.shards` says which queries a shard holds.

    An instance reads the metrics of the shards it leads (`MetricsSource.read_shards`), or
    every query's where the metrics topic does not divide into the shards: then it models the
    queries of its shards every cycle, the others now and then. It writes only for its own.
    The loop asks `held` every cycle, calls `take_over` for the shards it was given, before
    its first write for them, and `give_up` for the shards taken from it."""

    shards: int
    """How many shards the queries are divided into (the same for every instance)."""

    def held(self) -> frozenset[int]:
        """The shards this instance holds the lease of now; returns at once."""
        ...

    def take_over(self, shards: frozenset[int], now_ms: int) -> Recovered:
        """Fence the writes of every earlier leader of `shards`, then read back what they did
        for those shards' queries. Raises `TemporaryError` when either cannot be done now (the
        loop leaves them unled and asks again next cycle)."""
        ...

    def give_up(self, shards: frozenset[int]) -> None:
        """Stop writing for `shards` (the group gave them to another instance)."""
        ...

    def release(self) -> None:
        """Give every shard up and rejoin as a follower (after this instance was fenced)."""
        ...


class Clock(Protocol):
    def now_ms(self) -> int: ...


class LoopObserver(Protocol):
    """What the loop reports as it goes (in production Prometheus and, with an endpoint, the
    live page; nothing in most tests)."""

    def metrics_received(self, count: int) -> None: ...
    def behind(self, seconds: float, judging: bool) -> None: ...
    def modelled(self, model: QueryModel, desired: int | None) -> None: ...
    def decided(self, query_id: str, action: str, reason: str, at_ms: int) -> None: ...
    def acked(self, query_id: str, outcome: str, pause_ms: int) -> None: ...
    def ack_timed_out(self, query_id: str) -> None: ...
    def recommended(self, action: str) -> None:
        """Advice given (counted by action only: how often, not for whom)."""
        ...
    def lost(self, query_ids: list[str]) -> None:
        """The queries reported lost this cycle (all of them, every cycle)."""
        ...
    def down(self, action: str, query_ids: list[str]) -> None:
        """The queries whose job said it runs no query (`Down`: 'stopped' or 'halted'), every
        cycle, once per action."""
        ...
    def outage(self, query_id: str, outage: Outage) -> None:
        """A query that processes nothing this cycle (lost, stopped or halted): the backlog
        and arrival the broker holds for it, in place of the model's figures."""
        ...
    def standbys(self, query_id: str, count: int) -> None:
        """How many live standby instances the query has (every cycle)."""
        ...
    def probe_failed(self) -> None:
        """An end-offset probe of the broker failed."""
        ...
    def leadership(self, instance_id: str, led: int, shards: int, since_ms: int) -> None:
        """The number of shards this instance leads, of `shards`, changed (and once at
        start); 0: it leads none."""
        ...
    def forget(self, query_ids: Collection[str]) -> None:
        """Queries this instance no longer reads (their shards passed to another instance):
        their series go."""
        ...


class NullObserver:
    def behind(self, seconds: float, judging: bool) -> None:
        pass

    def metrics_received(self, count: int) -> None:
        pass

    def modelled(self, model: QueryModel, desired: int | None) -> None:
        pass

    def decided(self, query_id: str, action: str, reason: str, at_ms: int) -> None:
        pass

    def acked(self, query_id: str, outcome: str, pause_ms: int) -> None:
        pass

    def ack_timed_out(self, query_id: str) -> None:
        pass

    def recommended(self, action: str) -> None:
        pass

    def lost(self, query_ids: list[str]) -> None:
        pass

    def down(self, action: str, query_ids: list[str]) -> None:
        pass

    def outage(self, query_id: str, outage: Outage) -> None:
        pass

    def standbys(self, query_id: str, count: int) -> None:
        pass

    def probe_failed(self) -> None:
        pass

    def leadership(self, instance_id: str, led: int, shards: int, since_ms: int) -> None:
        pass

    def forget(self, query_ids: Collection[str]) -> None:
        pass


class Observers:
    """Several observers as one (Prometheus and the live page): each call goes to every one,
    in order."""

    def __init__(self, *observers: LoopObserver) -> None:
        self._observers = observers

    def metrics_received(self, count: int) -> None:
        for o in self._observers:
            o.metrics_received(count)

    def behind(self, seconds: float, judging: bool) -> None:
        for o in self._observers:
            o.behind(seconds, judging)

    def modelled(self, model: QueryModel, desired: int | None) -> None:
        for o in self._observers:
            o.modelled(model, desired)

    def decided(self, query_id: str, action: str, reason: str, at_ms: int) -> None:
        for o in self._observers:
            o.decided(query_id, action, reason, at_ms)

    def acked(self, query_id: str, outcome: str, pause_ms: int) -> None:
        for o in self._observers:
            o.acked(query_id, outcome, pause_ms)

    def ack_timed_out(self, query_id: str) -> None:
        for o in self._observers:
            o.ack_timed_out(query_id)

    def recommended(self, action: str) -> None:
        for o in self._observers:
            o.recommended(action)

    def lost(self, query_ids: list[str]) -> None:
        for o in self._observers:
            o.lost(query_ids)

    def down(self, action: str, query_ids: list[str]) -> None:
        for o in self._observers:
            o.down(action, query_ids)

    def outage(self, query_id: str, outage: Outage) -> None:
        for o in self._observers:
            o.outage(query_id, outage)

    def standbys(self, query_id: str, count: int) -> None:
        for o in self._observers:
            o.standbys(query_id, count)

    def probe_failed(self) -> None:
        for o in self._observers:
            o.probe_failed()

    def leadership(self, instance_id: str, led: int, shards: int, since_ms: int) -> None:
        for o in self._observers:
            o.leadership(instance_id, led, shards, since_ms)

    def forget(self, query_ids: Collection[str]) -> None:
        for o in self._observers:
            o.forget(query_ids)


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


def decode_each(codec: Codec[R], messages: Iterable[RawMessage],
                on_error: OnDecodeError) -> list[R]:
    """Decode what decodes; hand every failure, with its position, to `on_error`."""
    records = []
    for payload, topic, partition, offset in messages:
        try:
            records.append(codec.decode(payload, topic=topic, partition=partition,
                                        offset=offset))
        except DecodeError as exc:
            on_error(exc)
    return records


def ignore_decode_error(error: DecodeError) -> None:
    """Default handler for tests that feed only good records."""
