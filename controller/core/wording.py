"""How numbers read in reason sentences and status lines: 12 400, 310, 3.5, ∞, 71%.

Owns only formatting, so `policy`, `judgement`, `topology` and `report` word figures alike,
and the fragments every scaling reason starts with: the query's `pressure` and `load`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from controller.core.model import QueryModel
    from controller.core.sizing import Inflow


def num(value: float) -> str:
    """12 400, 310, 3.5, ∞ — readable at a glance in a log line."""
    if math.isinf(value):
        return "∞"
    if abs(value) >= 100:
        return f"{value:,.0f}".replace(",", " ")
    return f"{value:.3g}"


def pct(ratio: float) -> str:
    return "∞%" if math.isinf(ratio) else f"{ratio * 100:.0f}%"


def units(count: int) -> str:
    return f"{count} unit" if count == 1 else f"{count} units"


def units_of(model: QueryModel, count: int) -> str:
    """'5 units of state_partitions': a reason names the knob it sizes."""
    return f"{units(count)} of {model.knob}"


def pressure(model: QueryModel, inflow: Inflow, inflow_from: str) -> str:
    """How far behind the query is and what its upstreams will add."""
    trend = model.backlog_trend_records_per_s
    direction = "growing" if trend >= 0 else "shrinking"
    seen = ("" if model.backlog_seen == "batches"
            else " (at the broker, beyond the running batch)")
    text = f"backlog {num(model.backlog_records)} records{seen} {direction} {num(abs(trend))}/s"
    if inflow.any:
        text += (f"; {inflow_from or 'upstream'} will send {num(inflow.steady)}/s more once "
                 "resized")
    if inflow.burst_records > 0:
        peak = model.arrival_rate - inflow.passing + inflow.steady + inflow.burst_rate
        text += (f", plus {num(inflow.burst_records)} records while catching up "
                 f"(up to {num(peak)}/s arriving)")
    if inflow.passing > 0:
        text += f"; {passing(inflow, inflow_from)}"
    return text


def passing(inflow: Inflow, inflow_from: str) -> str:
    """What of the query's arrivals its upstreams' catch-up is (`sizing.Inflow.passing`)."""
    return (f"{num(inflow.passing)}/s of its arrivals are {inflow_from or 'upstream'}'s "
            "catch-up, over once caught up: not sized for")


def load(model: QueryModel) -> str:
    """Arrivals against capacity, with how the capacity comes about."""
    verb = "exceeds" if model.arrival_rate > model.capacity else "within"
    if model.batch_overhead_s > 0 and model.batch_cap > 0:
        how = (f"{model.units} × {num(model.rate_per_unit)}/s per unit, "
               f"{num(model.batch_overhead_s)} s per batch of {num(model.batch_cap)}")
    elif model.batch_overhead_s > 0:
        how = (f"{model.units} × {num(model.rate_per_unit)}/s per unit, "
               f"{num(model.batch_overhead_s)} s per batch")
    else:
        how = f"{model.units} × {num(model.rate_per_unit)}/s per unit at 100% busy"
    if model.rate_measured_capped:
        how += f"; μ from the newest {model.rate_samples} batches, cut by the batch cap"
    return (f"arrival {num(model.arrival_rate)}/s {verb} capacity {num(model.capacity)}/s "
            f"({how}, utilisation {pct(model.utilisation)})")
