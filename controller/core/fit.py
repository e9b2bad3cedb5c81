"""The cost of one micro-batch: its fixed overhead and the true per-unit processing rate.

Owns the least-squares fit busy_s ≈ overhead_s + (rows / units) / μ over the batches of a
window, and the fallbacks when the batches cannot separate the two. Pure; `model` calls
`fit_batch_cost` with the window's rate samples and the last overhead fitted for the query.

Why: every batch costs ~1.5 s on a 2-core machine whatever its size, so rows / busy_s / units
(the rate of the walking skeleton) charges that overhead to the records and reads 59/s per
unit where the truth is ~150–200/s. Only the slope of busy time over batch size is the true
rate (DS2's "true processing rate from useful time"): μ = Σ rows / Σ units × (busy − c).

Fallback rules, in order:
1. `fit` — at least 3 batches, the largest holding `overhead_fit_min_spread` × the records per
   unit of the smallest, a positive slope with a relative standard error of at most
   `overhead_fit_max_slope_error`. The intercept is clamped to [0, 90 % of the shortest batch]
   (negative overhead is noise; an overhead as long as a whole batch would leave no useful time).
2. `remembered` — otherwise, the overhead last fitted for this query (the caller keeps it),
   clamped the same way: the overhead hardly depends on load, and a steady load (batches of one
   size, λT) is exactly when no new fit is possible.
3. `assumed_zero` — otherwise c = 0, i.e. μ = Σ rows / Σ (busy × units): exact for the batch
   size the query runs now, pessimistic for larger ones, so it over-provisions rather than under.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from controller.settings import ModelSettings

_MIN_USEFUL_SHARE = 0.1
"""The overhead may take at most 90 % of the shortest batch (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class BatchPoint:
    rows: int
    units: float
    """Units that worked in parallel (`batches.batch_concurrency`)."""
    busy_s: float

    @property
    def per_unit(self) -> float:
        return self.rows / self.units


@dataclass(frozen=True, slots=True)
class BatchCost:
    overhead_s: float
    """c: seconds every batch costs regardless of its size."""
    per_unit: float
    """μ: records per second of useful (non-overhead) time per unit."""
    source: str
    """How c was found: 'fit', 'remembered' or 'assumed_zero' (module docstring)."""
    rate_error: float = 0.0
    """The relative standard error of μ over the batches it was measured on (`rate_error`);
    infinite from one batch, 0 for a cost given by hand."""
    batches: int = 0
    """How many batches μ was measured on (0: not said)."""
    useful_share: float = 1.0
    """The share of those batches' busy unit-seconds left to their records once c is charged:
    how much of the measure μ is (`scaling.tells_size`)."""


def fit_batch_cost(points: Sequence[BatchPoint], settings: ModelSettings,
                   remembered_overhead_s: float | None = None) -> BatchCost | None:
    """c and μ from batches with rows; None when there is no such batch."""
    return fitted_cost(points, settings) or charged_cost(points, remembered_overhead_s)


def fitted_cost(points: Sequence[BatchPoint], settings: ModelSettings) -> BatchCost | None:
    """c and μ fitted on the batches with rows, or None when they cannot tell c from 1/μ
    (`_least_squares`) or there is none. Apart from `charged_cost` because it depends on
    the batches alone: `model.evaluate` keeps it while the window holds the same batches,
    however the remembered c moves."""
    points = _usable(points)
    fitted = _least_squares(points, settings)
    return None if fitted is None else useful_rate(points, fitted, "fit")


def charged_cost(points: Sequence[BatchPoint],
                 remembered_overhead_s: float | None) -> BatchCost | None:
    """μ of the batches with rows charged the c remembered, else none (rule 3: a lower
    bound), for batches that cannot tell c apart; None when there is no such batch."""
    points = _usable(points)
    if not points:
        return None
    if remembered_overhead_s is not None:
        return useful_rate(points, remembered_overhead_s, "remembered")
    return useful_rate(points, 0.0, "assumed_zero")


def _usable(points: Sequence[BatchPoint]) -> list[BatchPoint]:
    return [p for p in points if p.rows > 0 and p.units > 0 and p.busy_s > 0]


def _least_squares(points: Sequence[BatchPoint],
                   settings: ModelSettings) -> float | None:
    """The fitted intercept c, or None when the batches cannot tell c from 1/μ."""
    if len(points) < 3:
        return None
    xs = [p.rows / p.units for p in points]  # `per_unit`, without a call per point
    if max(xs) < settings.overhead_fit_min_spread * min(xs):
        return None
    n = len(points)
    mean_x = sum(xs) / n
    mean_y = sum(p.busy_s for p in points) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (p.busy_s - mean_y) for x, p in zip(xs, points, strict=True)) / sxx
    if slope <= 0:
        return None  # busy time does not grow with batch size: noise dominates
    intercept = mean_y - slope * mean_x
    residual = sum((p.busy_s - intercept - slope * x) ** 2
                   for x, p in zip(xs, points, strict=True))
    slope_error = math.sqrt(residual / (n - 2) / sxx)
    if slope_error > settings.overhead_fit_max_slope_error * slope:
        return None
    return intercept


def useful_rate(points: Sequence[BatchPoint], overhead_s: float, source: str) -> BatchCost:
    """μ of `points` (with rows and busy time) charged `overhead_s`, at most 90 % of the
    shortest (module docstring)."""
    shortest = min(p.busy_s for p in points)
    overhead = min(max(0.0, overhead_s), shortest * (1 - _MIN_USEFUL_SHARE))
    useful = [p.units * (p.busy_s - overhead) for p in points]
    rows = sum(p.rows for p in points)
    per_unit = rows / sum(useful)
    return BatchCost(overhead, per_unit, source, rate_error(points, useful, per_unit, rows),
                     len(points), sum(useful) / sum(p.units * p.busy_s for p in points))


def rate_error(points: Sequence[BatchPoint], useful: Sequence[float], per_unit: float,
               rows: int) -> float:
    """The relative standard error of the ratio μ = Σ rows / Σ useful unit-seconds: each
    batch's rows less what μ says its useful time held, e, give SE(μ) / μ =
    √(n Σe² / (n − 1)) / Σ rows. Infinite from one batch: nothing says how far μ may be off.
    With c fitted on the same batches it is their scatter about the fit, not the slope's
    error: a capacity is read at a full batch, where c weighs least, and a slope uncertain by
    a quarter (`overhead_fit_max_slope_error`) may still predict such a batch closely. It is
    the error of the rate at the sizes and batches measured; a size not run is the scaling
    model's (`scaling`)."""
    n = len(points)
    if n < 2:
        return math.inf
    squares = sum((p.rows - per_unit * u) ** 2 for p, u in zip(points, useful, strict=True))
    return math.sqrt(n * squares / (n - 1)) / rows
