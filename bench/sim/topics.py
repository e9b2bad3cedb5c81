"""Topics of the simulation: end offsets over time, and how a batch takes from them.

Owns the two kinds of topic a simulated job reads — written by producers following a profile
(`ExternalTopic`) or by an upstream job at its commits (`PipeTopic`) — and `plan`, how Spark's
Kafka source prorates a batch cap over the partitions by their lag. Neighbours: `model` (the
jobs read and write them), `run` (wires them into a pipeline).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Protocol

from bench.sim.profiles import Profile


class Topic(Protocol):
    name: str
    partitions: int

    def end_offsets(self, t_ms: int) -> list[int]:
        """Per partition, the end offset at `t_ms` (records written before it)."""
        ...


@dataclass
class ExternalTopic:
    """Written by producers following a profile, spread evenly over the partitions."""

    name: str
    partitions: int
    profile: Profile

    def end_offsets(self, t_ms: int) -> list[int]:
        return spread(int(self.profile.produced(t_ms / 1000)), self.partitions)

    def produced(self, t_ms: int) -> int:
        return int(self.profile.produced(t_ms / 1000))


@dataclass
class PipeTopic:
    """Written by an upstream job at its commits; readers see only what was written before."""

    name: str
    partitions: int
    _times: list[int] = field(default_factory=lambda: [0])
    _totals: list[int] = field(default_factory=lambda: [0])

    def append(self, t_ms: int, records: int) -> None:
        if records <= 0:
            return
        self._times.append(t_ms)
        self._totals.append(self._totals[-1] + records)

    def end_offsets(self, t_ms: int) -> list[int]:
        return spread(self.produced(t_ms), self.partitions)

    def produced(self, t_ms: int) -> int:
        return self._totals[bisect_right(self._times, t_ms) - 1]


def spread(total: int, partitions: int) -> list[int]:
    """Keyed records spread evenly: partition p holds the p-th share of `total`."""
    base, extra = divmod(total, partitions)
    return [base + (1 if p < extra else 0) for p in range(partitions)]


def plan(lag: list[int], cap: int) -> list[int]:
    """Records per partition of the next batch, as Spark's Kafka source rate-limits: the cap
    prorated by each partition's share of the lag (rounded down, a sliver rounded up)."""
    total = sum(lag)
    if total <= cap:
        return list(lag)
    take = []
    for size in lag:
        prorate = cap * size / total
        take.append(min(size, math.ceil(prorate) if prorate < 1 else math.floor(prorate)))
    return take
