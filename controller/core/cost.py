"""Which μ and c size a query when the window's fit alone would not: the cost last measured
while nothing arrives (`idle_cost`), whether μ is a lower bound the running batch will correct
(`running_batch_measures_cost`), and μ of the newest batches the cap cut while the backlog
grows (`capped_cost`).

Pure; `model.evaluate` calls each with what the window's batches gave (`batches.Batches`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from controller.core import probes
from controller.core.arrival import ArrivalEstimate
from controller.core.fit import BatchCost, BatchPoint, useful_rate
from controller.settings import ModelSettings


def idle_cost(arrival: ArrivalEstimate, remembered: BatchCost | None) -> BatchCost | None:
    """μ and c for a window without a batch with rows: the ones last measured, as long as
    nothing arrives at all (then any size keeps up, and the smallest is the right one). With
    arrivals and still no rows the query is not idle but stuck, and nothing sizes it."""
    if remembered is None or arrival.rate > 0 or arrival.pending_rate:
        return None
    # A μ that was a lower bound (no cost told apart) stays one: it is no better remembered.
    source = remembered.source if remembered.source == "assumed_zero" else "remembered"
    return replace(remembered, source=source, batches=0)


def running_batch_measures_cost(cost: BatchCost, points: Sequence[BatchPoint],
                                plan: probes.RunningPlan | None, settings: ModelSettings,
                                processed: float = 1.0) -> bool:
    """Whether μ is a lower bound that the batch running now will correct: no overhead was
    fitted or remembered, so each batch's fixed cost is charged to its records (`fit` rule 3,
    pessimistic for larger batches), and the running batch holds `overhead_fit_min_spread` ×
    the records per unit of the largest measured one, so the fit separates the two when it
    reports. A job that kept up with small batches drains a burst in large ones, at a rate
    the small ones cannot show. `processed`: the share of the plan's records that will be
    processed, not shed (the points count processed records)."""
    if cost.source != "assumed_zero" or plan is None or plan.rows <= 0 or not points:
        return False
    largest = max(p.per_unit for p in points)
    return (plan.rows * processed / points[-1].units
            >= settings.overhead_fit_min_spread * largest)


def capped_cost(cost: BatchCost, capped: Sequence[BatchPoint], trend: float,
                ratio: float, held: bool = False) -> tuple[BatchCost, bool]:
    """μ measured on the newest batches alone when the batch cap cut each of them
    (`Batches.capped`) while the backlog grew, if lower than the window's by `ratio` (a level
    shift, as of the arrival rate: noise stays inside it), and whether it was.

    Why: batches at the cap all hold the same records, so when what a record costs rises only
    their busy time grows; the window's fit, over a minute of batches, follows only as slow
    ones replace fast ones, and meanwhile holds the query "within band" while its backlog
    grows. Batches the cap cut are full ones, so a few measure μ well, and at their size they
    measure the capacity however the rise splits between records and the fixed cost of a
    batch; like a level of the arrivals, theirs is believed once it lasted `level_confirm_s`
    (`newest_capped`). A load that fell leaves no capped batch, and a burst drained at the
    cap reads the window's μ. A rise of less than about 2× may not show (`ratio`); one past
    `ratio`² is followed in two rounds. `held`: the last model's μ was theirs; it stays while
    they read lower at all, or the window's, catching up, would jump back above it. Only ever lower:
    behind is where a μ too low costs least (a unit or two more, given back later) and one
    too high the most (a backlog that keeps growing)."""
    if not capped or trend <= 0:
        return cost, False
    newest = useful_rate(capped, cost.overhead_s, cost.source)
    needed = 1.0 if held else ratio
    if newest.per_unit * needed >= cost.per_unit:
        return cost, False
    # Two level shifts at most: a few seconds of slowness in the fixed cost of batches it
    # dominates, all charged to their records, would read μ 2-5× low and size for as much.
    return replace(newest, per_unit=max(newest.per_unit, cost.per_unit / ratio ** 2)), True
