"""What the broker says, between batches: the end offsets of the source partitions, probed.

Owns the history of end-offset probes (`ProbeLog`, one for all queries: a source topic may feed
several) and what one query reads from it: arrival intervals timed by the probes rather than by
batch starts (`intervals`), and the backlog as it stands at each probe (`backlog_at`). Pure:
the loop probes the broker (`controller.loop.ports.OffsetProbe`) about once a second and passes
the recent probes to `model.evaluate`.

Why: a batch reports the latest offsets it planned against, so the batches alone tell the
controller about a load step only when the batch running during the step has ended — 7-11 s
when backlogged. The broker knows at once; a probe costs one ListOffsets request.

The backlog at a probe P is measured, not extrapolated: the excess is what waits at the broker
beyond the newest batch that had ended by P (R), minus what a query that keeps up holds as a
matter of course — the arrivals of one batch cycle (max(trigger, busy)) plus those arriving
while its next batch runs (busy); the backlog is how far the newest excess has grown above the
calmest one in the window (`grown_backlog`), and never less than the batches' own figure
(`model.backlog_records`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from types import MappingProxyType

from controller.core.arrival import Interval
from schemas import TaskMetrics

PartitionKey = tuple[str, int]


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


def grown_backlog(series: Sequence[tuple[int, float]]) -> float:
    """The newest excess above the calmest one of the series: what piled up since then.

    Measured as growth, so that whatever the broker counts and the batches never read
    (transaction markers and aborted records of a transactional producer, a skipped
    format) cancels out instead of passing for a backlog; a backlog as old as the whole
    window is the batches' to report (their lag), which stays the floor."""
    return series[-1][1] - min(excess for _, excess in series) if series else 0.0


def taken_offsets(sample: TaskMetrics) -> dict[PartitionKey, int]:
    """Where the batch left each partition (its end offsets), where it read one."""
    return {(p.topic, p.partition): p.end_offset for p in sample.partitions if p.end_offset >= 0}


def excess_at(probe: EndOffsets, newest: TaskMetrics, arrival: float) -> float | None:
    """Records waiting at `probe` beyond what a query that keeps up holds (module docstring);
    None when the batch `newest` took none of the probed partitions it reads."""
    taken = taken_offsets(newest)
    keys = [k for k in taken if k in probe.offsets]
    if not keys:
        return None
    waiting = sum(max(0, probe.offsets[k] - taken[k]) for k in keys)
    busy_s = newest.busy_ms / 1000
    held = arrival * (max(newest.trigger_interval_ms / 1000, busy_s) + busy_s)
    return max(0.0, waiting - held)


def excess_series(probes: Sequence[EndOffsets], samples: Sequence[TaskMetrics],
                   arrival: float) -> list[tuple[int, float]]:
    """(probe time, excess) for each probe, each against the newest batch that had ended by
    then (a probe older than every batch says nothing about this query)."""
    ended = sorted((s for s in samples if s.batch_id >= 0), key=lambda s: s.batch_end_ms)
    series = []
    position = -1
    for probe in probes:
        while position + 1 < len(ended) and ended[position + 1].batch_end_ms <= probe.at_ms:
            position += 1
        if position < 0:
            continue
        found = excess_at(probe, ended[position], arrival)
        if found is not None:
            series.append((probe.at_ms, found))
    return series
