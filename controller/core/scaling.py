"""What more units do: how a query's per-unit rate falls as it runs on more of them.

Why: μ is measured at the size a query runs at, and sizing multiplies it by the units it would
run at. Units share what they do not divide — the driver's planning, the shuffle, the cores
of a small machine, the broker — so each added unit brings less than the one before (a job
here: 177, 162, 142, 102 records/s per unit at 2, 4, 8, 16 units). A linear model
picks a size that drains at a fraction of what it expects, and pays a second restart.

How (Amdahl's law, the Universal Scalability Law without its coherency term):

    μ(p) = μ(1) / (1 + σ (p − 1))    so    1 / μ(p) = (1 − σ) / μ(1) + σ p / μ(1)

a straight line in p. σ, the contention, is fitted by least squares through the newest μ
measured at each size the query has run (`Sizes`, kept by the caller), once it has run at two;
before that it is the prior (`ModelSettings.scaling_prior_contention`). μ at another size is
then μ now × (1 + σ (p_now − 1)) / (1 + σ (p − 1)).

Pure; O(sizes) per evaluation, with at most `MAX_SIZES` sizes remembered per query.
Neighbours: `model` (μ per size in, `Scalability` on the model), `policy` (sizes with it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

MAX_SIZES = 16
"""Sizes remembered per query: the newest ones (a query visits a handful)."""


@dataclass(frozen=True, slots=True)
class Scalability:
    """How the per-unit rate falls with the units (σ, the module docstring's contention)."""

    contention: float = 0.0
    sizes: int = 0
    """Sizes σ was fitted from; 0: the prior."""

    def per_unit_at(self, rate: float, measured_at: float, units: float) -> float:
        """μ at `units`, given μ `rate` measured at `measured_at` units."""
        if self.contention <= 0 or measured_at <= 0 or units <= 0:
            return rate
        return (rate * (1 + self.contention * (measured_at - 1))
                / (1 + self.contention * (units - 1)))

    def describe(self) -> str:
        source = (f"fitted at {self.sizes} sizes" if self.sizes else "the prior")
        return f"each unit adds less: contention {self.contention:.3g} ({source})"


LINEAR = Scalability()
"""Every unit brings as much as the first: what sizing assumed before `scaling`."""


def learned(sizes: Mapping[int, float], prior: float) -> Scalability:
    """σ through μ at each size (units → records/s per unit), or the prior below two sizes.
    A fit that finds the units helping each other (σ < 0: noise, or batches that grew with
    the units) counts as no contention; σ is at most 1 (no gain at all from a unit)."""
    points = [(p, 1 / rate) for p, rate in sizes.items() if p > 0 and rate > 0]
    if len(points) < 2:
        return Scalability(prior, 0)
    n = len(points)
    mean_p = sum(p for p, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((p - mean_p) ** 2 for p, _ in points)
    slope = sum((p - mean_p) * (y - mean_y) for p, y in points) / spread
    at_one = mean_y + slope * (1 - mean_p)  # 1 / μ(1)
    if at_one <= 0:
        return Scalability(1.0, n)
    return Scalability(min(1.0, max(0.0, slope / at_one)), n)


CHARGED_SHARE_AT_LEAST = 0.5
"""Share of the busy time left to the records for a μ charged a per-batch cost remembered from
another size to count as the size's own (`tells_size`)."""


def tells_size(overhead_source: str, rate_per_unit: float, useful_share: float) -> bool:
    """Whether μ is the size's own, to join the sizes σ is fitted from. Fitted apart from the
    per-batch cost: yes. A lower bound (no cost told apart): no, it would read as contention.
    Charged the c remembered from another size: only while what is left to the records is at
    least `CHARGED_SHARE_AT_LEAST` of the batches' busy time (`fit.BatchCost.useful_share`).
    c grows with the units, and in the small batches of a lightly loaded size the error of
    charging another size's c is most of μ's measure: 16 state partitions at a third of their
    capacity read 33.7/s a unit where 1 ran 586/s, contention 1, and every later sizing took
    units that bring nothing for ones that would."""
    if rate_per_unit <= 0:
        return False
    return overhead_source == "fit" or (overhead_source == "remembered"
                                        and useful_share >= CHARGED_SHARE_AT_LEAST)


def remember(sizes: Mapping[int, float], units: int, rate: float) -> dict[int, float]:
    """`sizes` with μ at `units` replaced by the newest measurement, the oldest size dropped
    beyond `MAX_SIZES`."""
    kept = {p: r for p, r in sizes.items() if p != units}
    kept[units] = rate
    return dict(list(kept.items())[-MAX_SIZES:])
