"""The scaling policy: from a query's `model.QueryModel` and `state.ControlState` to a verdict.

Owns when a query is backlogged or quiet, the sizing formula, the bounds of the knob, and the
reason sentence of every verdict. Pure: `now_ms` comes in, `results.Hold` or `results.Scale`
comes out; `loop` acts on it. A richer policy (state partitions, executors, pipelines) can
replace `decide` without touching the model or the loop.

Sizing (one step, no probing): p* = ceil((λ + B / catch_up_s) / (μ × target_utilisation)),
i.e. the units that process the arrivals plus the backlog spread over the catch-up time while
busy only `target_utilisation` of the time; then bounded (see `bounds`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from controller.model import QueryModel
from controller.results import INPUT_PARALLELISM, Hold, Scale
from controller.settings import PolicySettings
from controller.state import ControlState


@dataclass(frozen=True, slots=True)
class Bounds:
    low: int
    high: int
    high_set_by: str
    """What caps the knob ('task slots' or 'max_parallelism'), for the reason sentence."""


def bounds(model: QueryModel, settings: PolicySettings) -> Bounds:
    """Input parallelism below the topic's partition count changes nothing (Spark's
    minPartitions is a minimum) and above the task slots only queues tasks. When the partitions
    exceed the ceiling, the floor wins: the knob cannot go below it anyway."""
    low = max(settings.min_parallelism, model.source_partitions)
    high, set_by = settings.max_parallelism, "max_parallelism"
    if 0 < model.task_slots < high:
        high, set_by = model.task_slots, "task slots"
    return Bounds(low, max(high, low), set_by)


def required_units(arrival: float, backlog: float, per_unit: float,
                   settings: PolicySettings) -> int:
    """p* before bounds. The small epsilon keeps an exact fit (4.0000000001) from rounding up."""
    demand = arrival + max(0.0, backlog) / settings.catch_up_s
    return max(1, math.ceil(demand / (per_unit * settings.target_utilisation) - 1e-9))


def backlog_causes(model: QueryModel, settings: PolicySettings) -> list[str]:
    """Why the query counts as backlogged (empty when it does not)."""
    causes = []
    # The capacity estimate charges Spark's fixed per-batch cost to the records, so at low
    # rates (small batches) it reads low. Overload counts only when the backlog agrees: it
    # grows faster than noise, or is already above the floor. A small backlog that is flat or
    # shrinking refutes the estimate: the job keeps up by amortising that cost over bigger
    # batches.
    corroborated = (model.backlog_trend_records_per_s > settings.backlog_growth_records_per_s
                    or model.backlog_records > settings.backlog_floor_records)
    if model.arrival_rate > model.capacity * settings.high_water_utilisation and corroborated:
        causes.append("overload")
    if model.backlog_records > settings.backlog_floor_records:
        if model.backlog_trend_records_per_s > settings.backlog_growth_records_per_s:
            causes.append("growing")
        if model.time_to_drain_s > settings.catch_up_s:
            causes.append("slow_drain")
    return causes


def is_quiet(model: QueryModel, settings: PolicySettings) -> bool:
    return (model.utilisation < settings.low_water_utilisation
            and model.backlog_records <= settings.backlog_floor_records
            and model.backlog_trend_records_per_s <= settings.backlog_growth_records_per_s)


def gate(state: ControlState, now_ms: int) -> Hold | None:
    """No decision while a tuple is in flight or the query is cooling down."""
    if state.in_flight is not None:
        return Hold(f"waiting for the ack of control {state.in_flight.control_id} "
                    f"(parallelism {state.in_flight.target}, epoch {state.in_flight.epoch})")
    if now_ms < state.cooldown_until_ms:
        left_s = (state.cooldown_until_ms - now_ms) / 1000
        return Hold(f"cooling down after the last actuation, {left_s:.0f} s left")
    return None


def decide(model: QueryModel, state: ControlState, now_ms: int,
           settings: PolicySettings) -> Hold | Scale:
    """The verdict for one query now."""
    held = gate(state, now_ms)
    if held is not None:
        return Hold(held.reason, model.figures())
    if backlog_causes(model, settings):
        return _scale_up(model, settings)
    if state.quiet_since_ms is not None:
        return _scale_down(model, now_ms - state.quiet_since_ms, settings)
    return Hold(f"within band: {_load(model)}, backlog {num(model.backlog_records)} records",
                model.figures())


def _scale_up(model: QueryModel, settings: PolicySettings) -> Hold | Scale:
    limits = bounds(model, settings)
    wanted = required_units(model.arrival_rate, model.backlog_records, model.rate_per_unit,
                            settings)
    target = min(max(wanted, limits.low), limits.high)
    figures = {**model.figures(), "target": float(target), "required": float(wanted)}
    if target <= model.parallelism:
        action = "cannot_help" if model.parallelism >= limits.high else "hold"
        return Hold(f"backlogged ({_pressure(model)}; {_load(model)}) but {wanted} units "
                    f"are needed and {model.parallelism} run, at most {limits.high} "
                    f"({limits.high_set_by})", figures, action)
    sizing = _sizing(model, target, wanted, limits, settings)
    return Scale(INPUT_PARALLELISM, model.parallelism, target,
                 f"{_pressure(model)}; {_load(model)}; {sizing}", figures)


def _scale_down(model: QueryModel, quiet_ms: int, settings: PolicySettings) -> Hold | Scale:
    quiet_s = quiet_ms / 1000
    if quiet_s < settings.scale_down_stabilisation_s:
        return Hold(f"quiet ({_load(model)}) for {quiet_s:.0f} s of the "
                    f"{settings.scale_down_stabilisation_s:.0f} s needed before scaling down",
                    model.figures())
    limits = bounds(model, settings)
    wanted = required_units(model.arrival_rate, model.backlog_records, model.rate_per_unit,
                            settings)
    target = max(wanted, model.parallelism - settings.max_scale_down_step, limits.low)
    figures = {**model.figures(), "target": float(target), "required": float(wanted)}
    if target >= model.parallelism:
        return Hold(f"quiet ({_load(model)}) but already at the floor of {limits.low} units",
                    figures)
    return Scale(INPUT_PARALLELISM, model.parallelism, target,
                 f"{_load(model)}, below {pct(settings.low_water_utilisation)} for "
                 f"{quiet_s:.0f} s with backlog {num(model.backlog_records)} records; "
                 f"{_units(wanted)} would do at {pct(settings.target_utilisation)}; stepping "
                 f"down {model.parallelism} → {target} (at most "
                 f"{settings.max_scale_down_step} per step)", figures)


def _pressure(model: QueryModel) -> str:
    trend = model.backlog_trend_records_per_s
    direction = "growing" if trend >= 0 else "shrinking"
    return f"backlog {num(model.backlog_records)} records {direction} {num(abs(trend))}/s"


def _load(model: QueryModel) -> str:
    verb = "exceeds" if model.arrival_rate > model.capacity else "within"
    return (f"arrival {num(model.arrival_rate)}/s {verb} capacity {num(model.capacity)}/s "
            f"({model.units} × {num(model.rate_per_unit)}/s per unit at 100% busy, "
            f"utilisation {pct(model.utilisation)})")


def _sizing(model: QueryModel, target: int, wanted: int, limits: Bounds,
            settings: PolicySettings) -> str:
    if target == wanted:
        return (f"{target} units drain it in {num(settings.catch_up_s)} s at "
                f"{pct(settings.target_utilisation)} utilisation")
    capacity = model.rate_per_unit * target
    drain = (model.backlog_records / (capacity - model.arrival_rate)
             if capacity > model.arrival_rate else math.inf)
    bound = (f"capped at {limits.high} by {limits.high_set_by}" if target < wanted
             else f"raised to the floor of {limits.low}")
    return (f"{wanted} units wanted, {bound}: drains in {num(drain)} s at "
            f"{pct(model.arrival_rate / capacity)} utilisation")


def _units(count: int) -> str:
    return f"{count} unit" if count == 1 else f"{count} units"


def num(value: float) -> str:
    """12 400, 310, 3.5, ∞ — readable at a glance in a log line."""
    if math.isinf(value):
        return "∞"
    if abs(value) >= 100:
        return f"{value:,.0f}".replace(",", " ")
    return f"{value:.3g}"


def pct(ratio: float) -> str:
    return "∞%" if math.isinf(ratio) else f"{ratio * 100:.0f}%"
