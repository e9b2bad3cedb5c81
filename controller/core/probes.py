"""What the broker says, between batches: the end offsets of the source partitions, probed.

Owns the history of end-offset probes (`ProbeLog`, one for all queries: a source topic may feed
several) and what one query reads from it: arrival intervals timed by the probes rather than by
batch starts (`intervals`). Pure: the loop probes the broker (`controller.loop.ports.OffsetProbe`)
about once a second and passes the recent probes to `model.evaluate`.

Why: a batch reports the latest offsets it planned against, so the batches alone tell the
controller about a load step only when the batch running during the step has ended — 7-11 s
when backlogged. The broker knows at once; a probe costs one ListOffsets request.

The backlog stays the batches' figure. Measured at each probe as what waits at the broker
beyond the newest finished batch, less one batch cycle's arrivals, it drifted upwards by
about λ per second on the real closed loop while the job kept up (the cause is not traced),
and taken as a backlog it set off a scale-up; so probes time λ and nothing else.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from types import MappingProxyType

from controller.core.arrival import Interval, PartitionKey
from schemas import TaskMetrics


@dataclass(frozen=True, slots=True)
class EndOffsets:
    """One probe: the end offset of each partition asked for, at one moment (controller's
    clock). A partition the broker did not answer for is missing."""

    at_ms: int
    offsets: Mapping[PartitionKey, int]

    def covers(self, keys: Collection[PartitionKey]) -> bool:
        return all(k in self.offsets for k in keys)


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


def wanted(samples: Iterable[TaskMetrics]) -> set[PartitionKey]:
    """The source partitions the queries' newest samples name: what to probe."""
    return {(p.topic, p.partition) for s in samples for p in s.partitions}


def covering(probes: Sequence[EndOffsets], keys: Collection[PartitionKey]) -> list[EndOffsets]:
    """The probes that answered for every one of `keys` (none when `keys` is empty)."""
    return [p for p in probes if keys and p.covers(keys)]


def intervals(probes: Sequence[EndOffsets], keys: Collection[PartitionKey]) -> list[Interval]:
    """Growth of Σ end offset over `keys` between consecutive probes that cover them all. A
    shrinking offset (topic recreated) counts as no growth, as for the batches."""
    found = []
    for before, after in pairwise(covering(probes, keys)):
        grown = sum(max(0, after.offsets[k] - before.offsets[k]) for k in keys)
        found.append(Interval(before.at_ms, after.at_ms, grown))
    return found
