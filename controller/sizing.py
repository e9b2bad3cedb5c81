"""Capacity of a micro-batch query and the units that meet a demand: the sizing equations.

Owns the arithmetic shared by `model` (capacity, utilisation), `policy` (target units,
recommendations) and `topology` (projected output). Pure functions of plain numbers.

A micro-batch pays a fixed overhead c (planning, state store commit, task launch) on top of
its per-record work, so a batch of n records on p units is busy c + n / (μ p). A backlogged
query runs full batches of its cap N (maxOffsetsPerTrigger) back to back, hence

    capacity(p) = N / (c + N / (μ p))            (→ μ p when N is unbounded or c = 0)

A steady query with trigger interval T runs batches of λT; it keeps up as long as
c + λT / (μ p) ≤ T, and past that its batches grow towards N, so capacity(p) is also the
most it can sustain. Sizing asks for demand D ≤ ρ × capacity(p) at target utilisation ρ:

    p ≥ D N / (μ (ρ N − D c))                    (p ≥ D / (μ ρ) when N is unbounded)

which has no solution when ρ N ≤ D c: the overhead alone eats the batch time, and only a
bigger batch cap helps, N ≥ D c μ p / (ρ μ p − D) at a given p.
"""

from __future__ import annotations

import math

_EXACT = 1e-9
"""Keeps an exact fit (4.0000000001 units) from rounding up to the next unit."""


def capacity(per_unit: float, units: float, overhead_s: float, batch_cap: int) -> float:
    """Records/s `units` process running full batches back to back."""
    useful = per_unit * units
    if useful <= 0:
        return 0.0
    if batch_cap <= 0 or overhead_s <= 0:
        return useful
    return batch_cap / (overhead_s + batch_cap / useful)


def required_units(demand: float, per_unit: float, target_utilisation: float,
                   overhead_s: float = 0.0, batch_cap: int = 0) -> int | None:
    """Smallest p with demand ≤ target_utilisation × capacity(p); None when no p can."""
    if demand <= 0:
        return 1
    if per_unit <= 0:
        return None
    if batch_cap <= 0 or overhead_s <= 0:
        return max(1, math.ceil(demand / (per_unit * target_utilisation) - _EXACT))
    room = target_utilisation * batch_cap - demand * overhead_s
    if room <= 0:
        return None
    return max(1, math.ceil(demand * batch_cap / (per_unit * room) - _EXACT))


def batch_cap_needed(demand: float, per_unit: float, units: int, overhead_s: float,
                     target_utilisation: float) -> int | None:
    """Smallest cap N with which `units` meet `demand` at the target; None when even
    unbounded batches (capacity μ p) cannot."""
    useful = per_unit * units * target_utilisation
    if useful <= demand:
        return None
    return max(1, math.ceil(demand * overhead_s * per_unit * units / (useful - demand)
                            - _EXACT))


def drain_time_s(backlog: float, capacity_rate: float, arrival: float) -> float:
    """B / (capacity − λ); 0 without backlog, infinite when arrivals meet capacity."""
    if backlog <= 0:
        return 0.0
    return backlog / (capacity_rate - arrival) if capacity_rate > arrival else math.inf
