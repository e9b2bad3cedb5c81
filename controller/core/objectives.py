"""Whether a query meets the objectives its job states, and the catch-up time they ask of the
sizing (pure; the objectives themselves are `schemas.objectives.Objectives`).

A record arriving now waits behind the backlog ahead of it, put through at the query's
capacity, then for its batch to start and commit (up to a trigger interval T):

    delay = B / capacity + T

A backlog drains in B / (capacity − λ) (the model's `time_to_drain_s`, whose B already leaves
out what the running batch will read). `streamctl status` counts the broker's lag, which holds
the arrivals of the running batch too: it leaves out one trigger interval of them (`drain_s`).

Sizing asks for the units that drain the backlog within the catch-up time at the target
utilisation, so their capacity is at least λ + B / catch_up_s > B / catch_up_s. A stated
`drain_within_s` replaces the controller's `policy.catch_up_s` (longer asks for fewer units: the
cheapest size that meets it); a stated `max_delay_s` shortens it to max_delay_s − T, which makes
B / capacity + T ≤ max_delay_s. Whichever is shortest sets the catch-up time and is named in
the decision's reason.

A delay objective also sets the utilisation band (`band`). A query at utilisation u with a
per-batch overhead c runs batches of c / (1 − u) back to back, and a record waits up to two of
them, so 2c / (1 − u) ≤ max_delay_s holds up to u = 1 − 2c / max_delay_s. Where that is under
the controller's high water, it is the band's high water and the target keeps the controller's
ratio below it; with a drain objective K, the target is at most K / (K + P), where a resizing's
pause P piles up P of arrivals that the spare capacity must drain within K. A strict objective
is met with more units; a lax one keeps the controller's band.
Neighbours: `policy` (sizes with `catch_up`), `model` (carries the
query's objectives), `controller.explain` and `streamctl.board` (export `standings`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from controller.core.sizing import drain_time_s
from controller.core.wording import num
from schemas.objectives import Objectives

MAX_DELAY = "max_delay_s"
DRAIN_WITHIN = "drain_within_s"


@dataclass(frozen=True, slots=True)
class Standing:
    """One stated objective against the query's figures now."""

    objective: str
    """`MAX_DELAY` or `DRAIN_WITHIN`."""
    bound_s: float
    value_s: float | None
    """The delay, or the time the backlog takes to drain; None: unknown (no rate measured)."""

    @property
    def met(self) -> bool | None:
        return None if self.value_s is None else self.value_s <= self.bound_s

    def describe(self) -> str:
        """'delay 12 s of at most 30 s: met'."""
        what = "delay" if self.objective == MAX_DELAY else "backlog drains in"
        value = "?" if self.value_s is None else f"{num(self.value_s)} s"
        verdict = {True: "met", False: "NOT met", None: "unknown"}[self.met]
        return f"{what} {value} of at most {num(self.bound_s)} s: {verdict}"


@dataclass(frozen=True, slots=True)
class Band:
    """Utilisations a query is judged by: a scale-down candidate below `low`, sized for
    `target`, backlogged above `high`."""

    low: float
    target: float
    high: float


def band(objectives: Objectives, overhead_s: float | None, pause_s: float,
         controller: Band) -> Band | None:
    """The band a stated delay objective asks for when it needs more headroom than the
    controller's own (module docstring), or None for the controller's own: no delay objective,
    no per-batch overhead measured (`overhead_s` None or 0), an overhead the objective cannot
    bear at any utilisation, or an objective the controller's band already meets. Never a
    laxer band: the bound 2c / (1 − u) holds at a steady load, and a load that rises needs the
    controller's headroom to be met while a resizing takes effect (a lax objective sized at 90 %
    spent a third of a compressed real day over it). A trigger interval T longer than the
    batches adds up to T, which `Objectives.problems` bounds by refusing a max_delay_s under
    2T."""
    if objectives.max_delay_s <= 0 or overhead_s is None or overhead_s <= 0:
        return None  # a fit clamps a negative intercept to 0: no overhead measured either
    limit = 1 - 2 * overhead_s / objectives.max_delay_s
    target = under(limit, controller)
    if objectives.drain_within_s > 0:
        target = min(target, objectives.drain_within_s / (objectives.drain_within_s + pause_s))
    if target <= 0 or math.isclose(target, controller.target, rel_tol=1e-9):
        return None
    # The target is at most `under(limit)` < limit: the high water needs no floor.
    return Band(controller.low * target / controller.target, target, min(controller.high, limit))


def under(high: float, controller: Band) -> float:
    """The target below a high water of `high`: the controller's own at or above its high
    water, else with the same ratio to it (0.9 → 0.7 gives 0.7 → 0.54)."""
    return min(1.0, high / controller.high) * controller.target


@dataclass(frozen=True, slots=True)
class CatchUp:
    """The time a backlog is sized to drain in, and the objective that set it."""

    seconds: float
    objective: str = ""
    """`MAX_DELAY`, `DRAIN_WITHIN`, or '' for the controller's own `policy.catch_up_s`."""
    seconds_stated: float = 0.0
    """The stated bound the seconds derive from (max_delay_s for `MAX_DELAY`)."""

    def note(self) -> str:
        """", for the job's objective of at most 30 s delay", or nothing for the controller's
        own time."""
        if self.objective == MAX_DELAY:
            return f", for the job's objective of at most {num(self.seconds_stated)} s delay"
        if self.objective == DRAIN_WITHIN:
            return f", for the job's objective of a backlog gone within {num(self.seconds)} s"
        return ""


def delay_s(backlog: float, rate: float, trigger_s: float) -> float | None:
    """How long a record arriving now waits before its batch commits; None when no rate is
    known to put the backlog through."""
    if backlog <= 0:
        return trigger_s
    if not (math.isfinite(rate) and rate > 0):
        return None
    return backlog / rate + trigger_s


def drain_s(lag: float, rate: float, arrival: float, trigger_s: float) -> float | None:
    """Seconds until a broker lag beyond one trigger interval's arrivals (what the running
    batch reads anyway) is gone: 0 when there is none, ∞ when arrivals meet the rate, None
    when no rate is known."""
    beyond = lag - arrival * trigger_s
    if beyond > 0 and not (math.isfinite(rate) and rate > 0):
        return None
    return drain_time_s(beyond, rate, arrival)


def standings(objectives: Objectives, delay: float | None,
              drain: float | None) -> tuple[Standing, ...]:
    """Each stated objective against the query's delay and the time its backlog takes to drain
    (None: unknown)."""
    found = []
    if objectives.max_delay_s > 0:
        found.append(Standing(MAX_DELAY, objectives.max_delay_s, delay))
    if objectives.drain_within_s > 0:
        found.append(Standing(DRAIN_WITHIN, objectives.drain_within_s, drain))
    return tuple(found)


def catch_up(objectives: Objectives, trigger_s: float, default_s: float) -> CatchUp:
    """The shortest of the drain times asked for: the controller's own (`default_s`) unless a
    drain objective replaces it, and the delay objective's max_delay_s − T."""
    chosen = (CatchUp(objectives.drain_within_s, DRAIN_WITHIN) if objectives.drain_within_s > 0
              else CatchUp(default_s))
    if objectives.max_delay_s > 0:
        # At least one trigger interval: `Objectives.problems` refuses a bound under 2 T.
        room = max(objectives.max_delay_s - trigger_s, trigger_s, 1e-3)
        if room < chosen.seconds:
            chosen = CatchUp(room, MAX_DELAY, objectives.max_delay_s)
    return chosen
