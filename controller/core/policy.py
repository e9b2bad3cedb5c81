"""The scaling policy: from a query's `model.QueryModel` and `state.ControlState` to a verdict.

Owns when a query is backlogged or quiet, the choice between scaling the knob its job names
(`knobs`: input parallelism or state partitions), asking for executors, holding and
recommending, and the reason sentence of every verdict. Pure: `now_ms` comes in,
a `results.Verdict` comes out. `topology.plan` calls `decide` for every query in topological
order, passing the extra arrivals an upstream's resizing will send (`inflow`); `loop` acts.

Sizing (one step, no probing; the equations are in `sizing`): the demand is the arrivals plus
the backlog spread over the catch-up time, D = max(λ − passing, forecast peak) + inflow +
B / catch_up_s, and the target is the fewest units whose capacity, per-batch overhead
included, meets D at the target utilisation; then bounded (`parallelism.knob_range`). When the task
slots cap it and the job runs on a cluster that may grow, the verdict asks for executors first
(`knobs`). An upstream's inflow is its steady extra plus the part of its catch-up burst that
those units cannot take as it comes; passing, the part of λ that is an upstream's catch-up
already under way, is neither sized for nor judged a backlog (`sizing.Inflow`). When no number
of units can (the overhead eats the batch time) the verdict recommends a bigger batch cap; at
the upper bound (the executors at the job's maximum too) it sheds the job's low-priority
records, or recommends throttling the producers with the numbers (`ceiling`), and lifts
shedding before it scales anything down.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

from controller.core.ceiling import at_ceiling, lift
from controller.core.judgement import ineffective_sentence, skew, skew_note
from controller.core.model import BROKER, QueryModel
from controller.core.objectives import MAX_DELAY, Band, CatchUp, band, catch_up
from controller.core.parallelism import (
    CORES_WANTED,
    INEFFECTIVE,
    ExecutorRequest,
    KnobRange,
    cores_wanted,
    executors_kept,
    executors_wanted,
    knob_range,
    on_cluster,
    running_executors,
    within_cluster,
)
from controller.core.results import Hold, NotReady, Recommend, Scale, Verdict
from controller.core.sizing import (
    NO_INFLOW,
    Inflow,
    batch_cap_needed,
    drain_time_s,
    fewest_units,
    required_units,
)
from controller.core.state import ControlState
from controller.core.wording import load, num, passing, pct, pressure, units, units_of
from controller.settings import PolicySettings
from schemas.knobs import EXECUTORS

__all__ = ["backlog_causes", "decide", "executors_to_keep", "for_query", "is_quiet", "num",
           "pct"]


def demand(model: QueryModel, settings: PolicySettings, inflow: float = 0.0,
           passing: float = 0.0) -> float:
    """Records/s to provide for: arrivals (where a ramp will have taken them, less what is
    `passing`, plus an upstream's projected extra) and the backlog spread over the catch-up
    time."""
    return (arriving_ahead(model, settings, passing) + inflow
            + max(0.0, model.backlog_records) / settings.catch_up_s)


def arriving_ahead(model: QueryModel, settings: PolicySettings, passing: float = 0.0) -> float:
    """λ less an upstream's catch-up `passing` through it (`sizing.Inflow.passing`), or on a
    rising ramp where that will be `ramp_horizon_s` from now, or the peak its repeating load
    reaches within the lead (`season`: no catch-up in it), whichever is highest."""
    ramped = model.arrival_rate - passing + model.arrival_ramp * settings.ramp_horizon_s
    return max(ramped, model.forecast.peak) if model.forecast is not None else ramped


def anticipating(model: QueryModel) -> bool:
    """The repeating load will exceed the current size's capacity within the lead. Not high
    water: the band's own reaction handles a peak the size still carries, and a forecast
    that only grazes the band would add a step of its own to every rise."""
    return model.forecast is not None and model.forecast.peak > model.capacity


def inflow_rate(model: QueryModel, settings: PolicySettings, inflow: Inflow,
                capacity_rate: float) -> float:
    """Records/s the upstreams add for a query with `capacity_rate` (`sizing.Inflow`), beyond
    its λ less what is passing."""
    return inflow.rate_at(model.arrival_rate, capacity_rate, settings.catch_up_s)


def target_units(model: QueryModel, settings: PolicySettings,
                 inflow: Inflow = NO_INFLOW) -> int | None:
    """Fewest units that meet the demand at the target utilisation (None: no number can).

    An upstream's catch-up burst counts only as far as the units cannot take it as it comes,
    so more units need less of it: the smallest that suffice are searched from the size for
    the steady rate up. When none up to `max_parallelism` drains the burst in time, the answer
    is `max_parallelism` (the most the policy would ask for), or the steady size if larger.
    """
    steady = _units_for(model, settings, inflow.steady, inflow.passing)
    if steady is None or inflow.burst_records <= 0:
        return steady
    ceiling = max(steady, settings.max_parallelism)
    for size in range(steady, ceiling + 1):
        extra = inflow_rate(model, settings, inflow, _capacity(model, size))
        needed = _units_for(model, settings, extra, inflow.passing)
        if needed is not None and needed <= size:
            return size
    return ceiling


def _units_for(model: QueryModel, settings: PolicySettings, inflow: float,
               passing: float) -> int | None:
    need = demand(model, settings, inflow, passing)
    if linear(model) or need <= 0:
        return required_units(need, model.rate_per_unit, settings.target_utilisation,
                              model.batch_overhead_s, model.batch_cap)
    return fewest_units(lambda p: need <= settings.target_utilisation * _capacity(model, p))


def linear(model: QueryModel) -> bool:
    """Capacity has a closed form in the units: no contention, a batch cap that stays."""
    return model.batch_cap_per_unit <= 0 and model.scalability.contention <= 0


def _capacity(model: QueryModel, units: int) -> float:
    """Capacity at `units` as the sizing counts it (skew aside)."""
    return model.capacity_at(units, skewed=False)


def backlog_causes(model: QueryModel, settings: PolicySettings,
                   inflow: Inflow = NO_INFLOW) -> list[str]:
    """Why the query counts as backlogged (empty when it does not)."""
    causes = []
    extra = inflow_rate(model, settings, inflow, model.capacity)
    # Overload estimated from rates counts only when the backlog agrees (grows faster than
    # noise, or is already above the floor): a small flat or shrinking backlog refutes it.
    corroborated = (model.backlog_trend_records_per_s > settings.backlog_growth_records_per_s
                    or model.backlog_records > settings.backlog_floor_records)
    high_water = model.capacity * settings.high_water_utilisation
    arriving = model.arrival_rate - inflow.passing  # an upstream's catch-up passing: it ends
    if arriving > high_water and corroborated:
        causes.append("overload")
    # An upstream's resizing is a forecast, not noise: its own backlog already corroborated it.
    # A forecast of less extra than the backlog growth that counts as noise is noise too (an
    # upstream that is catching up projects a few records/s from rounding). A burst counts
    # only as far as the current capacity cannot take it as it comes.
    if extra > settings.backlog_growth_records_per_s and arriving + extra > high_water:
        causes.append("upstream")
    if model.backlog_records > settings.backlog_floor_records:
        # Growth says "the arrival rate lags": true of a rate timed by batch starts, not of
        # one the broker gives each second. Then a burst that grew the backlog while λ stays
        # within capacity is drained at the current size, unless that is too slow. The growth
        # is arrivals λ has not seen yet: it counts when λ and it leave the band, as overload
        # does; under high water the query takes them by running longer batches, whose overrun
        # of the trigger the backlog counts (noise that crosses the floor once batches last
        # longer than the trigger: the batch cap following the units lets them).
        growth = model.backlog_trend_records_per_s
        if (growth > settings.backlog_growth_records_per_s
                and model.arrival_timed_by != BROKER and arriving + growth > high_water):
            causes.append("growing")
        drain_s = (model.time_to_drain_s if inflow.passing <= 0 else
                   drain_time_s(model.backlog_records, model.capacity, arriving))
        if drain_s > settings.catch_up_s:
            causes.append("slow_drain")
    if model.backlog_records > 0 and any(
            s.objective == MAX_DELAY and s.met is False for s in model.standings()):
        causes.append("delay")
    return causes


def rising(model: QueryModel) -> bool:
    """The newest arrivals depart upwards from λ, unconfirmed (`arrival`): a size for λ now
    would be one for the rate before the step. The backlog of a step shows at the broker within
    a second or two (mid-batch), before the new level is confirmed; a spike that will not be
    confirmed is drained at the current size."""
    return model.arrival_pending is not None and model.arrival_pending > model.arrival_rate


KEPT_UP_SHARE = 0.8
"""λ counts as kept up with when the newest `arrival_window_s` put through at least this share
of it (the noise band of `ModelSettings.level_agreement`)."""


def measuring_cost(model: QueryModel, causes: Sequence[str], inflow: Inflow = NO_INFLOW) -> bool:
    """Whether to wait one batch before sizing: the backlog is judged on a μ that is a lower
    bound, which the running batch will correct (`QueryModel.cost_measured_by_running_batch`),
    and λ is a level the query kept up with, so the backlog is a burst it may drain at its size
    (bench.reaction's spike on a job that ran batches of one size: 2 → 4 on the bound, where
    the measured cost drains it in half the catch-up time). Not when λ outgrew what the query
    put through (a step needs units however its cost splits), nor on a ramp or a forecast
    inflow. The wait lasts one batch: once that batch reports, μ is no bound any more."""
    return (model.cost_measured_by_running_batch
            and set(causes) <= {"overload", "slow_drain", "delay"}
            and model.arrival_ramp <= 0 and not inflow.any
            and model.recent_throughput >= KEPT_UP_SHARE * model.arrival_rate)


def unsure_capacity(model: QueryModel, causes: Sequence[str], settings: PolicySettings,
                    inflow: Inflow = NO_INFLOW) -> str | None:
    """What the query's capacity lacks to bear a resizing on its upstreams' forecast alone
    (no backlog of its own: `causes` is only 'upstream'); None when it can. μ measured with
    no per-batch cost told apart is a lower bound: a cheap job's batches, small and alike,
    put it anywhere from a tenth of its real rate up, and the forecast's extra units would
    be spent on that gap. A measured μ is known within its error (`QueryModel.rate_error`):
    a forecast that outgrows high water by less than `CONFIDENCE_Z` of those errors, and stays
    within the capacity, may be one the query already takes. Its own backlog, a fitted cost,
    or a forecast beyond that error is the evidence it waits for. The forecast is the one
    `_scale_up` sizes for (a ramp's or a repeating load's included), and a repeating load that
    outgrows the capacity within the lead is its own evidence (`anticipating`): the query
    would be sized ahead for it with no upstream forecast at all."""
    if list(causes) != ["upstream"] or anticipating(model):
        return None
    if model.overhead_source == "assumed_zero":
        return (f"{units(model.units)} × {num(model.rate_per_unit)}/s is a lower bound, "
                "measured on batches too alike to tell their fixed cost from their records: "
                "not resized on the forecast alone; waiting for its own backlog or a fitted "
                "per-batch cost")
    margin = CONFIDENCE_Z * model.rate_error
    forecast = (arriving_ahead(model, settings, inflow.passing)
                + inflow_rate(model, settings, inflow, model.capacity))
    # Beyond the capacity itself, however uncertain: a step upstream is no rounding error.
    doubt = min(1 + margin, 1 / settings.high_water_utilisation)
    if forecast > model.capacity * settings.high_water_utilisation * doubt:
        return None
    seen = f"{model.rate_samples} batches" if model.rate_samples else "as last measured"
    known = ("rests on one batch" if math.isinf(margin) else
             f"is known within ±{pct(margin)} ({seen})")
    return (f"its capacity, {num(model.capacity)}/s, {known}, and the {num(forecast)}/s "
            f"forecast outgrows {pct(settings.high_water_utilisation)} of it by less than "
            "that: not resized on the forecast alone; waiting for its own backlog, or more "
            "batches or a larger forecast to tell it apart")


CONFIDENCE_Z = 2.0
"""Standard errors of μ within which a forecast may be one the query already takes (about
95 % of them, were the batches' errors normal and many; from the fewest a trend takes, 3, a
t-quantile would be twice as wide: the rule is a guard against rounding, not a test)."""


def is_quiet(model: QueryModel, settings: PolicySettings) -> bool:
    """A scale-down candidate: utilisation (overhead included) under low water, no backlog;
    and the peak its repeating load reaches within the lead under low water too, so a size
    taken ahead of a rise is the band's to keep, not shed while the rise is still to come."""
    peak = model.forecast.peak if model.forecast is not None else 0.0
    return (max(model.arrival_rate, peak) < settings.low_water_utilisation * model.capacity
            and model.backlog_records <= settings.backlog_floor_records
            and model.backlog_trend_records_per_s <= settings.backlog_growth_records_per_s)


def gate(state: ControlState, now_ms: int) -> Hold | None:
    """No decision while a tuple is in flight or the query is cooling down."""
    flight = state.in_flight
    if flight is not None:
        what = (f"{flight.parameter} {flight.value}" if flight.scaling
                else f"promotion of {flight.instance}")
        return Hold(f"waiting for the ack of control {flight.control_id} ({what}, epoch "
                    f"{flight.epoch})")
    if now_ms < state.cooldown_until_ms and not state.follow_up:
        left_s = (state.cooldown_until_ms - now_ms) / 1000
        return Hold(f"cooling down after the last actuation, {left_s:.0f} s left")
    return None


def decide(model: QueryModel, state: ControlState, now_ms: int, settings: PolicySettings,
           inflow: Inflow = NO_INFLOW, inflow_from: str = "") -> Verdict:
    """The verdict for one query now; `inflow` is what its upstreams' resizing will send
    beyond what arrives now (`topology`), named by `inflow_from`. Its reason ends with where
    the query stands against each objective its job states."""
    verdict = with_batch_cap(model, _decide(model, state, now_ms, settings, inflow,
                                            inflow_from))
    note = standing_note(model)
    return replace(verdict, reason=verdict.reason + note) if note else verdict


def _decide(model: QueryModel, state: ControlState, now_ms: int, settings: PolicySettings,
            inflow: Inflow, inflow_from: str) -> Verdict:
    held = gate(state, now_ms)
    if held is not None:
        return Hold(held.reason, model.figures())
    settings, goal = for_query(model, settings)
    if state.follow_up and now_ms < state.cooldown_until_ms:
        return _follow_up(model, state)
    causes = backlog_causes(model, settings, inflow)
    if causes:
        if rising(model):
            return Hold(f"backlogged ({pressure(model, inflow, inflow_from)}) while the arrival "
                        f"rate rises unconfirmed: newest {num(model.arrival_pending or 0.0)}/s "
                        f"against λ {num(model.arrival_rate)}/s; sized once it is confirmed or "
                        "falls back", model.figures())
        if measuring_cost(model, causes, inflow):
            return Hold(f"backlogged ({pressure(model, inflow, inflow_from)}) at λ "
                        f"{num(model.arrival_rate)}/s, which it kept up with; {units(model.units)} "
                        f"× {num(model.rate_per_unit)}/s is a lower bound, measured on "
                        "batches too alike to tell their fixed cost from their records; the "
                        "running batch, larger than any measured, tells them apart when it "
                        "reports: decided then", model.figures())
        unsure = unsure_capacity(model, causes, settings, inflow)
        if unsure is not None:
            return Hold(f"its own backlog does not call for more units "
                        f"({pressure(model, inflow, inflow_from)}); {unsure}",
                        model.figures())
        return _scale_up(model, state, now_ms, settings, inflow, inflow_from, goal,
                         forecast=causes == ["upstream"])
    if model.shedding.active and settings.shed_at_ceiling:  # lifted before any scale-down
        lifted = lift(model, settings)
        if isinstance(lifted, Hold):  # still needed: units, if the ceiling rose, do it instead
            grown = _scale_up(model, state, now_ms, settings, inflow, inflow_from, goal)
            return grown if isinstance(grown, Scale) else _carrying_wants(lifted, grown)
        return lifted
    if anticipating(model):  # sized ahead, not backlogged yet: never a shedding
        ahead = _scale_up(model, state, now_ms, settings, inflow, inflow_from, goal,
                          behind=f"not backlogged, but {_forecast(model)}; {load(model)}",
                          forecast=True)
        if isinstance(ahead, Scale):
            return ahead
        # Never a release beside cores wanted: the peak's units keep their slots
        # (`executors_to_keep`).
        return _carrying_wants(_not_backlogged(model, state, now_ms, settings, inflow,
                                               inflow_from), ahead)
    return _not_backlogged(model, state, now_ms, settings, inflow, inflow_from)


def _not_backlogged(model: QueryModel, state: ControlState, now_ms: int,
                    settings: PolicySettings, inflow: Inflow, inflow_from: str) -> Verdict:
    """Scaled down once quiet long enough, else its spare executors released, else held."""
    if state.quiet_since_ms is not None and not inflow.any:
        verdict = _scale_down(model, now_ms - state.quiet_since_ms, settings)
    else:
        found = skew(model, settings)  # early warning only; unmeasured key skew is no news
        held = _unbacklogged(model, settings, inflow, inflow_from)
        verdict = Hold(f"{held}: {load(model)}, backlog {num(model.backlog_records)} records"
                       f"{f'; {found.describe()}' if found else ''}", model.figures())
    if isinstance(verdict, Scale) or inflow.any:
        return verdict
    return _release_executors(model, state, now_ms, settings) or verdict


def executors_to_keep(model: QueryModel, settings: PolicySettings) -> int | None:
    """The executors the query needs, when it holds more (None: none spare, or releasing is
    off): the slots of its units now, or of those the load needs at the target utilisation if
    more (`target_units`, a repeating load's peak ahead included), so a query within band but
    above its target keeps room to grow."""
    if not settings.release_spare_executors or not on_cluster(model):
        return None  # before the sizing: every query is asked every cycle
    return _kept_for(model, target_units(model, settings))


def _kept_for(model: QueryModel, wanted: int | None) -> int | None:
    return executors_kept(model, model.units if wanted is None
                          else max(model.units, model.units_at(wanted)))


def _release_executors(model: QueryModel, state: ControlState, now_ms: int,
                       settings: PolicySettings) -> Scale | None:
    """The executors beyond `executors_to_keep` given back to the cluster (its other jobs or
    applications) once they have been spare for `scale_down_stabilisation_s` (`spared`): more
    raise capacity only with more units, which a scale-up asks for with executors anyway. Not
    while a quiet query's knob is still to step down: its release follows that, in one swap."""
    spare_since = state.spare_since_ms
    if (not settings.release_spare_executors or spare_since is None
            or now_ms - spare_since < settings.scale_down_stabilisation_s * 1000):
        return None  # `spared` set it only on a cluster, with executors to spare
    wanted = target_units(model, settings)
    kept = _kept_for(model, wanted)
    if kept is None or (state.quiet_since_ms is not None and wanted is not None
                        and wanted < model.parallelism):
        return None
    running, spare_s = running_executors(model), (now_ms - spare_since) / 1000
    return Scale(EXECUTORS, running, kept,
                 f"{units(model.units)} of {model.knob} need {kept} of its {running} executors "
                 f"× {model.executor_cores} cores ({load(model)}), {num(spare_s)} s without a "
                 f"backlog: releasing {(running - kept) * model.executor_cores} cores to the "
                 "cluster", {**model.figures(), "target": float(kept)})


def _carrying_wants(verdict: Verdict, tried: Verdict) -> Verdict:
    """`verdict`, with the cores a scale-up `tried` and not taken wants: the cluster's
    division still counts them (a query held by shedding, or not sized ahead)."""
    wanted = 0.0 if isinstance(tried, NotReady) else tried.figures.get(CORES_WANTED, 0.0)
    return _wanting(verdict, wanted)


def with_batch_cap(model: QueryModel, verdict: Verdict) -> Verdict:
    """A resizing of the query's knob with the batch cap that keeps the records per unit of a
    batch (`QueryModel.batch_cap_at`), when the cap follows the units and would change."""
    if not isinstance(verdict, Scale) or verdict.parameter != model.knob:
        return verdict
    cap = model.batch_cap_at(model.units_at(verdict.target))
    if model.batch_cap_per_unit <= 0 or cap == model.batch_cap:
        return verdict
    kept = ("the job's limit" if cap == model.max_batch_cap
            else f"{num(model.batch_cap_per_unit)} a unit, as before")
    return replace(verdict, batch_cap=cap,
                   figures={**verdict.figures, "batch_cap_target": float(cap)},
                   reason=f"{verdict.reason}; batches of at most {num(cap)} records "
                          f"(were {num(model.batch_cap)}): {kept}")


def _share_of_capacity(arriving: float, capacity: float) -> str:
    if capacity <= 0:  # no batch measured with rows yet
        return f"{num(arriving)}/s with no capacity measured"
    return f"{pct(arriving / capacity)} of capacity"


def _unbacklogged(model: QueryModel, settings: PolicySettings, inflow: Inflow,
                  inflow_from: str) -> str:
    """Why a query that is not backlogged holds: only its upstreams' catch-up passing through
    would make it so; over capacity by the rates alone, which its backlog does not confirm
    (small, and growing no faster than noise); a backlog growing within band; or within
    band."""
    arriving = model.arrival_rate - inflow.passing
    if inflow.passing > 0 and backlog_causes(model, settings, replace(inflow, passing=0.0)):
        return (f"not backlogged but for {inflow_from or 'upstream'}'s catch-up passing "
                f"through ({passing(inflow, inflow_from)}; without it, "
                f"{_share_of_capacity(arriving, model.capacity)})")
    high_water = model.capacity * settings.high_water_utilisation
    if model.arrival_rate > high_water:
        return (f"arrivals read over {pct(settings.high_water_utilisation)} of capacity, not "
                f"confirmed by the backlog (at most {num(settings.backlog_floor_records)} "
                f"records, changing {num(model.backlog_trend_records_per_s)}/s)")
    growth = model.backlog_trend_records_per_s
    if (model.backlog_records > settings.backlog_floor_records
            and growth > settings.backlog_growth_records_per_s
            and model.arrival_timed_by != BROKER):  # `backlog_causes`: under high water
        return (f"within band, its backlog growing {num(growth)}/s: arrivals and that growth, "
                f"{num(arriving + growth)}/s, stay under "
                f"{pct(settings.high_water_utilisation)} of capacity, taken in longer batches")
    return "within band"


def for_query(model: QueryModel, settings: PolicySettings) -> tuple[PolicySettings, CatchUp]:
    """The settings a query is judged by: its job's objectives set the drain time it is
    sized for (`objectives.catch_up`) and its utilisation band (`objectives.band`); the
    result names the objective that set either."""
    goal = catch_up(model.objectives, model.trigger_interval_s, settings.catch_up_s)
    if goal.objective:
        settings = replace(settings, catch_up_s=goal.seconds)
    stated = band(model.objectives,
                  None if model.overhead_source == "assumed_zero" else model.batch_overhead_s,
                  settings.reconfiguration_pause_s,
                  Band(settings.low_water_utilisation, settings.target_utilisation,
                       settings.high_water_utilisation))
    if stated is None:
        return settings, goal
    if not goal.objective:
        goal = CatchUp(goal.seconds, MAX_DELAY, model.objectives.max_delay_s)
    return replace(settings, low_water_utilisation=stated.low,
                   target_utilisation=stated.target,
                   high_water_utilisation=stated.high), goal


def standing_note(model: QueryModel) -> str:
    """'; delay 4 s of at most 30 s: met' for each objective the job states."""
    return "".join(f"; {s.describe()}" for s in model.standings())


def _scale_up(model: QueryModel, state: ControlState, now_ms: int, settings: PolicySettings,
              inflow: Inflow, inflow_from: str, goal: CatchUp, behind: str = "",
              forecast: bool = False) -> Verdict:
    """Sized for the demand in one step (`_sized_up`); on a shared cluster whose free cores
    are divided, with the cores it wants beyond those it runs among the figures
    (`CORES_WANTED`), granted or not."""
    verdict, cores = _sized_up(model, state, now_ms, settings, inflow, inflow_from, goal, behind,
                               forecast)
    return verdict if model.cluster_grant is None else _wanting(verdict, float(cores))


def _wanting(verdict: Verdict, cores: float) -> Verdict:
    """`verdict` with the cores its query wants among its figures (none: as it is)."""
    if cores <= 0 or isinstance(verdict, NotReady):
        return verdict
    figures: dict[str, float] = {**verdict.figures, CORES_WANTED: cores}
    return replace(verdict, figures=figures)


def _sized_up(model: QueryModel, state: ControlState, now_ms: int, settings: PolicySettings,
              inflow: Inflow, inflow_from: str, goal: CatchUp, behind: str,
              forecast: bool) -> tuple[Verdict, int]:
    """Sized for the demand in one step, and the cores it wants beyond those it runs;
    `behind` says why, when it is not a backlog. The backlog sized for is the one the new
    size will find: what waits now and what arrives beyond the capacity while the change is
    applied. `forecast`: the demand is one foreseen (a repeating load's peak, an upstream's
    resizing), not the query's own backlog."""
    behind = behind or f"{pressure(model, inflow, inflow_from)}; {load(model)}"
    waiting = backlog_during_change(model, state, settings, inflow.passing)
    sized = replace(model, backlog_records=model.backlog_records + waiting)
    limits = knob_range(model, settings, state, now_ms)
    wanted, short, meets = _units_wanted(model, sized, settings, inflow, limits, forecast,
                                         state, now_ms)
    if wanted is None:
        return _raise_batch_cap(model, limits, model.figures(), settings, inflow), 0
    request = executors_wanted(model, wanted, settings, state, now_ms)
    cores = cores_wanted(model, request) if request is not None else 0
    if cores and model.cluster_grant is not None and model.cluster_grant.pending:
        return Hold(f"{behind}; {units_of(model, wanted)} wanted, {num(cores)} more cores "
                    "than its task slots: waiting for the next reading of the shared cluster's "
                    "status, whose free cores go to every query that wants them by then",
                    model.figures()), cores
    granted = within_cluster(model, request) if request is not None else None
    if granted is not None:
        cut = (f"; {request.executors} wanted, no room for more: {model.cluster_grant.note}"
               if request is not None and model.cluster_grant is not None
               and granted.executors < request.executors else "")
        return _add_executors(model, granted, wanted, behind, settings, goal, cut), cores
    target = min(max(wanted, limits.low), limits.high)
    extra = inflow_rate(model, settings, inflow, _capacity(model, model.units_at(target)))
    figures = {**_sizing_figures(model, sized, settings, inflow, extra), "target": float(target),
               "required": float(wanted), "backlog_during_change": waiting}
    # Knob values, not units: a knob below its floor (input parallelism under the partitions,
    # more of them than task slots) runs as many units at any value up to the floor.
    if target <= model.parallelism or model.units_at(target) <= model.units:
        memory = state.ineffective
        if memory is not None and limits.high_set_by == INEFFECTIVE:
            return Hold(f"{ineffective_sentence(memory, model, now_ms, settings)} ({behind})",
                        figures, "cannot_help"), cores
        if model.parallelism >= limits.high or model.units_at(limits.high) <= model.units:
            return _throttle(model, limits, figures, settings, inflow), cores
        return Hold(f"backlogged ({behind}) but {units_of(model, wanted)} are needed and "
                    f"{model.units} run{skew_note(model, settings)}", figures), cores
    none_meets = _none_meets(model, target, limits, forecast, meets) if short else ""
    arriving = arriving_ahead(model, settings, inflow.passing) + extra
    sizing = _sizing(sized, target, wanted, limits, settings, arriving, goal, none_meets)
    change = (f" (with the {num(waiting)} records that arrive beyond its capacity while the "
              f"change is applied, {num(_change_s(state, settings))} s)" if waiting > 0 else "")
    return Scale(model.knob, model.parallelism, target,
                 f"{behind}; {sizing}{change}{skew_note(model, settings)}", figures), cores


def _units_wanted(model: QueryModel, sized: QueryModel, settings: PolicySettings,
                  inflow: Inflow, limits: KnobRange, forecast: bool, state: ControlState,
                  now_ms: int) -> tuple[int | None, bool, int]:
    """The units that meet the demand of `sized` (the model with the backlog the change will
    find); whether on a contended curve they are instead the fewest that do nearly as much as
    the most (`worth_it`, `short`); and then the units past the knob's limits that would meet
    it (0: none would). Short when no size meets it, though the most units still do the most;
    and for a forecast that only units past the limits meet, with no executors to come for
    them: on a curve whose last units add least, the most allowed buys little over the knee
    for a load that may not come (a reader sized 1 → 16 for its upstream's catch-up when 2
    carried 90 % of what 16 would). A backlog of its own still gets the most, and then the
    ceiling's shedding."""
    wanted = target_units(sized, settings, inflow)
    if model.scalability.contention <= 0 or model.parallelism >= limits.high:
        return wanted, False, 0
    if wanted is not None and (
            not forecast or wanted <= model.units_at(limits.high)
            or executors_wanted(model, wanted, settings, state, now_ms) is not None):
        return wanted, False, 0
    if forecast:
        return worth_it(model, limits), True, wanted or 0
    return worth_it(model, limits, partial(
        _arriving_at, arriving_ahead(model, settings, inflow.passing), model, settings,
        inflow)), True, 0


def _sizing_figures(model: QueryModel, sized: QueryModel, settings: PolicySettings,
                    inflow: Inflow, extra: float) -> dict[str, float]:
    """The figures of a sizing: the model's, the demand of `sized` (`_units_wanted`), and the
    upstreams' `inflow` (`extra` at the target) with its parts, when there are any."""
    figures = {**model.figures(), "demand": demand(sized, settings, extra, inflow.passing),
               "inflow": extra}
    if inflow.burst_records > 0:
        figures |= {"inflow_steady": inflow.steady, "burst_records": inflow.burst_records,
                    "burst_rate": inflow.burst_rate}
    if inflow.passing > 0:
        figures |= {"inflow_passing": inflow.passing}
    return figures


WORTH_IT_SHARE = 0.9
"""On a contended curve that no size meets the demand on, the share of the most units' work the
fewest units asked for do: of their capacity for a forecast (which may not come true), of their
drain rate for a backlog of the query's own (so it drains at most 11 % slower). The last units
add least."""


def worth_it(model: QueryModel, limits: KnobRange,
             arriving: Callable[[float], float] = lambda capacity: 0.0) -> int:
    """The lowest setting of the knob within `limits` whose capacity beyond what `arriving`
    says a capacity must first carry (records/s) is `WORTH_IT_SHARE` of the highest's; the
    highest when that one has none."""
    def beyond(setting: int) -> float:
        capacity = _capacity(model, model.units_at(setting))
        return capacity - arriving(capacity)

    most = beyond(limits.high)
    if most <= 0:
        return limits.high
    return next(p for p in range(limits.low, limits.high + 1)
                if beyond(p) >= WORTH_IT_SHARE * most)


def _arriving_at(ahead: float, model: QueryModel, settings: PolicySettings, inflow: Inflow,
                 capacity: float) -> float:
    """Records/s a query of `capacity` carries before it drains any backlog: λ `ahead`
    (`arriving_ahead`, the same at every capacity) and its upstreams' extra at that one."""
    return ahead + inflow_rate(model, settings, inflow, capacity)


def backlog_during_change(model: QueryModel, state: ControlState, settings: PolicySettings,
                          passing: float = 0.0) -> float:
    """Records that arrive beyond the current capacity while a resizing is applied (the
    query's last one took `ControlState.change_s`; before any, `change_prior_s`), but for an
    upstream's catch-up `passing` through (`Inflow.passing`: not sized for)."""
    return (max(0.0, model.arrival_rate - passing - model.capacity)
            * _change_s(state, settings))


def _change_s(state: ControlState, settings: PolicySettings) -> float:
    return settings.change_prior_s if state.change_s is None else state.change_s


def _add_executors(model: QueryModel, request: ExecutorRequest, wanted: int, behind: str,
                   settings: PolicySettings, goal: CatchUp, cut: str = "") -> Scale:
    """More task slots first; the knob follows as soon as they run (`knobs`). `cut` says why
    fewer were asked for than wanted (the shared cluster's division)."""
    running = running_executors(model)
    figures = {**model.figures(), "required": float(wanted),
               "target": float(request.executors), "then": float(request.then)}
    return Scale(
        EXECUTORS, running, request.executors,
        f"{behind}; {units_of(model, wanted)} wanted but {model.task_slots} task slots run "
        f"({running} executors × {model.executor_cores} cores): asking for "
        f"{request.executors} executors (the job's max {model.max_executors}{cut}) first, then "
        f"{model.knob} {model.parallelism} → {request.then} once they run"
        f"{skew_note(model, settings)}{goal.note()}", figures, then=request.then)


def _follow_up(model: QueryModel, state: ControlState) -> Hold | Scale:
    """The knob's value that the executors just applied were asked for with."""
    figures = {**model.figures(), "target": float(state.follow_up)}
    if state.follow_up <= model.parallelism:
        return Hold(f"executors applied; {model.knob} is already {model.parallelism}", figures)
    return Scale(model.knob, model.parallelism, state.follow_up,
                 f"the executors asked for run; {model.knob} follows as sized with them: "
                 f"{model.parallelism} → {state.follow_up} ({load(model)})", figures)


def _scale_down(model: QueryModel, quiet_ms: int, settings: PolicySettings) -> Hold | Scale:
    quiet_s = quiet_ms / 1000
    if quiet_s < settings.scale_down_stabilisation_s:
        return Hold(f"quiet ({load(model)}) for {quiet_s:.0f} s of the "
                    f"{settings.scale_down_stabilisation_s:.0f} s needed before scaling down",
                    model.figures())
    limits = knob_range(model, settings)
    wanted = target_units(model, settings)
    if wanted is None:  # cannot happen while quiet; never shrink on a figure we cannot size
        return Hold(f"quiet ({load(model)}) but no size meets the demand", model.figures())
    kept = math.ceil(model.parallelism * (1 - settings.max_scale_down_share))
    target = max(wanted, kept, limits.low)
    figures = {**model.figures(), "target": float(target), "required": float(wanted)}
    if target >= model.parallelism:
        kept_for = (f"{_forecast(model)}, which needs {units_of(model, wanted)}"
                    if model.forecast is not None and wanted >= model.parallelism
                    else f"already at the floor of {limits.low} units")
        return Hold(f"quiet ({load(model)}) but {kept_for}", figures)
    return Scale(model.knob, model.parallelism, target,
                 f"{load(model)}, below {pct(settings.low_water_utilisation)} for "
                 f"{quiet_s:.0f} s with backlog {num(model.backlog_records)} records; "
                 f"{units_of(model, wanted)} would do at {pct(settings.target_utilisation)}; "
                 f"stepping down {model.parallelism} → {target} (at most "
                 f"{pct(settings.max_scale_down_share)} of the units per step)", figures)


def _throttle(model: QueryModel, limits: KnobRange, figures: dict[str, float],
              settings: PolicySettings, inflow: Inflow) -> Verdict:
    """At the upper bound: shed, or advise what the producers may send, so the query keeps up
    at the target utilisation and still drains its backlog within the catch-up time."""
    top = model.units_at(limits.high)
    arriving = (model.arrival_rate - inflow.passing
                + inflow_rate(model, settings, inflow, model.capacity_at(top)))
    return at_ceiling(model, top, arriving, f"at {units(top)} ({limits.high_set_by})",
                      figures, settings)


def _raise_batch_cap(model: QueryModel, limits: KnobRange, figures: dict[str, float],
                     settings: PolicySettings, inflow: Inflow) -> Verdict:
    """No number of units meets the demand: with batches of N records and c seconds of
    overhead, at most N / c records/s get through however many units run."""
    top = model.units_at(limits.high)
    extra = inflow_rate(model, settings, inflow, _capacity(model, top))
    need = demand(model, settings, extra, inflow.passing)
    figures = {**figures, "demand": need, "inflow": extra}
    cap = batch_cap_needed(need, model.rate_per_unit, top, model.batch_overhead_s,
                           settings.target_utilisation)
    if cap is None:
        return _throttle(model, limits, figures, settings, inflow)
    figures |= {"batch_cap_needed": float(cap)}
    return Recommend(
        "raise_batch_cap", "max_offsets_per_trigger", float(cap),
        f"{load(model)}; the {num(model.batch_overhead_s)} s per-batch overhead dominates: "
        f"batches of {num(model.batch_cap)} records get at most "
        f"{num(model.batch_cap / model.batch_overhead_s)}/s through however many units run, "
        f"and {num(need)}/s are needed; raise max_offsets_per_trigger to at least {num(cap)} "
        f"(at {units(top)}) instead of adding units", figures)


def _sizing(model: QueryModel, target: int, wanted: int, limits: KnobRange,
            settings: PolicySettings, arriving: float, goal: CatchUp,
            none_meets: str = "") -> str:
    """How the target meets the demand; `arriving`: the records/s it carries before it drains
    the backlog (`arriving_ahead`, and the upstreams' extra at the target); `goal` the drain
    time it is sized for, and the objective that set it; `none_meets`: why this target when
    no size meets the demand (`_none_meets`)."""
    if target == wanted and not none_meets:
        return (f"{units_of(model, target)} drain it in {num(settings.catch_up_s)} s at "
                f"{pct(settings.target_utilisation)} utilisation{_ramp_note(model, settings)}"
                f"{goal.note()}")
    capacity = model.capacity_at(model.units_at(target))
    drain = drain_time_s(model.backlog_records, capacity, arriving)
    bound = (f"capped at {limits.high} by {limits.high_set_by}" if target < wanted
             else f"raised to the floor of {limits.low}")
    wants = none_meets or f"{units_of(model, wanted)} wanted, {bound}:"
    return (f"{wants} drains in {num(drain)} s at "
            f"{pct(arriving / capacity)} utilisation{_ramp_note(model, settings)}{goal.note()}")


def _none_meets(model: QueryModel, target: int, limits: KnobRange, forecast: bool,
                meets: int = 0) -> str:
    """Why `target` when no size within the limits meets the demand (`meets` units past them
    would, 0: none): the most allowed, or nearly as much (`worth_it`: capacity for a forecast,
    the drain's rate for a backlog)."""
    curve = (f"only {meets} units, past the most, meet it ({model.scalability.describe()});"
             if meets else f"no size meets it ({model.scalability.describe()});")
    if target == limits.high:
        return f"{curve} the most, {units_of(model, target)} ({limits.high_set_by}),"
    most = f"the most, {limits.high} ({limits.high_set_by}), would:"
    if forecast:
        return f"{curve} {units_of(model, target)} carry {pct(WORTH_IT_SHARE)} of what {most}"
    return f"{curve} {units_of(model, target)} drain it at {pct(WORTH_IT_SHARE)} of the rate {most}"


def _forecast(model: QueryModel) -> str:
    return model.forecast.describe() if model.forecast is not None else ""


def _ramp_note(model: QueryModel, settings: PolicySettings) -> str:
    """What rate ahead the size is for, when it is not λ: a ramp's or a repeating load's."""
    ramped = model.arrival_rate + model.arrival_ramp * settings.ramp_horizon_s
    if model.forecast is not None and model.forecast.peak > ramped:
        return f", sized for {num(model.forecast.peak)}/s: {_forecast(model)}"
    if model.arrival_ramp <= 0:
        return ""
    return (f", sized for {num(arriving_ahead(model, settings))}/s: arrivals climb "
            f"{num(model.arrival_ramp)}/s every second, and that is where they will be in "
            f"{num(settings.ramp_horizon_s)} s")

