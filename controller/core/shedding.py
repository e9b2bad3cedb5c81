"""Load shedding decided at the ceiling, within the bound the job sets (pure).

Borealis's load shedding with its quality control: when no more units, executors or cluster
room are left, a query that cannot keep up drops a share of its least valuable records
rather than fall further behind; the job says which records may go (`Job.low_priority`) and
the highest share of them that may (its `max_shed_fraction`, f_max). The job reports per
batch the rows it read, the low-priority ones among them (their share ℓ), the rows shed and
the fraction f in force; μ is measured on the rows processed, shed rows left out
(`batches.rate_points`).

With f in force a unit reads μ / (1 − ℓ f) records/s (a shed record costs next to nothing),
so the query's capacity in records read, per-batch overhead and batch cap included, is
`QueryModel.capacity_at(units, 1 − ℓ f)`. The fraction needed is the smallest multiple of
`SHED_STEP` whose read capacity carries the arrivals and the backlog's drain at the target
utilisation:

    λ + B / catch_up_s ≤ u · C_read(f)

Raised, f goes to what is needed in one step (at most f_max); where f_max is not enough the
rest is said plainly, with the rate the producers may send, u · C_read(f_max) − B / catch_up_s.
Lowered, it goes by at most `LIFT_STEP` a decision, as soon as the fraction needed at the
current size is lower by a step (`SHED_STEP` of margin, so a load at a step's edge does not
raise and lift in turn), and the policy scales nothing down while any is shed.
Neighbours: `ceiling` (the verdicts), `model` (carries `Shedding`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from schemas import TaskMetrics

SHED_STEP = 0.05
"""Fractions are set in multiples of this: noise in λ does not resend one."""
LIFT_STEP = 0.5
"""Most a fraction is lowered by in one decision: lifting all at once would let a load that
fell only a little, or a low reading of it, overload the query again; the job's default bound
(0.5) comes off in one step, the highest in two."""


@dataclass(frozen=True, slots=True)
class Shedding:
    """What load shedding can do for a query and what it does now."""

    low_priority_share: float = 0.0
    """ℓ: the share of the rows read that the job marks low priority."""
    fraction: float = 0.0
    """f: the share of the low-priority rows shed, in force."""
    max_fraction: float = 0.0
    """f_max: the job's bound; 0 when it marks nothing low priority."""

    @property
    def possible(self) -> bool:
        return self.max_fraction > 0 and self.low_priority_share > 0

    @property
    def active(self) -> bool:
        return self.fraction > 0


NO_SHEDDING = Shedding()


def observed_shedding(samples: Sequence[TaskMetrics]) -> Shedding:
    """ℓ over `samples`, f and f_max as the newest one reports them."""
    read = sum(s.input_rows for s in samples)
    low = sum(s.rows_low_priority for s in samples)
    newest = samples[-1]
    return Shedding(low / read if read > 0 else 0.0, newest.shed_fraction,
                    newest.max_shed_fraction)


def fraction_for(demand: float, utilisation: float, read_capacity: Callable[[float], float],
                 bound: float) -> float | None:
    """The smallest multiple of `SHED_STEP` (or `bound` itself) up to `bound` at which
    `read_capacity(f)` carries `demand` records read/s at `utilisation`; None when `bound`
    does not (or the demand is no number)."""
    if not math.isfinite(demand):
        return None
    steps = [k * SHED_STEP for k in range(int(bound / SHED_STEP + 1e-9) + 1)]
    for fraction in (*steps, bound):
        if demand <= utilisation * read_capacity(fraction):
            return round(fraction, 10)
    return None


def raised(shedding: Shedding, needed: float | None) -> float:
    """The fraction to raise to: what is needed, or the bound when that is not enough."""
    return shedding.max_fraction if needed is None else needed


def lowered(shedding: Shedding, needed: float | None) -> float:
    """The fraction to lower to (the one in force when it cannot go lower): what is needed
    with a step of margin, by at most `LIFT_STEP`."""
    if needed is None:
        return shedding.fraction
    kept = needed + SHED_STEP if needed > 0 else 0.0
    target = max(kept, _round_up(shedding.fraction - LIFT_STEP))
    return target if target < shedding.fraction - 1e-9 else shedding.fraction


def processed_share(shedding: Shedding, fraction: float) -> float:
    """The share of the records read that is processed with `fraction` shed: 1 − ℓ f."""
    return 1 - shedding.low_priority_share * fraction


def _round_up(fraction: float) -> float:
    if fraction <= 0:
        return 0.0
    # 1e-9: a fraction computed as 0.30000000004 is 0.3, not 0.35.
    return min(1.0, round(math.ceil(fraction / SHED_STEP - 1e-9) * SHED_STEP, 10))
