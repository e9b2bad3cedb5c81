"""Load shedding decided at the ceiling, within the bound the job sets (pure).

Borealis's load shedding with its quality control: when no more units, executors or cluster
room are left, a query that cannot keep up drops a share of its least valuable records
rather than fall further behind; the job says which records may go (`Job.low_priority`) and
the highest share of them that may (its `max_shed_fraction`, f_max). The job reports per
batch the rows it read, the low-priority ones among them (their share ℓ), the rows shed and
the fraction f in force; the capacity C is measured on the rows processed, shed rows left
out (`model.rate_points`).

With f in force the query processes λ (1 − ℓ f) records/s. To run at the target utilisation
u and still drain the backlog B within the catch-up time:

    λ (1 − ℓ f) ≤ u C − B / catch_up_s = allowed   ⇒   f ≥ (λ − allowed) / (ℓ λ)

Raised, f goes to what is needed in one step (rounded up to `SHED_STEP`, at most f_max);
where f_max is not enough the rest is said plainly, with the rate the producers may send.
Lowered, it goes by at most `LIFT_STEP` a decision, as soon as the fraction needed at the
current size is lower, and the policy scales nothing down while any is shed. The fraction
needed is absolute, from λ and C measured on processed rows, so it does not depend on the f
in force. Neighbours: `policy` (when), `model` (carries `Shedding`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from schemas import TaskMetrics

SHED_STEP = 0.05
"""Fractions are set in multiples of this: noise in λ does not resend one."""
LIFT_STEP = 0.25
"""Most a fraction is lowered by in one decision: lifting all at once would let a load that
fell only a little overload the query again."""


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


def fraction_needed(arriving: float, allowed: float, share: float) -> float:
    """f with λ (1 − ℓ f) = allowed: 0 when the arrivals fit, above 1 (or ∞ without
    low-priority records) when shedding cannot make them fit."""
    if arriving <= allowed:
        return 0.0
    if share <= 0:
        return math.inf
    return (arriving - allowed) / (share * arriving)


def next_fraction(shedding: Shedding, needed: float) -> float:
    """The fraction to set: up to what is needed at once, within the bound; down by at most
    `LIFT_STEP` a step."""
    wanted = min(shedding.max_fraction, _round_up(needed))
    if wanted >= shedding.fraction:
        return wanted
    return max(wanted, _round_up(shedding.fraction - LIFT_STEP))


def processed_share(shedding: Shedding, fraction: float) -> float:
    """The share of the records read that is processed with `fraction` shed: 1 − ℓ f."""
    return 1 - shedding.low_priority_share * fraction


def _round_up(fraction: float) -> float:
    if fraction <= 0:
        return 0.0
    if not math.isfinite(fraction):
        return 1.0
    # 1e-9: a fraction computed as 0.30000000004 is 0.3, not 0.35.
    return min(1.0, round(math.ceil(fraction / SHED_STEP - 1e-9) * SHED_STEP, 10))
