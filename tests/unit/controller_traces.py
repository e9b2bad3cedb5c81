"""Metric traces for controller tests: a tiny simulation of a Spark query reading Kafka.

Records arrive at a piecewise-constant rate spread over the partitions (evenly, or with a share
on partition 0); each micro-batch plans against the latest offsets at its start, takes at most
`max_per_batch` records, and is busy for rows / (μ × units) seconds plus a fixed overhead (and,
for the first batch with rows, an optional warm-up). Batches run back to back when there is
more to read, otherwise on the trigger; an idle query reports only every 10 s, as Spark does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from schemas import Role, SourcePartition, TaskMetrics

T0_MS = 1_700_000_000_000


@dataclass(frozen=True)
class Job:
    rates: Sequence[tuple[float, float]]
    """(from second, records/s) steps of the arrival rate."""
    per_unit: float
    parallelism: int
    partitions: int = 2
    task_slots: int = 16
    max_per_batch: int = 10_000_000
    trigger_s: float = 1.0
    overhead_s: float = 0.0
    query_id: str = "q1"
    instance_id: str = "i1"
    epoch: int = 0
    report_cap: bool = False
    """Fill max_offsets_per_trigger with `max_per_batch` (jobs since the field exists do)."""
    warm_up_s: float = 0.0
    """Extra busy time of the first batch with rows (Spark's start-up of a run)."""
    source_topic: str = "in"
    sink_topic: str = "out"
    skew: float = 0.0
    """Share of the records that go to partition 0 on top of an even spread (0: even)."""

    def produced(self, t_s: float) -> float:
        total, steps = 0.0, [*self.rates, (float("inf"), 0.0)]
        for (start, rate), (end, _) in pairwise(steps):
            if t_s > start:
                total += rate * (min(t_s, end) - start)
        return total

    def latest(self, t_s: float) -> list[int]:
        total = int(self.produced(t_s))
        hot = int(total * self.skew)
        base, extra = divmod(total - hot, self.partitions)
        return [base + (1 if p < extra else 0) + (hot if p == 0 else 0)
                for p in range(self.partitions)]

    @property
    def units(self) -> int:
        return min(max(self.parallelism, self.partitions), self.task_slots)


def simulate(job: Job, seconds: float, *, start_s: float = 0.0,
             positions: list[int] | None = None, first_batch: int = 0) -> list[TaskMetrics]:
    """Batches of `job` from `start_s` for `seconds`, reading on from `positions`."""
    pos = list(positions) if positions is not None else [0] * job.partitions
    t, batch, out, last_report = start_s, first_batch, [], start_s - 10
    started = False
    while t < start_s + seconds:
        latest = job.latest(t)
        take = [min(latest[p] - pos[p], job.max_per_batch // job.partitions)
                for p in range(job.partitions)]
        rows = sum(take)
        busy = rows / (job.per_unit * job.units) + job.overhead_s
        if rows > 0 and not started:
            busy, started = busy + job.warm_up_s, True
        if rows > 0 or t - last_report >= 10:
            out.append(metrics(job, batch, t, busy, pos, take, latest))
            batch, last_report = batch + 1, t
        pos = [pos[p] + take[p] for p in range(job.partitions)]
        # A processing-time trigger: the next batch starts on the next tick, or at once when
        # this one overran it (back to back, the backlogged case).
        t += max(busy, job.trigger_s)
    return out


def metrics(job: Job, batch: int, t_s: float, busy_s: float, pos: list[int], take: list[int],
            latest: list[int]) -> TaskMetrics:
    start_ms = T0_MS + int(t_s * 1000)
    return TaskMetrics(
        query_id=job.query_id, instance_id=job.instance_id, role=Role.ACTIVE,
        config_epoch=job.epoch, batch_id=batch, batch_start_ms=start_ms,
        batch_end_ms=start_ms + int(busy_s * 1000), trigger_interval_ms=int(job.trigger_s * 1000),
        input_rows=sum(take), output_rows=sum(take), busy_ms=int(busy_s * 1000),
        partitions=tuple(
            SourcePartition(job.source_topic, p, pos[p], pos[p] + take[p], latest[p])
            for p in range(job.partitions)),
        input_parallelism=job.parallelism, state_partitions=0, task_slots=job.task_slots,
        source_topics=(job.source_topic,), sink_topics=(job.sink_topic,),
        max_offsets_per_trigger=job.max_per_batch if job.report_cap else 0,
    )


def end_ms(trace: list[TaskMetrics]) -> int:
    return trace[-1].batch_end_ms
