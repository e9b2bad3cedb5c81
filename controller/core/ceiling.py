"""What the policy does for a query at its ceiling, and after it (pure).

At the ceiling no more units, executors or cluster room can be had and the query still
cannot keep up. A job that marks records low priority has its shed fraction set so the
backlog stops growing and drains within the catch-up time (`shedding`: sized in records read,
within the job's bound, raised in one step); what shedding cannot do is advice: throttle the
producers to a rate, saying by how much the query is overloaded beyond what may be shed. Once
the load allows, the fraction is lifted step by step, before the policy scales anything down.
Neighbours: `policy` (calls `at_ceiling` and `lift`), `shedding` (the fractions).
"""

from __future__ import annotations

import math

from controller.core.judgement import skew_note
from controller.core.model import QueryModel
from controller.core.results import Hold, Recommend, Shed
from controller.core.shedding import fraction_for, lowered, processed_share, raised
from controller.core.wording import load, num, pct
from controller.settings import PolicySettings

SHEDDING = "shedding"
"""The action of a hold while shedding keeps a query at its ceiling, or is still needed."""


def at_ceiling(model: QueryModel, units: int, arriving: float, ceiling: str,
               figures: dict[str, float], settings: PolicySettings) -> Shed | Hold | Recommend:
    """The verdict at `ceiling` ('at 8 units (max_parallelism)', `units` running) against
    `arriving` records/s: shed what is needed, hold while what is shed suffices, or advise a
    producer rate for the rest."""
    sh, u = model.shedding, settings.target_utilisation
    drain = max(0.0, model.backlog_records) / settings.catch_up_s

    def read_capacity(fraction: float) -> float:
        return model.capacity_at(units, processed_share(sh, fraction))

    top = read_capacity(sh.fraction)
    figures = {**figures, "capacity_at_max": top, "low_priority_share": sh.low_priority_share,
               "shed_fraction_in_force": sh.fraction}
    situation = (f"{ceiling} capacity is {num(top)}/s against {num(arriving)}/s arriving and "
                 f"{num(model.backlog_records)} records behind")
    keeps = (f"keeps {pct(u)} utilisation and drains the backlog in "
             f"{num(settings.catch_up_s)} s")
    needed = (fraction_for(arriving + drain, u, read_capacity, sh.max_fraction)
              if sh.possible else None)
    throttle_to, drained_in = producer_rate(u * top, model.backlog_records, settings.catch_up_s)
    if not sh.possible or not settings.shed_at_ceiling:
        return _throttle(f"{situation}; throttle the producers to {num(throttle_to)}/s "
                         f"({_throttled(u, drained_in, settings)}); "
                         f"{_why_not_shed(model, needed, settings)}", throttle_to,
                         figures, model, settings)
    target = raised(sh, needed)
    figures |= {"target": target}
    if target > sh.fraction:
        return Shed(sh.fraction, target,
                    f"{situation}; shedding {pct(target)} of the low-priority records "
                    f"({pct(sh.low_priority_share)} of those read) "
                    + (keeps if needed is not None else
                       f"is the job's bound, {_beyond(arriving + drain, u, read_capacity(target))}")
                    + skew_note(model, settings), figures)
    if needed is not None:
        return Hold(f"{situation}; shedding {pct(sh.fraction)} of the low-priority records "
                    f"{keeps}", figures, SHEDDING)
    return _throttle(f"{situation}; shedding {pct(sh.fraction)} of the low-priority records, "
                     f"the job's bound, {_beyond(arriving + drain, u, top)}: throttle the "
                     f"producers to {num(throttle_to)}/s ({_throttled(u, drained_in, settings)})",
                     throttle_to, figures, model, settings)


def lift(model: QueryModel, settings: PolicySettings) -> Shed | Hold:
    """A query that sheds and is not backlogged: lower the fraction towards what its current
    size needs, a step at a time; hold (and scale nothing down) while all of it is needed."""
    sh, u = model.shedding, settings.target_utilisation
    drain = max(0.0, model.backlog_records) / settings.catch_up_s

    def read_capacity(fraction: float) -> float:
        return model.capacity_at(model.units, processed_share(sh, fraction))

    needed = fraction_for(model.arrival_rate + drain, u, read_capacity, sh.fraction)
    target = lowered(sh, needed)
    figures = {**model.figures(), "low_priority_share": sh.low_priority_share,
               "shed_fraction_in_force": sh.fraction, "target": target}
    if target < sh.fraction:
        return Shed(sh.fraction, target,
                    f"{load(model)}, backlog {num(model.backlog_records)} records: "
                    f"{_needed(needed)} of the low-priority records need shedding at this "
                    f"size; lifting shedding {pct(sh.fraction)} → {pct(target)}", figures)
    return Hold(f"{load(model)}; shedding {pct(sh.fraction)} of the low-priority records is "
                f"still needed at this size ({_needed(needed)}); nothing is scaled down while "
                "any is shed", figures, SHEDDING)


def producer_rate(reads: float, backlog: float, catch_up_s: float) -> tuple[float, float]:
    """The producer rate to advise a query that reads `reads` records/s at its target
    utilisation with `backlog` records behind, and the seconds the backlog then takes to
    drain: what leaves enough of `reads` to drain it in `catch_up_s`, but never less than
    half of `reads` (a backlog that needs more than half of it to drain that fast drains in
    twice the least time it can take, rather than with the producers stopped)."""
    if backlog <= 0:
        return max(0.0, reads), 0.0
    if reads <= 0:
        return 0.0, math.inf
    draining = reads - backlog / catch_up_s
    if draining >= reads / 2:
        return draining, catch_up_s
    return reads / 2, 2 * backlog / reads


def _throttled(utilisation: float, drained_in: float, settings: PolicySettings) -> str:
    keeps = f"keeps {pct(utilisation)} utilisation and drains the backlog in"
    if math.isinf(drained_in):
        return "nothing drains the backlog: the query reads nothing at this size"
    if drained_in <= settings.catch_up_s:
        return f"{keeps} {num(settings.catch_up_s)} s"
    return (f"{keeps} {num(drained_in)} s, past the catch-up time of "
            f"{num(settings.catch_up_s)} s: the producers keep half the rate read")


def _throttle(reason: str, rate: float, figures: dict[str, float], model: QueryModel,
              settings: PolicySettings) -> Recommend:
    return Recommend("throttle", "producer_rate", rate, reason + skew_note(model, settings),
                     {**figures, "throttle_to": rate})


def _beyond(demand: float, utilisation: float, read_capacity: float) -> str:
    excess = demand - utilisation * read_capacity
    return f"overloaded by {num(excess)}/s beyond it: nothing left to shed"


def _needed(needed: float | None) -> str:
    return "more than the job's bound" if needed is None else pct(needed)


def _why_not_shed(model: QueryModel, needed: float | None, settings: PolicySettings) -> str:
    sh = model.shedding
    if sh.max_fraction <= 0:
        return "nothing to shed: the job marks no record low priority"
    if sh.low_priority_share <= 0:
        return "nothing to shed: no record read lately was marked low priority"
    return (f"or shed {_needed(needed)} of the low-priority records (policy.shed_at_ceiling "
            "is off)")
