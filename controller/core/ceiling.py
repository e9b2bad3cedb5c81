"""What the policy does for a query at its ceiling, and after it (pure).

At the ceiling no more units, executors or cluster room can be had and the query still
cannot keep up. A job that marks records low priority has its shed fraction set so the
backlog stops growing and drains within the catch-up time (`shedding`: sized, within the
job's bound, raised in one step); what shedding cannot do is advice: throttle the producers
to a rate, saying by how much the query is overloaded beyond what may be shed. Once the load
allows, the fraction is lifted step by step, before the policy scales anything down.
Neighbours: `policy` (calls `at_ceiling` and `lift`), `shedding` (the fractions).
"""

from __future__ import annotations

from controller.core.judgement import skew_note
from controller.core.model import QueryModel
from controller.core.results import Hold, Recommend, Shed
from controller.core.shedding import (
    Shedding,
    fraction_needed,
    next_fraction,
    processed_share,
)
from controller.core.wording import load, num, pct
from controller.settings import PolicySettings

SHEDDING = "shedding"
"""The action of a hold while shedding keeps a query at its ceiling, or is still needed."""


def at_ceiling(model: QueryModel, top: float, arriving: float, ceiling: str,
               figures: dict[str, float], settings: PolicySettings) -> Shed | Hold | Recommend:
    """The verdict at `ceiling` ('at 8 units (max_parallelism)'), where the capacity is `top`
    against `arriving` records/s: shed what is needed, hold while what is shed suffices, or
    advise a producer rate for the rest."""
    allowed = max(0.0, settings.target_utilisation * top
                  - model.backlog_records / settings.catch_up_s)
    sh = model.shedding
    needed = fraction_needed(arriving, allowed, sh.low_priority_share)
    figures = {**figures, "capacity_at_max": top, "allowed": allowed,
               "low_priority_share": sh.low_priority_share, "shed_fraction_in_force": sh.fraction}
    situation = (f"{ceiling} capacity is {num(top)}/s against {num(arriving)}/s arriving and "
                 f"{num(model.backlog_records)} records behind")
    keeps = (f"keeps {pct(settings.target_utilisation)} utilisation and drains the backlog in "
             f"{num(settings.catch_up_s)} s")
    if not sh.possible or not settings.shed_at_ceiling:
        figures |= {"throttle_to": allowed}
        return Recommend(
            "throttle", "producer_rate", allowed,
            f"{situation}; throttle the producers to {num(allowed)}/s ({keeps}); "
            f"{_why_not_shed(model, needed, settings)}{skew_note(model, settings)}", figures)
    target = next_fraction(sh, needed)
    figures |= {"shed_fraction_needed": min(needed, 1.0), "target": target}
    if target > sh.fraction:
        return Shed(sh.fraction, target,
                    f"{situation}; shedding {pct(target)} of the low-priority records "
                    f"({pct(sh.low_priority_share)} of those read) "
                    + (keeps if target >= needed else
                       f"is the job's bound, {_beyond(arriving, allowed, sh, target)}")
                    + skew_note(model, settings), figures)
    if target >= needed:
        return Hold(f"{situation}; shedding {pct(sh.fraction)} of the low-priority records "
                    f"{keeps}", figures, SHEDDING)
    throttle = allowed / processed_share(sh, sh.fraction)
    figures |= {"throttle_to": throttle}
    return Recommend(
        "throttle", "producer_rate", throttle,
        f"{situation}; shedding {pct(sh.fraction)} of the low-priority records, the job's "
        f"bound, {_beyond(arriving, allowed, sh, sh.fraction)}: throttle the producers to "
        f"{num(throttle)}/s{skew_note(model, settings)}", figures)


def lift(model: QueryModel, settings: PolicySettings) -> Shed | Hold:
    """A query that sheds and is not backlogged: lower the fraction towards what its current
    size needs, a step at a time; hold (and scale nothing down) while all of it is needed."""
    sh = model.shedding
    allowed = max(0.0, settings.target_utilisation * model.capacity
                  - model.backlog_records / settings.catch_up_s)
    needed = fraction_needed(model.arrival_rate, allowed, sh.low_priority_share)
    target = min(next_fraction(sh, needed), sh.fraction)
    figures = {**model.figures(), "allowed": allowed, "shed_fraction_needed": min(needed, 1.0),
               "target": target}
    if target < sh.fraction:
        return Shed(sh.fraction, target,
                    f"{load(model)}, backlog {num(model.backlog_records)} records: "
                    f"{pct(min(needed, 1.0))} of the low-priority records would need shedding "
                    f"at this size; lifting shedding {pct(sh.fraction)} → {pct(target)}",
                    figures)
    return Hold(f"{load(model)}; shedding {pct(sh.fraction)} of the low-priority records is "
                f"still needed at this size ({pct(min(needed, 1.0))}); nothing is scaled down "
                "while any is shed", figures, SHEDDING)


def _beyond(arriving: float, allowed: float, shedding: Shedding, fraction: float) -> str:
    excess = arriving * processed_share(shedding, fraction) - allowed
    return f"overloaded by {num(excess)}/s beyond it: nothing left to shed"


def _why_not_shed(model: QueryModel, needed: float, settings: PolicySettings) -> str:
    sh = model.shedding
    if sh.max_fraction <= 0:
        return "nothing to shed: the job marks no record low priority"
    if sh.low_priority_share <= 0:
        return "nothing to shed: no record read lately was marked low priority"
    return (f"or shed {pct(min(needed, 1.0))} of the low-priority records (policy."
            "shed_at_ceiling is off)")
