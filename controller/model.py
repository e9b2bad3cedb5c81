"""The rate model: per query, what arrives, what it can process, and what is left behind.

Owns the estimates λ (arrival rate), μ (processing rate per unit of parallelism), capacity,
backlog B and its trend, from the samples of one `window.QueryWindow`. Pure: samples in,
`QueryModel` or `NotReady` out. `policy` sizes the query from a `QueryModel`.

Conventions: times are the jobs' batch timestamps; rates are records per second; a "unit" is
one concurrently running source task, i.e. the input parallelism as far as it can take effect
(not below the number of Kafka partitions, which Spark reads at least one task each, and not
above the task slots, beyond which tasks queue instead of running).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import pairwise

from controller.results import NotReady
from controller.settings import ModelSettings
from schemas import SourcePartition, TaskMetrics

PartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class QueryModel:
    """The model's figures for one query at one moment."""

    query_id: str
    samples: int
    config_epoch: int
    arrival_rate: float
    """λ, records/s: growth of Σ latest_offset over the newest `arrival_window_s`."""
    throughput: float
    """Records/s actually processed over the window (Σ input_rows / elapsed)."""
    busy_ratio: float
    """Σ busy time / elapsed wall time, in [0, 1]."""
    rate_per_unit: float
    """μ, records per busy second per unit of parallelism."""
    parallelism: int
    """input_parallelism in force (newest sample)."""
    units: int
    """Units that actually run at once (see the module docstring)."""
    source_partitions: int
    task_slots: int
    backlog_records: float
    backlog_trend_records_per_s: float
    """Least-squares slope of the per-sample backlog over the newest `arrival_window_s`."""
    time_to_drain_s: float
    """B / (capacity − λ); 0 without backlog, infinite when arrivals meet capacity."""

    @property
    def capacity(self) -> float:
        """Records/s the query processes at 100 % busy with its current units."""
        return self.rate_per_unit * self.units

    @property
    def utilisation(self) -> float:
        return self.arrival_rate / self.capacity if self.capacity > 0 else math.inf

    def figures(self) -> dict[str, float]:
        """The numbers behind a decision, as written to the decision log."""
        return {
            "arrival_rate": self.arrival_rate, "throughput": self.throughput,
            "busy_ratio": self.busy_ratio, "processing_rate_per_unit": self.rate_per_unit,
            "capacity": self.capacity, "utilisation": self.utilisation,
            "backlog": self.backlog_records, "backlog_trend": self.backlog_trend_records_per_s,
            "time_to_drain_s": self.time_to_drain_s, "parallelism": float(self.parallelism),
            "units": float(self.units), "source_partitions": float(self.source_partitions),
            "task_slots": float(self.task_slots), "samples": float(self.samples),
        }


def effective_units(parallelism: int, source_partitions: int, task_slots: int) -> int:
    """Tasks that run at once for a given input parallelism (see the module docstring)."""
    units = max(parallelism, source_partitions, 1)
    return min(units, task_slots) if task_slots > 0 else units


def _known(sample: TaskMetrics) -> dict[PartitionKey, SourcePartition]:
    # -1 marks an offset the source did not know (first batch, empty partition).
    return {(p.topic, p.partition): p for p in sample.partitions if p.latest_offset >= 0}


def arrival_rate(samples: tuple[TaskMetrics, ...]) -> float | None:
    """λ from the growth of each partition's latest offset between consecutive samples.

    Only partitions known in both samples of a pair count, and only pairs with such partitions
    count towards the elapsed time, so a heartbeat without offsets or a partition that appears
    later does not fake a burst. A shrinking offset (topic recreated) counts as no growth.
    """
    grown, span_ms = 0, 0
    for before, after in pairwise(samples):
        old, new = _known(before), _known(after)
        common = old.keys() & new.keys()
        dt_ms = after.batch_start_ms - before.batch_start_ms
        if dt_ms <= 0 or not common:
            continue
        grown += sum(max(0, new[k].latest_offset - old[k].latest_offset) for k in common)
        span_ms += dt_ms
    return grown * 1000 / span_ms if span_ms > 0 else None


def rate_per_unit(samples: tuple[TaskMetrics, ...]) -> float | None:
    """μ = Σ input_rows / Σ (busy_s × units), over batches that processed rows.

    Weighting busy time by each batch's units keeps μ right across a window that straddles a
    parallelism change; with constant parallelism it is Σ rows / Σ busy_s / units.
    """
    rows, unit_seconds = 0, 0.0
    for s in samples:
        if s.input_rows > 0 and s.busy_ms > 0:
            rows += s.input_rows
            unit_seconds += s.busy_ms / 1000 * _units_of(s)
    return rows / unit_seconds if unit_seconds > 0 else None


def _units_of(sample: TaskMetrics) -> int:
    partitions = len({(p.topic, p.partition) for p in sample.partitions})
    return effective_units(sample.input_parallelism, partitions, sample.task_slots)


def lag_records(sample: TaskMetrics) -> int:
    """Σ (latest − end): what the batch left behind when it was planned (capped batches)."""
    return sum(
        max(0, p.latest_offset - p.end_offset)
        for p in sample.partitions
        if p.latest_offset >= 0 and p.end_offset >= 0
    )


def backlog_records(sample: TaskMetrics, arrival: float) -> float:
    """B after `sample`: its lag plus what arrived while it ran (λ × busy time).

    The batch planned against `latest_offset` at its start, so records that arrived during its
    busy time are not in `latest − end` yet; λ × busy_s estimates them. It ignores arrivals
    since the batch ended, which are small when batches run back to back (the backlogged case).
    """
    return lag_records(sample) + arrival * sample.busy_ms / 1000


def slope_per_s(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x (x in seconds); 0 when x does not vary."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((x - mean_x) ** 2 for x, _ in points)
    if var == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / var


def time_to_drain_s(backlog: float, capacity: float, arrival: float) -> float:
    if backlog <= 0:
        return 0.0
    return backlog / (capacity - arrival) if capacity > arrival else math.inf


def evaluate(
    query_id: str, samples: tuple[TaskMetrics, ...], settings: ModelSettings
) -> QueryModel | NotReady:
    """The model of one query from its window, or why there is none yet."""
    if len(samples) < settings.min_samples:
        return NotReady(f"only {len(samples)} samples, need {settings.min_samples}")
    elapsed_ms = samples[-1].batch_end_ms - samples[0].batch_start_ms
    if elapsed_ms <= 0:
        return NotReady("the window's batches span no time")
    recent = newest_span(samples, settings.arrival_window_s, settings.min_samples)
    arrival = arrival_rate(recent)
    if arrival is None:
        return NotReady("no partition offsets in consecutive samples yet; arrival rate unknown")
    per_unit = rate_per_unit(samples)
    if per_unit is None:
        return NotReady("no batch with input rows in the window; processing rate unknown")
    return _build(query_id, samples, recent, elapsed_ms, arrival, per_unit)


def newest_span(samples: tuple[TaskMetrics, ...], span_s: float,
                at_least: int) -> tuple[TaskMetrics, ...]:
    """The newest samples that started within `span_s` of the newest one, but at least
    `at_least` of them (an idle query reports only every ~10 s)."""
    horizon = samples[-1].batch_start_ms - span_s * 1000
    inside = sum(1 for s in samples if s.batch_start_ms >= horizon)
    return samples[-max(inside, at_least):]


def _build(
    query_id: str, samples: tuple[TaskMetrics, ...], recent: tuple[TaskMetrics, ...],
    elapsed_ms: int, arrival: float, per_unit: float,
) -> QueryModel:
    newest = samples[-1]
    partitions = len({(p.topic, p.partition) for p in newest.partitions})
    units = _units_of(newest)
    backlog = backlog_records(newest, arrival)
    trend = slope_per_s([(s.batch_start_ms / 1000, backlog_records(s, arrival))
                         for s in recent])
    return QueryModel(
        query_id=query_id, samples=len(samples), config_epoch=newest.config_epoch,
        arrival_rate=arrival,
        throughput=sum(s.input_rows for s in samples) * 1000 / elapsed_ms,
        busy_ratio=min(1.0, sum(s.busy_ms for s in samples) / elapsed_ms),
        rate_per_unit=per_unit, parallelism=newest.input_parallelism, units=units,
        source_partitions=partitions, task_slots=newest.task_slots,
        backlog_records=backlog, backlog_trend_records_per_s=trend,
        time_to_drain_s=time_to_drain_s(backlog, per_unit * units, arrival),
    )
