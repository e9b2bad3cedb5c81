"""What the broker says, between batches: the end offsets of the source partitions, probed.

Owns the history of end-offset probes (`ProbeLog`, one for all queries: a source topic may feed
several) and what one query reads from it: arrival intervals timed by the probes rather than by
batch starts (`intervals`). Pure: the loop probes the broker (`controller.loop.ports.OffsetProbe`)
about once a second and passes the recent probes to `model.evaluate`.

Why: a batch reports the latest offsets it planned against, so the batches alone tell the
controller about a load step only when the batch running during the step has ended — 7-11 s
when backlogged. The broker knows at once; a probe costs one ListOffsets request.

The backlog too, mid-batch (`running_backlog`), when the job's liveness beat says which batch
runs and where it was planned to end: what waits at the broker beyond that plan, less the
arrivals since the plan that wait for the next trigger by design. A batch that ends says the
same of itself (`model.backlog_records`: its lag plus its overrun's arrivals), seconds later.
The reference must be the running batch's plan: measured beyond the newest *finished* batch
(an earlier try, before the beats), it counted the running batch's own records as waiting and
grew by about λ per second until that batch reported, which set off a scale-up on a job that
kept up. The probe's time is the controller's clock and the plan's the job's: on one machine
the same; across machines their skew, times λ, is the error.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from operator import gt, sub
from types import MappingProxyType
from typing import cast

from controller.core.arrival import Interval, PartitionKey
from controller.core.memo import Memo
from schemas import TaskMetrics


@dataclass(frozen=True, slots=True)
class EndOffsets:
    """One probe: the end offset of each partition asked for, at one moment (controller's
    clock). A partition the broker did not answer for is missing."""

    at_ms: int
    offsets: Mapping[PartitionKey, int]

    def covers(self, keys: Collection[PartitionKey]) -> bool:
        return self.offsets.keys() >= (keys if isinstance(keys, AbstractSet) else set(keys))


def end_offsets(at_ms: int, offsets: Mapping[PartitionKey, int]) -> EndOffsets:
    """A probe whose mapping cannot change under the log that keeps it."""
    return EndOffsets(at_ms, MappingProxyType(dict(offsets)))


class ProbeLog:
    """Recent probes, oldest first, at most `window_s` old (by the newest one)."""

    def __init__(self, window_s: float) -> None:
        self._window_ms = int(window_s * 1000)
        self._probes: deque[EndOffsets] = deque()

    def add(self, probe: EndOffsets) -> None:
        if self._probes and probe.at_ms <= self._probes[-1].at_ms:
            return  # a clock that stepped back: keep the history monotonic
        self._probes.append(probe)
        while self._probes[0].at_ms < probe.at_ms - self._window_ms:
            self._probes.popleft()

    def fresh(self, now_ms: int, max_age_s: float) -> tuple[EndOffsets, ...]:
        """Every probe kept, if the newest is at most `max_age_s` old; else none (the broker
        stopped answering: the model falls back on the batches rather than on stale news)."""
        if not self._probes or self._probes[-1].at_ms < now_ms - max_age_s * 1000:
            return ()
        return tuple(self._probes)


class Wanted:
    """The source partitions the queries' newest samples name: what to probe. Each sample's
    partitions are listed once, when it becomes its query's newest, and the whole set is
    gathered again only when a query's partitions changed: at a thousand partitions a query,
    gathering them every cycle cost more than the model. Shown one sample per query (the
    loop's windows' newest)."""

    def __init__(self) -> None:
        self._of: dict[str, tuple[TaskMetrics, frozenset[PartitionKey]]] = {}
        self._all: frozenset[PartitionKey] = frozenset()

    def of(self, newest: Iterable[TaskMetrics]) -> frozenset[PartitionKey]:
        """Every partition `newest` (each query's newest sample) names."""
        kept, changed = self._of, False
        named: set[str] = set()
        for sample in newest:
            named.add(sample.query_id)
            before = kept.get(sample.query_id)
            if before is not None and before[0] is sample:
                continue
            partitions = frozenset((p.topic, p.partition) for p in sample.partitions)
            changed = changed or before is None or before[1] != partitions
            kept[sample.query_id] = (sample, partitions)
        if len(named) != len(kept):
            for gone in kept.keys() - named:
                del kept[gone]
            changed = True
        if changed:
            self._all = frozenset().union(*(partitions for _, partitions in kept.values()))
        return self._all


def covering(probes: Sequence[EndOffsets], keys: Collection[PartitionKey],
             memo: Memo | None = None) -> list[EndOffsets]:
    """The probes that answered for every one of `keys` (none when `keys` is empty)."""
    if not keys:
        return []
    asked = frozenset(keys)
    covered = (memo or Memo()).each(lambda p: p.covers(asked), probes, ("covers", asked))
    if all(covered):  # the usual case: every probe asked for every partition
        return list(probes)
    return [p for p, covers in zip(probes, covered, strict=True) if covers]


def intervals(probes: Sequence[EndOffsets], keys: Collection[PartitionKey],
              memo: Memo | None = None) -> list[Interval]:
    """Growth of Σ end offset over `keys` between consecutive probes that cover them all. A
    shrinking offset (topic recreated) counts as no growth, as for the batches. `memo` keeps
    what each probe and pair gave while they stay in the log."""
    memo, asked = memo or Memo(), frozenset(keys)
    if not asked:
        return []
    # One order of the keys for every probe's column while they are kept: an equal set built
    # anew may iterate in another.
    ordered = memo.carried(lambda: tuple(asked), ("key order", asked))
    columns = memo.each(lambda probe: _Column.of(probe, ordered), probes, ("columns", asked))
    return list(memo.pairs(_grown, [c for c in columns if c is not None]))


@dataclass(frozen=True, slots=True)
class _Column:
    """One probe's end offsets of one query's partitions, in one order, and their sum."""

    at_ms: int
    offsets: tuple[int, ...]
    total: int

    @staticmethod
    def of(probe: EndOffsets, keys: tuple[PartitionKey, ...]) -> _Column | None:
        """None when the probe did not answer for every one of `keys`."""
        found = tuple(map(probe.offsets.get, keys))
        if None in found:
            return None
        offsets = cast(tuple[int, ...], found)
        return _Column(probe.at_ms, offsets, sum(offsets))


def _grown(before: _Column, after: _Column) -> Interval:
    """Per key in C (a thousand partitions a query): the growth, none where it shrank."""
    if any(map(gt, before.offsets, after.offsets)):
        records = sum(step for step in map(sub, after.offsets, before.offsets) if step > 0)
    else:
        records = after.total - before.total
    return Interval(before.at_ms, after.at_ms, records)


@dataclass(frozen=True, slots=True)
class RunningPlan:
    """A batch the job runs now, as its beat tells it: when it was planned (the job's clock)
    and the end offset each source partition was planned to reach."""

    batch_id: int
    planned_at_ms: int
    ends: Mapping[PartitionKey, int]
    rows: int = 0
    """Records the batch was planned to read (0: its start offsets unknown)."""


def running_plan(beat: TaskMetrics | None, samples: Sequence[TaskMetrics]) -> RunningPlan | None:
    """The plan of the batch `beat` says is running, if none of the window's `samples` (oldest
    first) reported it yet and the beat comes from the newest one's instance and configuration;
    else None (between batches, or a beat without the offsets: a checkpoint it cannot read)."""
    if beat is None or not beat.running_partitions or not samples:
        return None
    newest = samples[-1]
    reported = max(s.batch_id for s in samples)  # an idle heartbeat's id is -1
    if (beat.running_batch_id <= reported
            or (beat.instance_id, beat.config_epoch) != (newest.instance_id,
                                                          newest.config_epoch)):
        return None
    return RunningPlan(beat.running_batch_id, beat.running_since_ms, MappingProxyType(
        {(p.topic, p.partition): p.end_offset for p in beat.running_partitions}),
        sum(p.end_offset - p.start_offset for p in beat.running_partitions
            if 0 <= p.start_offset <= p.end_offset))


@dataclass(frozen=True, slots=True)
class RunningBacklog:
    at_ms: int
    """The probe's time."""
    records: float


def running_backlog(probes: Sequence[EndOffsets], plan: RunningPlan, arrival_rate: float,
                    trigger_s: float) -> RunningBacklog | None:
    """B at the newest probe taken after `plan` that covers its partitions: the records
    beyond the plan, less the arrivals since it was planned up to one trigger interval's
    (those wait for the next trigger as a matter of course, as in `model.backlog_records`)."""
    probe = next((p for p in reversed(probes)
                  if p.at_ms >= plan.planned_at_ms and p.covers(plan.ends.keys())), None)
    if probe is None:
        return None
    beyond = sum(max(0, probe.offsets[k] - end) for k, end in plan.ends.items())
    since_s = (probe.at_ms - plan.planned_at_ms) / 1000
    return RunningBacklog(probe.at_ms, max(0.0, beyond - arrival_rate * min(since_s, trigger_s)))
