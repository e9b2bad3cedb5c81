"""The rate model: per query, what arrives, what it can process, and what is left behind.

Owns the estimates λ (arrival rate), μ (true processing rate per unit) and the per-batch
overhead c (via `fit`), the batch cap N, capacity (via `sizing`), backlog B and its trend,
selectivity and the per-partition shares of lag and arrivals, from the samples of one
`window.QueryWindow`. Pure: samples in, `QueryModel` or `NotReady` out. `policy` and
`topology` size the query from a `QueryModel`.

Conventions: times are the jobs' batch timestamps; rates are records per second; a "unit" is
one concurrently running task of the stage that holds the job's expensive work, i.e. the knob
the job names (`knobs`: input parallelism or state partitions) as far as it can take effect.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise
from typing import Any

from controller.core import parallelism, probes
from controller.core.arrival import ArrivalEstimate, Interval, estimate, intervals, known_offsets
from controller.core.fit import BatchCost, BatchPoint, fit_batch_cost
from controller.core.memo import Memo
from controller.core.objectives import Standing, delay_s, standings
from controller.core.results import NotReady
from controller.core.scaling import LINEAR, Scalability, learned, remember
from controller.core.season import Forecast
from controller.core.shedding import NO_SHEDDING, Shedding, observed_shedding
from controller.core.sizing import capacity, drain_time_s
from controller.settings import ModelSettings
from schemas import SourcePartition, TaskMetrics
from schemas.knobs import INPUT_PARALLELISM
from schemas.objectives import NONE, Objectives


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
    """μ, records per second of useful (non-overhead) busy time per unit (see `fit`)."""
    parallelism: int
    """The knob's value in force (newest sample)."""
    units: int
    """Units that actually run at once (see the module docstring)."""
    source_partitions: int
    task_slots: int
    backlog_records: float
    backlog_trend_records_per_s: float
    """Least-squares slope of the per-sample backlog over the newest `arrival_window_s`."""
    time_to_drain_s: float
    """B / (capacity − λ); 0 without backlog, infinite when arrivals meet capacity."""
    batch_overhead_s: float = 0.0
    """c, seconds every batch costs whatever its size (see `fit`)."""
    overhead_source: str = "assumed_zero"
    """'fit', 'remembered' or 'assumed_zero': how c was found (`fit` module docstring)."""
    batch_cap: int = 0
    """N, most records per batch (maxOffsetsPerTrigger); 0 when unbounded."""
    batch_cap_source: str = "unbounded"
    """'reported' by the job, 'observed' (largest batch that left records behind),
    'remembered' (observed earlier) or 'unbounded' (none of these)."""
    rate_samples: int = 0
    """Batches μ and c were estimated from (with rows, not a run's warm-up batch)."""
    recent_throughput: float = 0.0
    """Records/s processed over the newest `arrival_window_s` (what a downstream sees now)."""
    selectivity: float = 1.0
    """Σ output_rows / Σ input_rows over the window: output records per input record."""
    trigger_interval_s: float = 0.0
    source_topics: tuple[str, ...] = ()
    sink_topics: tuple[str, ...] = ()
    partition_lag_shares: tuple[tuple[str, float], ...] = ()
    """Per source partition ('topic/p') its share of the newest sample's lag, largest first."""
    partition_arrival_shares: tuple[tuple[str, float], ...] = ()
    """Per source partition its share of the arrivals over the newest `arrival_window_s`."""
    task_skew: float = 1.0
    """How much longer the newest batch took than an even split of its records over its
    units would (units ÷ `batch_concurrency`); it holds while the input parallelism is at most
    the partition count (one task per partition) and vanishes above it."""
    arrival_pending: float | None = None
    """The newest arrival interval's rate when it departs from λ unconfirmed (`arrival`)."""
    arrival_ramp: float = 0.0
    """How fast λ climbs, records/s per second, when the arrivals are a rising ramp
    (`arrival.ramp`); 0 otherwise."""
    knob: str = INPUT_PARALLELISM
    """The parameter that scales the query, as its job names it (`knobs`)."""
    job_max: int = 0
    """The job's own ceiling for the knob (`parallelism.job_max`; 0: none reported)."""
    executor_cores: int = 0
    """Cores per executor on a cluster; 0 in local mode."""
    max_executors: int = 0
    """Most executors the job may request; 0 in local mode."""
    objectives: Objectives = NONE
    """What the job states it needs (`objectives`); none by default."""
    arrival_timed_by: str = "batches"
    """'broker' when λ comes from end-offset probes (`probes`), fresh within a second or two;
    'batches' when only from the batches, as old as the newest batch start."""
    backlog_seen: str = "batches"
    """'running batch' when B is what waits at the broker beyond the plan of the batch the job
    runs now (`probes.running_backlog`); 'batches' when it is the newest finished batch's."""
    cost_measured_by_running_batch: bool = False
    """μ is a lower bound that the batch running now will correct when it reports
    (`running_batch_measures_cost`)."""
    shedding: Shedding = NO_SHEDDING
    """What load shedding can do for the query and what it does now (`shedding`)."""
    forecast: Forecast | None = None
    """The peak its repeating load reaches ahead (`season`); None: none found, or off."""
    batch_cap_per_unit: float = 0.0
    """Records per unit a batch may read when the batch cap follows the units (the controller
    sets the two together: `ModelSettings.batch_cap_follows_units`); 0: the cap stays as it is,
    whatever the units."""
    max_batch_cap: int = 0
    """The highest batch cap a tuple may set (the job's limit); 0: not reported."""
    scalability: Scalability = LINEAR
    """How μ falls as units are added (`scaling`): learned from the sizes the query has run,
    the prior before it has run at two."""

    def units_at(self, setting: int) -> int:
        """Units that run at once with the knob at `setting`."""
        return parallelism.units(self.knob, setting, self.source_partitions, self.task_slots)

    @property
    def capacity(self) -> float:
        """Records/s the query processes with its current units running full batches back to
        back (the per-batch overhead included; `sizing`)."""
        return self.capacity_at(self.units)

    def capacity_at(self, units: int, processed: float = 1.0, skewed: bool = True) -> float:
        """Records/s read at `units` when `processed` of them are processed (the rest shed,
        at no cost: `shedding`); μ counts processed records, the batch cap records read.
        `skewed=False`: as if the tasks were even (the sizing's view, `policy`)."""
        # Up to one task per partition a hot partition sets the pace; above, Spark's
        # minPartitions splits the offset ranges and the tasks even out.
        working = (units / self.task_skew if skewed and units <= self.source_partitions
                   else units)
        per_unit = self.scalability.per_unit_at(self.rate_per_unit, self.units, units)
        return capacity(per_unit / processed, working, self.batch_overhead_s,
                        self.batch_cap_at(units))

    def batch_cap_at(self, units: int) -> int:
        """N at `units`: the cap in force, or, when it follows the units, the same records per
        unit (within the job's limit) — so the per-batch overhead keeps its share of a batch
        and a batch its duration, however many units run."""
        if self.batch_cap_per_unit <= 0:
            return self.batch_cap
        return following_cap(self.batch_cap_per_unit, units, self.max_batch_cap)

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
            "batch_overhead_s": self.batch_overhead_s, "batch_cap": float(self.batch_cap),
            "overhead_fitted": 1.0 if self.overhead_source == "fit" else 0.0,
            "rate_samples": float(self.rate_samples), "selectivity": self.selectivity,
            "task_skew": self.task_skew, "executor_cores": float(self.executor_cores),
            "max_executors": float(self.max_executors),
            "contention": self.scalability.contention,
            "contention_sizes": float(self.scalability.sizes),
            "batch_cap_per_unit": self.batch_cap_per_unit,
        } | self._arrival_departures() | self._objective_figures() | self._forecast_figures()

    def standings(self) -> tuple[Standing, ...]:
        """Each objective the job states, against the figures now (`objectives`)."""
        capacity_known = math.isfinite(self.capacity) and self.capacity > 0
        return standings(self.objectives, self.delay_s,
                         self.time_to_drain_s if capacity_known else None)

    @property
    def delay_s(self) -> float | None:
        """How long a record arriving now waits before its batch commits (`objectives`)."""
        return delay_s(self.backlog_records, self.capacity, self.trigger_interval_s)

    def _objective_figures(self) -> dict[str, float]:
        """The stated bounds and the delay now, when the job states any (`figures` runs for
        every query each cycle: without objectives it computes nothing here)."""
        if not self.objectives.stated:
            return {}
        delay = self.delay_s
        return ({s.objective: s.bound_s for s in self.standings()}
                | ({"delay_s": delay} if delay is not None else {}))

    def _forecast_figures(self) -> dict[str, float]:
        f = self.forecast
        return {} if f is None else {"forecast_peak": f.peak, "forecast_in_s": f.in_s,
                                     "forecast_period_s": f.period_s,
                                     "forecast_error": f.error}

    def _arrival_departures(self) -> dict[str, float]:
        """The pending rate (0 too: arrivals that stopped) and the ramp's slope, when there are
        any."""
        pending = {} if self.arrival_pending is None else {"arrival_pending": self.arrival_pending}
        return pending | ({"arrival_ramp": self.arrival_ramp} if self.arrival_ramp > 0 else {})


def arrival_rate(samples: tuple[TaskMetrics, ...]) -> float | None:
    """Plain λ over all of `samples`: Σ growth of the latest offsets / Σ interval time (see
    `arrival.intervals`); `evaluate` uses the change-point-aware `arrival.estimate` instead."""
    found = intervals(samples)
    elapsed_ms = sum(i.end_ms - i.start_ms for i in found)
    return sum(i.records for i in found) * 1000 / elapsed_ms if elapsed_ms > 0 else None


BROKER = "broker"
"""`QueryModel.arrival_timed_by` when the broker's probes time the arrivals."""
RUNNING_BATCH = "running batch"
"""`QueryModel.backlog_seen` when B is measured beyond the running batch's plan."""

SampleKey = tuple[str, int, int]
"""(instance, batch id, end time of a heartbeat else 0), as `window.sample_key`."""


def _key(sample: TaskMetrics) -> SampleKey:
    return (sample.instance_id, sample.batch_id,
            sample.batch_end_ms if sample.batch_id < 0 else 0)


def rate_points(samples: tuple[TaskMetrics, ...], warm_up: Collection[SampleKey] = (),
                memo: Memo | None = None) -> list[BatchPoint]:
    """The batches μ and c are estimated from: with rows and busy time, not a warm-up; each
    with the units that actually worked in parallel (`batch_concurrency`). The rows are those
    processed: a row load shedding dropped costs next to nothing, and counted it would show
    capacity for work that is not done."""
    memo = memo or Memo()
    return [BatchPoint(s.input_rows - s.rows_shed, memo.apply(batch_concurrency, s),
                       s.busy_ms / 1000)
            for s in samples
            if s.input_rows > s.rows_shed and s.busy_ms > 0 and _key(s) not in warm_up]


def batch_concurrency(sample: TaskMetrics) -> float:
    """Units that worked in parallel on the batch: its units, but with at most one source task
    per partition (input parallelism ≤ partitions) the batch ends when its largest
    partition's task does, so Σ rows / largest partition's rows (a hot partition: ~1). Key
    skew across state partitions would do the same, but no metric shows it (`knobs`)."""
    units = _units_of(sample)
    partitions = len({(p.topic, p.partition) for p in sample.partitions})
    if sample.scaling_parameter != INPUT_PARALLELISM or sample.input_parallelism > partitions:
        return float(units)
    read = [p.end_offset - p.start_offset for p in sample.partitions
            if p.start_offset >= 0 and p.end_offset >= p.start_offset]
    largest = max(read, default=0)
    return min(float(units), sum(read) / largest) if largest > 0 else float(units)


def rate_per_unit(samples: tuple[TaskMetrics, ...],
                  settings: ModelSettings | None = None) -> float | None:
    """μ from useful time: Σ rows / Σ units × (busy − c), c fitted when the batches allow.

    Weighting by each batch's units keeps μ right across a window that straddles a
    parallelism change.
    """
    cost = fit_batch_cost(rate_points(samples), settings or ModelSettings())
    return cost.per_unit if cost is not None else None


def _units_of(sample: TaskMetrics) -> int:
    partitions = len({(p.topic, p.partition) for p in sample.partitions})
    return parallelism.units(sample.scaling_parameter, parallelism.value(sample), partitions,
                       sample.task_slots)


def lag_records(sample: TaskMetrics) -> int:
    """Σ (latest − end): what the batch left behind when it was planned (capped batches)."""
    return sum(
        max(0, p.latest_offset - p.end_offset)
        for p in sample.partitions
        if p.latest_offset >= 0 and p.end_offset >= 0
    )


def backlog_records(sample: TaskMetrics, arrival: float, memo: Memo | None = None) -> float:
    """B after `sample`: its lag plus what arrived while it overran its trigger interval.

    The batch planned against `latest_offset` at its start, so records that arrived during its
    busy time are not in `latest − end` yet; λ × busy_s estimates them. But a query that keeps
    up holds one trigger interval of arrivals between batches by design (they wait for the
    next trigger), so only arrivals beyond the trigger interval are a backlog: a 2 s trigger
    at 600/s is 1 200 records waiting as a matter of course, not an overload. Arrivals since
    the batch ended are ignored: small when batches run back to back (the backlogged case).
    """
    overrun_s = max(0, sample.busy_ms - sample.trigger_interval_ms) / 1000
    lag = memo.apply(lag_records, sample) if memo is not None else lag_records(sample)
    return lag + arrival * overrun_s


def slope_per_s(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x (x in seconds); 0 when x does not vary."""
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    var = sum((x - mean_x) ** 2 for x, _ in points)
    if var == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / var


@dataclass(frozen=True, slots=True)
class Remembered:
    """What a query's model carries from one evaluation to the next."""

    overhead_s: float | None = None
    """The per-batch overhead last fitted (`fit` rule 2)."""
    cost: BatchCost | None = None
    """μ and c last measured from batches with rows, which size the query while nothing
    arrives (`idle_cost`)."""
    batch_cap: int = 0
    """The batch cap last reported or observed (`batch_cap`)."""
    sizes: tuple[tuple[int, float], ...] = ()
    """μ last measured at each size the query ran (units, records/s per unit), oldest first
    (`scaling`)."""
    batch_cap_per_unit: float = 0.0
    """The records per unit the batch cap last followed (`_following_cap`); 0: none."""

    def with_recorded(self, recorded: Remembered) -> Remembered:
        """These memories over what a decision log recorded (`recovery.recorded_memories`):
        what this instance measured while it watched is at least as new, and wins."""
        merged = dict(recorded.sizes)
        for units, rate in self.sizes:
            merged = remember(merged, units, rate)
        return Remembered(
            self.overhead_s if self.overhead_s is not None else recorded.overhead_s,
            self.cost or recorded.cost, self.batch_cap or recorded.batch_cap,
            tuple(merged.items()), self.batch_cap_per_unit or recorded.batch_cap_per_unit)

    def after(self, model: QueryModel) -> Remembered:
        """What to remember once `model` was found. μ joins the sizes only when measured apart
        from the overhead (fitted, or with one fitted before): a lower bound would read as
        contention."""
        sizes = self.sizes
        if model.rate_samples > 0 and model.overhead_source != "assumed_zero":
            sizes = tuple(remember(dict(sizes), model.units, model.rate_per_unit).items())
        return Remembered(
            model.batch_overhead_s if model.overhead_source == "fit" else self.overhead_s,
            BatchCost(model.batch_overhead_s, model.rate_per_unit, model.overhead_source)
            if model.rate_samples > 0 else self.cost,
            model.batch_cap if model.batch_cap_source in ("reported", "observed")
            else self.batch_cap, sizes, model.batch_cap_per_unit or self.batch_cap_per_unit)


def evaluate(
    query_id: str, samples: tuple[TaskMetrics, ...], settings: ModelSettings, *,
    warm_up: Collection[SampleKey] = (), probed: Sequence[probes.EndOffsets] = (),
    remembered: Remembered = Remembered(), beat: TaskMetrics | None = None,
    memo: Memo | None = None,
) -> QueryModel | NotReady:
    """The model of one query from its window, or why there is none yet.

    `warm_up`: keys of the window's warm-up batches (`window.QueryWindow.warm_up`), left out of
    μ and c. `probed`: recent end-offset probes of the broker (`probes`), which time arrivals
    between batches; without them the batches' latest offsets do. `remembered`: what the
    query's last model left (`Remembered`). `beat`: the query's newest liveness beat; with the
    probes it gives the backlog while a batch runs (`probes.running_backlog`). `memo`: the
    query's `memo.Memo`, so what the window's records gave last cycle is not derived again
    (the same model with or without it).
    """
    with (memo or Memo()).evaluation() as kept:
        return _evaluate(query_id, samples, settings, warm_up, probed, remembered, beat, kept)


def _evaluate(query_id: str, samples: tuple[TaskMetrics, ...], settings: ModelSettings,
              warm_up: Collection[SampleKey], probed: Sequence[probes.EndOffsets],
              remembered: Remembered, beat: TaskMetrics | None,
              memo: Memo) -> QueryModel | NotReady:
    needed = samples_needed(samples, settings)
    unsizable = parallelism.problem(samples[-1]) if samples else None
    if unsizable is not None:
        return NotReady(unsizable)
    if len(samples) < needed:
        return NotReady(f"only {len(samples)} samples, need {needed}")
    elapsed_ms = samples[-1].batch_end_ms - samples[0].batch_start_ms
    if elapsed_ms <= 0:
        return NotReady("the window's batches span no time")
    recent = newest_span(samples, settings.arrival_window_s, settings.min_samples)
    from_probes = probes.intervals(probed, set(known_offsets(samples[-1])), memo)
    arrival = estimate(arrival_intervals(intervals(samples, memo), from_probes), settings)
    if arrival is None:
        return NotReady("no partition offsets in consecutive samples yet; arrival rate unknown")
    points = rate_points(samples, warm_up, memo)
    cost = fit_batch_cost(points, settings, remembered.overhead_s)
    if not any(s.input_rows > 0 for s in samples):
        cost = idle_cost(arrival, remembered.cost)
        if cost is None:
            return NotReady("no batch with input rows in the window; processing rate unknown")
    if cost is None:
        return NotReady("only the run's first batch (Spark's warm-up) has rows yet; "
                        "processing rate unknown")
    cap = batch_cap(samples, remembered.batch_cap, memo)
    plan = probes.running_plan(beat, samples)
    running = (None if plan is None else probes.running_backlog(
        probed, plan, arrival.rate, samples[-1].trigger_interval_ms / 1000))
    found = _build(query_id, samples, recent, elapsed_ms, arrival, cost, len(points), cap,
                   running, memo)
    shed = found.shedding
    found = replace(found, cost_measured_by_running_batch=running_batch_measures_cost(
        cost, points, plan, settings, 1 - shed.low_priority_share * shed.fraction),
        scalability=learned(dict(remembered.sizes), settings.scaling_prior_contention),
        **_following_cap(found, samples[-1], settings, remembered.batch_cap_per_unit))
    return replace(found, arrival_timed_by=BROKER) if from_probes else found


def _following_cap(model: QueryModel, newest: TaskMetrics, settings: ModelSettings,
                   per_unit_before: float) -> dict[str, Any]:
    """`batch_cap_per_unit` and `max_batch_cap` when the cap follows the units: only a cap
    the job reports, with the limit a tuple may raise it to.

    The records per unit are the cap's over the units, unless the cap in force is what the
    previous ratio gives at these units: then that ratio holds. A cap clipped at the job's
    limit (or rounded) must not lower the ratio for every later size."""
    if (not settings.batch_cap_follows_units or model.batch_cap_source != "reported"
            or newest.max_batch_cap <= 0 or model.units <= 0):
        return {}
    kept = (per_unit_before > 0 and following_cap(per_unit_before, model.units,
                                                  newest.max_batch_cap) == model.batch_cap)
    return {"batch_cap_per_unit": per_unit_before if kept else model.batch_cap / model.units,
            "max_batch_cap": newest.max_batch_cap}


def following_cap(per_unit: float, units: int, limit: int) -> int:
    """The batch cap that keeps `per_unit` records a unit at `units`, within the job's limit."""
    return max(1, min(limit, round(per_unit * units)))


def running_batch_measures_cost(cost: BatchCost, points: Sequence[BatchPoint],
                                plan: probes.RunningPlan | None, settings: ModelSettings,
                                processed: float = 1.0) -> bool:
    """Whether μ is a lower bound that the batch running now will correct: no overhead was
    fitted or remembered, so each batch's fixed cost is charged to its records (`fit` rule 3,
    pessimistic for larger batches), and the running batch holds `overhead_fit_min_spread` ×
    the records per unit of the largest measured one, so the fit separates the two when it
    reports. A job that kept up with small batches drains a burst in large ones, at a rate
    the small ones cannot show. `processed`: the share of the plan's records that will be
    processed, not shed (the points count processed records)."""
    if cost.source != "assumed_zero" or plan is None or plan.rows <= 0 or not points:
        return False
    largest = max(p.per_unit for p in points)
    return (plan.rows * processed / points[-1].units
            >= settings.overhead_fit_min_spread * largest)


def idle_cost(arrival: ArrivalEstimate, remembered: BatchCost | None) -> BatchCost | None:
    """μ and c for a window without a batch with rows: the ones last measured, as long as
    nothing arrives at all (then any size keeps up, and the smallest is the right one). With
    arrivals and still no rows the query is not idle but stuck, and nothing sizes it."""
    if remembered is None or arrival.rate > 0 or arrival.pending_rate:
        return None
    # A μ that was a lower bound (no cost told apart) stays one: it is no better remembered.
    source = remembered.source if remembered.source == "assumed_zero" else "remembered"
    return BatchCost(remembered.overhead_s, remembered.per_unit, source)


def arrival_intervals(from_batches: list[Interval],
                      from_probes: list[Interval]) -> list[Interval]:
    """The batches' intervals up to the first probe interval, the probes' after it: a
    controller that just started keeps the batches' history, and from then on a step shows
    within a probe or two instead of a batch or two."""
    if not from_probes:
        return from_batches
    first = from_probes[0].start_ms
    return [i for i in from_batches if i.end_ms <= first] + from_probes


MIN_TREND_SAMPLES = 3
"""A least-squares trend needs three points (`ModelSettings.min_samples` is at least this)."""


def samples_needed(samples: tuple[TaskMetrics, ...], settings: ModelSettings) -> int:
    """`min_samples`, or fewer when the window cannot hold that many at the query's batch pace
    (batches of 21 s fit only three times in 60 s), but never fewer than a trend needs."""
    if len(samples) < 2:
        return settings.min_samples
    pace_ms = (samples[-1].batch_start_ms - samples[0].batch_start_ms) / (len(samples) - 1)
    if pace_ms <= 0:
        return settings.min_samples
    fit = int(settings.window_s * 1000 // pace_ms) + 1
    return max(MIN_TREND_SAMPLES, min(settings.min_samples, fit))


def newest_span(samples: tuple[TaskMetrics, ...], span_s: float,
                at_least: int) -> tuple[TaskMetrics, ...]:
    """The newest samples that started within `span_s` of the newest one, but at least
    `at_least` of them (an idle query reports only every ~10 s)."""
    horizon = samples[-1].batch_start_ms - span_s * 1000
    inside = sum(1 for s in samples if s.batch_start_ms >= horizon)
    return samples[-max(inside, at_least):]


def _build(
    query_id: str, samples: tuple[TaskMetrics, ...], recent: tuple[TaskMetrics, ...],
    elapsed_ms: int, found: ArrivalEstimate, cost: BatchCost, rate_samples: int,
    cap_found: tuple[int, str], running: probes.RunningBacklog | None = None,
    memo: Memo | None = None,
) -> QueryModel:
    memo = memo or Memo()
    arrival = found.rate
    newest = samples[-1]
    partitions = len({(p.topic, p.partition) for p in newest.partitions})
    units = _units_of(newest)
    points = [(s.batch_start_ms / 1000, backlog_records(s, arrival, memo)) for s in recent]
    if running is not None:  # seconds newer than the newest batch's own figure
        points.append((running.at_ms / 1000, running.records))
    backlog = points[-1][1]
    trend = slope_per_s(points)
    cap, cap_source = cap_found
    worked = [s for s in samples if s.input_rows > 0]
    skew = units / memo.apply(batch_concurrency, worked[-1]) if worked else 1.0
    rows = sum(s.input_rows for s in samples)
    recent_ms = recent[-1].batch_end_ms - recent[0].batch_start_ms
    return QueryModel(
        query_id=query_id, samples=len(samples), config_epoch=newest.config_epoch,
        arrival_rate=arrival, throughput=rows * 1000 / elapsed_ms,
        busy_ratio=min(1.0, sum(s.busy_ms for s in samples) / elapsed_ms),
        rate_per_unit=cost.per_unit, parallelism=parallelism.value(newest), units=units,
        source_partitions=partitions, task_slots=newest.task_slots,
        backlog_records=backlog, backlog_trend_records_per_s=trend,
        time_to_drain_s=drain_time_s(backlog, capacity(
            cost.per_unit, units / skew if units <= partitions else units, cost.overhead_s,
            cap), arrival),
        batch_overhead_s=cost.overhead_s, overhead_source=cost.source, batch_cap=cap,
        batch_cap_source=cap_source, rate_samples=rate_samples,
        recent_throughput=(sum(s.input_rows for s in recent) * 1000 / recent_ms
                           if recent_ms > 0 else 0.0),
        selectivity=sum(s.output_rows for s in samples) / rows if rows > 0 else 1.0,
        trigger_interval_s=newest.trigger_interval_ms / 1000,
        source_topics=newest.source_topics, sink_topics=newest.sink_topics,
        partition_lag_shares=_shares(
            {_name(p): max(0, p.latest_offset - p.end_offset) for p in newest.partitions
             if p.latest_offset >= 0 and p.end_offset >= 0}),
        partition_arrival_shares=_shares(partition_arrivals(recent, memo)),
        task_skew=skew, arrival_pending=found.pending_rate,
        arrival_ramp=found.ramp_per_s, knob=newest.scaling_parameter,
        job_max=parallelism.job_max(newest), executor_cores=newest.executor_cores,
        max_executors=newest.max_executors,
        objectives=Objectives.from_ms(newest.max_delay_ms, newest.drain_within_ms),
        shedding=observed_shedding(recent),
        backlog_seen=RUNNING_BATCH if running is not None else "batches",
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
    memo = memo or Memo()
    cut = [s.input_rows for s in samples if s.input_rows > 0 and memo.apply(lag_records, s) > 0]
    if cut:
        return max(cut), "observed"
    return (remembered, "remembered") if remembered > 0 else (0, "unbounded")


def partition_arrivals(samples: tuple[TaskMetrics, ...],
                       memo: Memo | None = None) -> dict[str, int]:
    """Records that arrived per partition between consecutive samples (as `arrival_rate`)."""
    memo = memo or Memo()
    grown: dict[str, int] = {}
    for before, after in pairwise(samples):
        for name, records in memo.apply(_partition_growth, before, after):
            grown[name] = grown.get(name, 0) + records
    return grown


def _partition_growth(before: TaskMetrics, after: TaskMetrics) -> tuple[tuple[str, int], ...]:
    old, new = known_offsets(before), known_offsets(after)
    return tuple((_name(new[key]), max(0, new[key].latest_offset - old[key].latest_offset))
                 for key in old.keys() & new.keys())


def _name(partition: SourcePartition) -> str:
    return f"{partition.topic}/{partition.partition}"


def _shares(amounts: dict[str, int]) -> tuple[tuple[str, float], ...]:
    total = sum(amounts.values())
    if total <= 0:
        return ()
    return tuple(sorted(((k, v / total) for k, v in amounts.items()),
                        key=lambda kv: (-kv[1], kv[0])))
