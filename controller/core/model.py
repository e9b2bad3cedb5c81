"""The rate model: per query, what arrives, what it can process, and what is left behind.

Owns the estimates λ (arrival rate, via `arrival`), μ (true processing rate per unit) and
the per-batch overhead c (via `fit`, and `cost` where the window's fit alone would not),
capacity (via `sizing`), backlog B and its trend, from
the samples of one `window.QueryWindow` and the broker's probes; what the batches say on
their own (the batch cap N, selectivity, the per-partition shares of lag and arrivals) is
`batches`'.
Pure: samples in, `QueryModel` or `NotReady` out. `policy` and `topology` size the query
from a `QueryModel`.

Conventions: times are the jobs' batch timestamps; rates are records per second; a "unit" is
one concurrently running task of the stage that holds the job's expensive work, i.e. the knob
the job names (`knobs`: input parallelism or state partitions) as far as it can take effect.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from controller.core import parallelism, probes
from controller.core.arrival import ArrivalEstimate, Interval, Scan, intervals
from controller.core.batches import (
    NO_SHARES,
    Batches,
    PartitionShares,
    SampleKey,
    lag_records,
    rate_points,
    summarise,
)
from controller.core.cluster import CoreGrant
from controller.core.cost import capped_cost, idle_cost, running_batch_measures_cost
from controller.core.fit import BatchCost, BatchPoint, charged_cost, fit_batch_cost
from controller.core.memo import Memo
from controller.core.objectives import Standing, delay_s, standings
from controller.core.results import NotReady
from controller.core.scaling import LINEAR, Scalability, learned, remember, tells_size
from controller.core.season import Forecast
from controller.core.shedding import NO_SHEDDING, Shedding
from controller.core.sizing import capacity, drain_time_s
from controller.settings import ModelSettings
from schemas import TaskMetrics
from schemas.knobs import INPUT_PARALLELISM
from schemas.objectives import NONE, Objectives


@dataclass(frozen=True, slots=True)
class QueryModel:
    """The model's figures for one query at one moment."""

    query_id: str
    samples: int
    config_epoch: int
    arrival_rate: float
    """λ, records/s: growth of Σ latest_offset, the level of its newest `arrival_window_s`
    (arrivals in bursts: over the whole window; `arrival`)."""
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
    rate_error: float = 0.0
    """The relative standard error of μ over those batches (`fit.rate_error`): infinite from
    one; carried with a remembered μ while the query is idle."""
    useful_share: float = 1.0
    """The share of those batches' busy time left to their records once c is charged
    (`fit.BatchCost.useful_share`)."""
    recent_throughput: float = 0.0
    """Records/s processed over the newest `arrival_window_s` (what a downstream sees now)."""
    selectivity: float = 1.0
    """Σ output_rows / Σ input_rows over the window: output records per input record."""
    trigger_interval_s: float = 0.0
    source_topics: tuple[str, ...] = ()
    sink_topics: tuple[str, ...] = ()
    partition_lag_shares: PartitionShares = NO_SHARES
    """How the newest sample's lag divides among the source partitions."""
    partition_arrival_shares: PartitionShares = NO_SHARES
    """How the arrivals over the newest `arrival_window_s` divide among them."""
    task_skew: float = 1.0
    """How much longer the newest batch took than an even split of its records over its
    units would (units ÷ `batches.batch_concurrency`); it holds while the input parallelism
    is at most the partition count (one task per partition) and vanishes above it."""
    arrival_pending: float | None = None
    """The newest arrival interval's rate when it departs from λ unconfirmed (`arrival`)."""
    arrival_ramp: float = 0.0
    """How fast λ climbs, records/s per second, when the arrivals are a rising ramp
    (`ramp.ramp`); 0 otherwise."""
    knob: str = INPUT_PARALLELISM
    """The parameter that scales the query, as its job names it (`knobs`)."""
    job_max: int = 0
    """The job's own ceiling for the knob (`parallelism.job_max`; 0: none reported)."""
    executor_cores: int = 0
    """Cores per executor on a cluster; 0 in local mode."""
    max_executors: int = 0
    """Most executors the job may request; 0 in local mode."""
    cluster_priority: int = 0
    """How the job ranks for a shared cluster's free cores (`cluster`; higher first)."""
    objectives: Objectives = NONE
    """What the job states it needs (`objectives`); none by default."""
    arrival_timed_by: str = "batches"
    """'broker' when λ comes from end-offset probes (`probes`), fresh within a second or two;
    'batches' when only from the batches, as old as the newest batch start."""
    rate_measured_capped: bool = False
    """μ was measured on the newest batches alone, each cut by the batch cap while the backlog
    grew (`capped_cost`)."""
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
    cluster_grant: CoreGrant | None = None
    """The cores the shared cluster's division grants the query beyond those it runs
    (`cluster`); None: the controller does not read the cluster's status."""

    capacity: float = field(init=False, repr=False, compare=False)
    """Records/s the query processes with its current units running full batches back to
    back (the per-batch overhead included; `sizing`): `capacity_at(units)`, computed once,
    as the policy, the topology and the exports read it many times a cycle."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "capacity", self.capacity_at(self.units))

    def units_at(self, setting: int) -> int:
        """Units that run at once with the knob at `setting`."""
        return parallelism.units(self.knob, setting, self.source_partitions, self.task_slots)

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

    @property
    def overloaded(self) -> bool:
        """More arrives than the query can process at its size."""
        return self.arrival_rate > self.capacity

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
            "overhead_remembered": 1.0 if self.overhead_source == "remembered" else 0.0,
            "rate_samples": float(self.rate_samples), "rate_error": self.rate_error,
            "useful_share": self.useful_share,
            "rate_measured_capped": 1.0 if self.rate_measured_capped else 0.0,
            "selectivity": self.selectivity,
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
    `arrival.intervals`); `evaluate` uses the change-point-aware `arrival.Scan` instead."""
    found = intervals(samples)
    elapsed_ms = sum(i.end_ms - i.start_ms for i in found)
    return sum(i.records for i in found) * 1000 / elapsed_ms if elapsed_ms > 0 else None


BROKER = "broker"
"""`QueryModel.arrival_timed_by` when the broker's probes time the arrivals."""
RUNNING_BATCH = "running batch"
"""`QueryModel.backlog_seen` when B is measured beyond the running batch's plan."""

def rate_per_unit(samples: tuple[TaskMetrics, ...],
                  settings: ModelSettings | None = None) -> float | None:
    """μ from useful time: Σ rows / Σ units × (busy − c), c fitted when the batches allow.

    Weighting by each batch's units keeps μ right across a window that straddles a
    parallelism change.
    """
    cost = fit_batch_cost(rate_points(samples), settings or ModelSettings())
    return cost.per_unit if cost is not None else None


def backlog_records(sample: TaskMetrics, arrival: float, lag: int | None = None) -> float:
    """B after `sample`: its lag plus what arrived while it overran its trigger interval.

    The batch planned against `latest_offset` at its start, so records that arrived during its
    busy time are not in `latest − end` yet; λ × busy_s estimates them. But a query that keeps
    up holds one trigger interval of arrivals between batches by design (they wait for the
    next trigger), so only arrivals beyond the trigger interval are a backlog: a 2 s trigger
    at 600/s is 1 200 records waiting as a matter of course, not an overload. Arrivals since
    the batch ended are ignored: small when batches run back to back (the backlogged case).
    `lag`: the sample's `lag_records`, when known.
    """
    overrun_s = max(0, sample.busy_ms - sample.trigger_interval_ms) / 1000
    return (lag_records(sample) if lag is None else lag) + arrival * overrun_s


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
    rate_capped: bool = False
    """The last model's μ was that of its batches cut by the cap (`capped_cost`)."""

    def with_recorded(self, recorded: Remembered) -> Remembered:
        """These memories over what a decision log recorded (`recovery.recorded_memories`):
        what this instance measured while it watched is at least as new, and wins."""
        merged = dict(recorded.sizes)
        for units, rate in self.sizes:
            merged = remember(merged, units, rate)
        return Remembered(
            self.overhead_s if self.overhead_s is not None else recorded.overhead_s,
            self.cost or recorded.cost, self.batch_cap or recorded.batch_cap,
            tuple(merged.items()), self.batch_cap_per_unit or recorded.batch_cap_per_unit,
            self.rate_capped)

    def after(self, model: QueryModel) -> Remembered:
        """What to remember once `model` was found. μ joins the sizes only when it is the
        size's own (`scaling.tells_size`)."""
        sizes = self.sizes
        if (model.rate_samples > 0 and not model.rate_measured_capped  # a few batches
                and tells_size(model.overhead_source, model.rate_per_unit, model.useful_share)):
            sizes = tuple(remember(dict(sizes), model.units, model.rate_per_unit).items())
        return Remembered(
            model.batch_overhead_s if model.overhead_source == "fit" else self.overhead_s,
            BatchCost(model.batch_overhead_s, model.rate_per_unit, model.overhead_source,
                      model.rate_error, useful_share=model.useful_share)
            if model.rate_samples > 0 else self.cost,
            model.batch_cap if model.batch_cap_source in ("reported", "observed")
            else self.batch_cap, sizes, model.batch_cap_per_unit or self.batch_cap_per_unit,
            model.rate_measured_capped)


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
    (the same model with or without it, but for the arrival scan it carries: `arrival.Scan`).
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
    if samples[-1].batch_end_ms - samples[0].batch_start_ms <= 0:
        return NotReady("the window's batches span no time")
    batches = memo.whole(summarise, samples, frozenset(warm_up), remembered.batch_cap,
                         settings)
    from_probes = probes.intervals(probed, batches.known, memo)
    scan = memo.carried(partial(Scan, settings), (Scan, settings))
    arrival = scan.estimate(arrival_intervals(list(batches.intervals), from_probes))
    if arrival is None:
        return NotReady("no partition offsets in consecutive samples yet; arrival rate unknown")
    cost = batches.fitted or memo.whole(_charged, batches.points, remembered.overhead_s)
    if not batches.rows_seen:
        cost = idle_cost(arrival, remembered.cost)
        if cost is None:
            return NotReady("no batch with input rows in the window; processing rate unknown")
    if cost is None:
        return NotReady("only the run's first batch (Spark's warm-up) has rows yet; "
                        "processing rate unknown")
    plan = probes.running_plan(beat, samples)
    running = (None if plan is None else probes.running_backlog(
        probed, plan, arrival.rate, samples[-1].trigger_interval_ms / 1000))
    shedding: Shedding = batches.figures["shedding"]
    return _model(query_id, batches, arrival, cost, running, _following_cap(
        batches.figures, samples[-1], settings, remembered.batch_cap_per_unit),
        settings, remembered.rate_capped,
        cost_measured_by_running_batch=running_batch_measures_cost(
            cost, batches.points, plan, settings,
            1 - shedding.low_priority_share * shedding.fraction),
        scalability=learned(dict(remembered.sizes), settings.scaling_prior_contention),
        arrival_timed_by=BROKER if from_probes else "batches")


def _charged(points: Sequence[BatchPoint], remembered_overhead_s: float | None, *,
             memo: Memo) -> BatchCost | None:
    """`fit.charged_cost`, in the memo: computed again only when a batch joins or leaves, or
    the c remembered moves."""
    return charged_cost(points, remembered_overhead_s)


def _following_cap(figures: Mapping[str, Any], newest: TaskMetrics, settings: ModelSettings,
                   per_unit_before: float) -> dict[str, Any]:
    """`batch_cap_per_unit` and `max_batch_cap` when the cap follows the units: only a cap
    the job reports, with the limit a tuple may raise it to.

    The records per unit are the cap's over the units, unless the cap in force is what the
    previous ratio gives at these units: then that ratio holds. A cap clipped at the job's
    limit (or rounded) must not lower the ratio for every later size."""
    units, cap = figures["units"], figures["batch_cap"]
    if (not settings.batch_cap_follows_units or figures["batch_cap_source"] != "reported"
            or newest.max_batch_cap <= 0 or units <= 0):
        return {}
    kept = (per_unit_before > 0
            and following_cap(per_unit_before, units, newest.max_batch_cap) == cap)
    return {"batch_cap_per_unit": per_unit_before if kept else cap / units,
            "max_batch_cap": newest.max_batch_cap}


def following_cap(per_unit: float, units: int, limit: int) -> int:
    """The batch cap that keeps `per_unit` records a unit at `units`, within the job's limit."""
    return max(1, min(limit, round(per_unit * units)))


def arrival_intervals(from_batches: list[Interval],
                      from_probes: list[Interval]) -> list[Interval]:
    """The batches' intervals up to the first probe interval, the probes' after it: a
    controller that just started keeps the batches' history, and from then on a step shows
    within a probe or two instead of a batch or two."""
    if not from_probes:
        return from_batches
    # The batches' intervals end in order: each spans two consecutive samples' starts, and a
    # window keeps its samples sorted by start (`window.QueryWindow`).
    before = bisect_right(from_batches, from_probes[0].start_ms, key=_end_ms)
    return from_batches[:before] + from_probes


def _end_ms(interval: Interval) -> int:
    return interval.end_ms


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


def _model(query_id: str, batches: Batches, found: ArrivalEstimate, cost: BatchCost,
           running: probes.RunningBacklog | None, following: Mapping[str, Any],
           settings: ModelSettings, capped_before: bool, **given: Any) -> QueryModel:
    """The model from the batches' summary and what came since (the arrival rate, the probe's
    backlog while a batch runs), built once."""
    arrival, figures = found.rate, batches.figures
    points = [(s.batch_start_ms / 1000, backlog_records(s, arrival, lag))
              for s, lag in zip(batches.recent, batches.recent_lags, strict=True)]
    if running is not None:  # seconds newer than the newest batch's own figure
        points.append((running.at_ms / 1000, running.records))
    backlog, trend = points[-1][1], slope_per_s(points)
    cost, capped = capped_cost(cost, batches.capped, trend, settings.level_shift_ratio,
                               capped_before)
    units, partitions = figures["units"], figures["source_partitions"]
    return QueryModel(
        query_id=query_id, **figures, **following, **given, arrival_rate=arrival,
        rate_per_unit=cost.per_unit, backlog_records=backlog,
        backlog_trend_records_per_s=trend, rate_measured_capped=capped,
        time_to_drain_s=drain_time_s(backlog, capacity(
            cost.per_unit, units / figures["task_skew"] if units <= partitions else units,
            cost.overhead_s, figures["batch_cap"]), arrival),
        batch_overhead_s=cost.overhead_s, overhead_source=cost.source,
        rate_samples=cost.batches if capped else len(batches.points),
        rate_error=cost.rate_error, useful_share=cost.useful_share,
        arrival_pending=found.pending_rate,
        arrival_ramp=found.ramp_per_s,
        backlog_seen=RUNNING_BATCH if running is not None else "batches")
