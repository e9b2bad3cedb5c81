"""What a query's window of batches says on its own: no probe, no liveness beat, no arrival rate.

Owns the per-batch figures (`lag_records`, `batch_concurrency`, the rate points μ and c are
fitted on, the batch cap) and `Batches`, their summary over a window: the figures of the
`model.QueryModel` that come from the batches alone, and what the model needs of them besides.
Pure. `model.evaluate` summarises a window through the query's `memo.Memo` (`Memo.whole`), so
the summary is derived again only when a batch joins or leaves the window — every second or
two at a 1 s trigger, every minute for an idle query — while the probes, which arrive every
cycle, are read each cycle.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from controller.core import parallelism
from controller.core.arrival import Interval, Latest, PartitionKey, intervals, latest, steps
from controller.core.fit import BatchCost, BatchPoint, fitted_cost
from controller.core.memo import Memo
from controller.core.shedding import observed_shedding
from controller.settings import ModelSettings
from schemas import TaskMetrics
from schemas.knobs import INPUT_PARALLELISM
from schemas.objectives import Objectives

SampleKey = tuple[str, int, int]
"""(instance, batch id, end time of a heartbeat else 0), as `window.sample_key`."""


def _key(sample: TaskMetrics) -> SampleKey:
    return (sample.instance_id, sample.batch_id,
            sample.batch_end_ms if sample.batch_id < 0 else 0)


@dataclass(frozen=True, slots=True)
class Batches:
    """A window of batches, summarised (`summarise`)."""

    recent: tuple[TaskMetrics, ...]
    """The newest samples within `arrival_window_s` (`newest_span`)."""
    recent_lags: tuple[int, ...]
    """`lag_records` of each of `recent`."""
    intervals: tuple[Interval, ...]
    """The arrival intervals between consecutive batches (`arrival.intervals`)."""
    known: frozenset[PartitionKey]
    """The partitions whose latest offset the newest batch knew: what the probes must cover."""
    points: tuple[BatchPoint, ...]
    """What μ and c are fitted on (`rate_points`)."""
    fitted: BatchCost | None
    """μ and c fitted on `points` (None: they cannot tell c from 1/μ, or none has rows;
    `model.evaluate` then charges the c it remembers: `fit.charged_cost`)."""
    rows_seen: bool
    """Whether any batch in the window read rows."""
    capped: tuple[BatchPoint, ...]
    """The rate points of the newest batches when the batch cap cut every one of them for
    `level_confirm_s` (`newest_capped`); else empty."""
    figures: Mapping[str, Any]
    """The `model.QueryModel` fields the batches alone give."""


def summarise(samples: tuple[TaskMetrics, ...], warm_up: Collection[SampleKey],
              remembered_cap: int, settings: ModelSettings, *, memo: Memo) -> Batches:
    """The summary of a window that passed `model.evaluate`'s readiness checks (at least one
    sample, spanning some time). What the newest batch alone gives, and what the newest
    `arrival_window_s` gives, are derived again only when they change (each can cost
    O(partitions)): an old batch leaving a window longer than that span changes neither."""
    newest = samples[-1]
    elapsed_ms = newest.batch_end_ms - samples[0].batch_start_ms
    recent = newest_span(samples, settings.arrival_window_s, settings.min_samples)
    points = rate_points(samples, warm_up, memo)
    rows = busy_ms = output_rows = 0
    worked: list[TaskMetrics] = []
    for sample in samples:  # one pass: a window holds a minute of batches, summed per batch
        rows += sample.input_rows
        busy_ms += sample.busy_ms
        output_rows += sample.output_rows
        if sample.input_rows > 0:
            worked = [sample]
    of_newest: Mapping[str, Any] = memo.whole(_newest_figures, samples[-1:])
    # Each sample's latest offsets, worked out once for the window (`arrival.intervals` reads
    # them too); the newest's and the recent ones' are its tail.
    latests = memo.each(latest, samples)
    recent_latests = latests[len(samples) - len(recent):]
    units = of_newest["units"]
    skew = units / memo.each(batch_concurrency, worked)[0] if worked else 1.0
    cap, cap_source = batch_cap(samples, remembered_cap, memo)
    figures = {
        **of_newest, **memo.whole(_recent_figures, recent, recent_latests),
        "samples": len(samples),
        "throughput": rows * 1000 / elapsed_ms,
        "busy_ratio": min(1.0, busy_ms / elapsed_ms),
        "batch_cap": cap, "batch_cap_source": cap_source,
        "selectivity": output_rows / rows if rows > 0 else 1.0,
        "task_skew": skew,
    }
    return Batches(
        recent=recent,
        recent_lags=tuple(memo.each(lag_records, samples)[len(samples) - len(recent):]),
        intervals=tuple(intervals(samples, memo)),
        known=memo.whole(_known, samples[-1:], latests[-1]), points=tuple(points),
        fitted=fitted_cost(points, settings), rows_seen=bool(worked),
        capped=newest_capped(samples, warm_up, settings.level_confirm_s, memo),
        figures=MappingProxyType(figures))


CAPPED_AT_LEAST = 3
"""Batches cut by the cap that measure μ on their own (`cost.capped_cost`), at least: as few
as a trend is believed from, each a full batch."""


def newest_capped(samples: tuple[TaskMetrics, ...], warm_up: Collection[SampleKey],
                  confirm_s: float, memo: Memo) -> tuple[BatchPoint, ...]:
    """`Batches.capped`: the rate points of the newest batches, at least `CAPPED_AT_LEAST` and
    spanning `confirm_s`, when each had rows (not a warm-up) and was cut by the batch cap
    (records left behind when it was planned: Spark reads all that waits otherwise); else
    none."""
    # Each value as the window's (the same memo sequences, so nothing is derived again).
    lags, points = memo.each(lag_records, samples), memo.each(_rate_point, samples)
    found: list[BatchPoint] = []
    for i in range(len(samples) - 1, -1, -1):
        point = points[i]
        if lags[i] <= 0 or point is None or _key(samples[i]) in warm_up:
            return ()
        found.append(point)
        span_ms = samples[-1].batch_end_ms - samples[i].batch_start_ms
        if len(found) >= CAPPED_AT_LEAST and span_ms >= confirm_s * 1000:
            return tuple(reversed(found))
    return ()


def _newest_figures(newest: tuple[TaskMetrics], *, memo: Memo) -> Mapping[str, Any]:
    """The model's figures the newest batch gives on its own."""
    [sample] = newest
    partitions = _source_partitions(sample)
    return MappingProxyType({
        "config_epoch": sample.config_epoch, "parallelism": parallelism.value(sample),
        "units": _units_of(sample, partitions), "source_partitions": partitions,
        "task_slots": sample.task_slots, "trigger_interval_s": sample.trigger_interval_ms / 1000,
        "source_topics": sample.source_topics, "sink_topics": sample.sink_topics,
        "partition_lag_shares": PartitionShares.of(
            {(p.topic, p.partition): max(0, p.latest_offset - p.end_offset)
             for p in sample.partitions if p.latest_offset >= 0 and p.end_offset >= 0}),
        "knob": sample.scaling_parameter, "job_max": parallelism.job_max(sample),
        "executor_cores": sample.executor_cores, "max_executors": sample.max_executors,
        "cluster_priority": sample.cluster_priority,
        "objectives": Objectives.from_ms(sample.max_delay_ms, sample.drain_within_ms),
    })


def _recent_figures(recent: tuple[TaskMetrics, ...], latests: tuple[Latest, ...], *,
                    memo: Memo) -> Mapping[str, Any]:
    """The model's figures the newest `arrival_window_s` of batches (and their `latests`)
    gives."""
    recent_ms = recent[-1].batch_end_ms - recent[0].batch_start_ms
    return MappingProxyType({
        "recent_throughput": (sum(s.input_rows for s in recent) * 1000 / recent_ms
                              if recent_ms > 0 else 0.0),
        "partition_arrival_shares": PartitionShares.of(
            partition_arrivals(recent, memo, latests)),
        "shedding": observed_shedding(recent),
    })


def _known(newest: tuple[TaskMetrics], newest_latest: Latest, *,
           memo: Memo) -> frozenset[PartitionKey]:
    return frozenset(newest_latest.keys)


def rate_points(samples: tuple[TaskMetrics, ...], warm_up: Collection[SampleKey] = (),
                memo: Memo | None = None) -> list[BatchPoint]:
    """The batches μ and c are estimated from: with rows and busy time, not a warm-up; each
    with the units that actually worked in parallel (`batch_concurrency`). The rows are those
    processed: a row load shedding dropped costs next to nothing, and counted it would show
    capacity for work that is not done."""
    found = (memo or Memo()).each(_rate_point, samples)
    return [point for s, point in zip(samples, found, strict=True)
            if point is not None and (not warm_up or _key(s) not in warm_up)]


def _rate_point(sample: TaskMetrics) -> BatchPoint | None:
    if sample.input_rows <= sample.rows_shed or sample.busy_ms <= 0:
        return None
    return BatchPoint(sample.input_rows - sample.rows_shed, batch_concurrency(sample),
                      sample.busy_ms / 1000)


def batch_concurrency(sample: TaskMetrics) -> float:
    """Units that worked in parallel on the batch: its units, but with at most one source task
    per partition (input parallelism ≤ partitions) the batch ends when its largest
    partition's task does, so Σ rows / largest partition's rows (a hot partition: ~1). Key
    skew across state partitions would do the same, but no metric shows it (`knobs`)."""
    partitions = _source_partitions(sample)
    units = _units_of(sample, partitions)
    if sample.scaling_parameter != INPUT_PARALLELISM or sample.input_parallelism > partitions:
        return float(units)
    read = [p.end_offset - p.start_offset for p in sample.partitions
            if p.start_offset >= 0 and p.end_offset >= p.start_offset]
    largest = max(read, default=0)
    return min(float(units), sum(read) / largest) if largest > 0 else float(units)


def _source_partitions(sample: TaskMetrics) -> int:
    """How many distinct source partitions the batch names."""
    return len({(p.topic, p.partition) for p in sample.partitions})


def _units_of(sample: TaskMetrics, partitions: int) -> int:
    return parallelism.units(sample.scaling_parameter, parallelism.value(sample), partitions,
                             sample.task_slots)


def lag_records(sample: TaskMetrics) -> int:
    """Σ (latest − end): what the batch left behind when it was planned (capped batches)."""
    return sum(
        max(0, p.latest_offset - p.end_offset)
        for p in sample.partitions
        if p.latest_offset >= 0 and p.end_offset >= 0
    )


def batch_cap(samples: tuple[TaskMetrics, ...], remembered: int = 0,
              memo: Memo | None = None) -> tuple[int, str]:
    """N and where it came from. Without a reported cap, a batch that left records behind
    was cut by the cap, so the largest such batch is N (Spark prorates the cap over the
    partitions and rounds down, so it may read a record or two short). Without one in the
    window, the cap last observed for the query (`remembered`) still holds: a job that keeps
    up never shows its cap, and forgetting it would overstate its capacity."""
    reported = samples[-1].max_offsets_per_trigger
    if reported > 0:
        return reported, "reported"
    lags = (memo or Memo()).each(lag_records, samples)
    cut = [s.input_rows for s, lag in zip(samples, lags, strict=True)
           if s.input_rows > 0 and lag > 0]
    if cut:
        return max(cut), "observed"
    return (remembered, "remembered") if remembered > 0 else (0, "unbounded")


def newest_span(samples: tuple[TaskMetrics, ...], span_s: float,
                at_least: int) -> tuple[TaskMetrics, ...]:
    """The newest samples that started within `span_s` of the newest one, but at least
    `at_least` of them (an idle query reports only every ~10 s)."""
    horizon = samples[-1].batch_start_ms - span_s * 1000
    inside = sum(1 for s in samples if s.batch_start_ms >= horizon)
    return samples[-max(inside, at_least):]


def partition_arrivals(samples: tuple[TaskMetrics, ...], memo: Memo | None = None,
                       latests: tuple[Latest, ...] | None = None) -> dict[PartitionKey, int]:
    """Records that arrived per partition between consecutive samples (as
    `model.arrival_rate`); `latests`: the samples' latest offsets, if worked out already."""
    memo = memo or Memo()
    offsets = tuple(map(latest, samples)) if latests is None else latests
    if len(samples) > 1 and all(memo.pairs(_only_grows, offsets)):
        # The same partitions throughout, none shrinking: the pairs' growth telescopes to the
        # newest latest offsets less the oldest, O(partitions) instead of O(pairs × them).
        old, new = offsets[0].by_key(), offsets[-1].by_key()
        return {key: records - old[key] for key, records in new.items()}
    grown: dict[PartitionKey, int] = {}
    for pair in memo.pairs(_partition_growth, offsets):
        for name, records in pair:
            grown[name] = grown.get(name, 0) + records
    return grown


def _only_grows(before: Latest, after: Latest) -> bool:
    if after.lines_up(before):
        return min(steps(before, after), default=0) >= 0
    old, new = before.by_key(), after.by_key()
    return old.keys() == new.keys() and all(new[key] >= records for key, records in old.items())


def _partition_growth(before: Latest, after: Latest) -> tuple[tuple[PartitionKey, int], ...]:
    old, new = before.by_key(), after.by_key()
    return tuple((key, max(0, new[key] - old[key])) for key in old.keys() & new.keys())


@dataclass(frozen=True, slots=True)
class PartitionShares:
    """How an amount (the backlog, the arrivals) divides among a query's source partitions:
    the largest share and whose it is ('topic/p', the first by name among equal ones), how
    many partitions it divides among, and each one's amount. The largest is found in one
    pass, not by sorting every named share: a query may read a thousand partitions, and
    `judgement.skew` reads only it."""

    largest: str = ""
    largest_share: float = 0.0
    partitions: int = 0
    """0: nothing to divide (no partition, or none with any)."""
    amounts: Mapping[PartitionKey, float] = field(default_factory=lambda: MappingProxyType({}))

    def __bool__(self) -> bool:
        return self.partitions > 0

    def of_topics(self, topics: Collection[str]) -> float:
        """The share of the partitions of `topics`: each partition's share, summed largest
        first (ties by name), so the same floats whatever order the partitions came in."""
        total = sum(self.amounts.values())
        shares = sorted(((_key_name(key), amount / total) for key, amount in self.amounts.items()),
                        key=lambda named: (-named[1], named[0]))
        return sum(share for name, share in shares if name.rpartition("/")[0] in topics)

    @staticmethod
    def of(amounts: Mapping[PartitionKey, float]) -> PartitionShares:
        total = sum(amounts.values())
        if total <= 0:
            return NO_SHARES
        top = max(amounts.values())
        return PartitionShares(
            min(_key_name(key) for key, amount in amounts.items() if amount == top),
            top / total, len(amounts), MappingProxyType(dict(amounts)))

    @staticmethod
    def listed(*shares: tuple[str, float]) -> PartitionShares:
        """Shares given as ('topic/p', share) pairs, largest first (a test's)."""
        named = {(name.rpartition("/")[0], int(name.rpartition("/")[2])): share
                 for name, share in shares}
        return PartitionShares.of(named)


NO_SHARES = PartitionShares()


def _key_name(key: PartitionKey) -> str:
    return f"{key[0]}/{key[1]}"
