"""Capacity of a micro-batch query and the units that meet a demand: the sizing equations.

Owns the arithmetic shared by `model` (capacity, utilisation), `policy` (target units,
recommendations) and `topology` (projected output), and `Inflow`, what an upstream's resizing
will send a reader. Pure functions of plain numbers and one frozen value type.

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

An upstream that is resized while it has a backlog catches up by running flat out: for a
while it sends its reader more than its steady output (`Inflow`). Sizing the reader for that
peak buys capacity for a burst of a few seconds; ignoring it leaves the reader backlogged and
sized again a round later. The reader is sized for the steady rate plus the part of the burst
it cannot take as it comes, spread over the catch-up time, like its own backlog:

    waiting(C) = V × clip((A + R − C) / R, 0, 1)    D(C) = A + (B + waiting(C)) / catch_up_s

where V records arrive at R records/s on top of the steady arrivals A for V / R seconds, and
C is the reader's capacity; the target is the fewest units with D(C) ≤ ρ C. A is the reader's
λ, less the part of it that is its upstreams' catch-up already under way (`Inflow.passing`:
sized for, a burst would count twice, and once over, for good), plus their steady extra.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

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


MOST_UNITS = 1 << 16
"""Where `fewest_units` stops looking: beyond any cluster a query runs on."""


def fewest_units(meets: Callable[[int], bool]) -> int | None:
    """Smallest p ≥ 1 for which `meets(p)`, which must be monotone (false, then true for every
    larger p); None when even `MOST_UNITS` does not. For capacities with no closed form (a
    batch cap that follows the units up to a limit)."""
    if not meets(MOST_UNITS):
        return None
    low, high = 1, MOST_UNITS
    while low < high:
        middle = (low + high) // 2
        if meets(middle):
            high = middle
        else:
            low = middle + 1
    return low


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


@dataclass(frozen=True, slots=True)
class Inflow:
    """What a query's upstreams will send beyond what reaches it now, once they are resized
    (`topology` projects it, `policy` sizes for it; the equations are in the module docstring).
    """

    steady: float = 0.0
    """Records/s more than arrive now, for good: their steady output at their new size."""
    burst_records: float = 0.0
    """Records their catch-up sends on top of `steady`: the backlogs they will drain (their own
    and what their upstreams' catch-up hands them), times their selectivities."""
    burst_rate: float = 0.0
    """Records/s on top of `steady` while they catch up: flat out minus steady output."""
    passing: float = 0.0
    """Records/s of the reader's own λ that are its upstreams' catch-up, not what they send for
    good: the output beyond it of those catching up (`topology.surplus`), which ends once they
    have caught up (`topology.received`). Taken off λ wherever λ is sized for or judged; the
    rest of a catch-up still to come is `burst_records`."""

    @property
    def any(self) -> bool:
        return self.steady > 0 or self.burst_records > 0

    def waiting(self, steady_arrivals: float, capacity_rate: float) -> float:
        """Records of the burst that a reader with `capacity_rate` and `steady_arrivals` (its
        own λ, less what is passing, plus `steady`) cannot take as they come: they wait, a
        backlog, after the burst."""
        if self.burst_records <= 0 or self.burst_rate <= 0:
            return 0.0
        excess = (steady_arrivals + self.burst_rate - capacity_rate) / self.burst_rate
        return self.burst_records * min(1.0, max(0.0, excess))

    def rate_at(self, arrival_rate: float, capacity_rate: float, catch_up_s: float) -> float:
        """Records/s to provide for on top of the reader's own `arrival_rate` (λ) less what
        is `passing`, at `capacity_rate`: the steady extra and the burst's waiting records over
        the catch-up time."""
        steady = arrival_rate - self.passing + self.steady
        return self.steady + self.waiting(steady, capacity_rate) / catch_up_s

    def plus(self, other: Inflow) -> Inflow:
        """Two upstreams' extras together (their bursts taken to coincide: the worst case);
        `passing` is the reader's own (`topology.received`)."""
        return Inflow(self.steady + other.steady, self.burst_records + other.burst_records,
                      self.burst_rate + other.burst_rate)


NO_INFLOW = Inflow()
