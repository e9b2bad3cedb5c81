"""A shared Spark cluster divided on purpose: which query's executor request the free cores go to.

Jobs of a fleet share a standalone cluster. Left to itself each job asks for executors, the
master grants what is free first come, first served, and a request it cannot meet waits for
executors that never come (the job's ack after its own wait). Instead the controller reads the
cluster's free cores (the master's status, `loop.ports.ClusterStatus`) and divides them among
the queries that want more, before any asks:

1. requests already sent keep the cores they asked for: in flight, or applied since the
   reading (the master may not have counted them then);
2. then by the priority each job declares (`--cluster-priority`, higher first);
3. then by need: the query furthest over its capacity (arrival / capacity) first;
4. ties by query id, for determinism.

Each is granted what it wants while cores are left. A query that came to want cores since
the cluster's status was last read waits for the next reading (asked for a collection time
after a want begins), whose division counts it with every other want since the last
(`loop.sharing`): the priority orders those wants, not whichever model was ready a cycle
sooner. A request cut to nothing
leaves the query at its task slots: the policy then sizes within them, and at that ceiling
sheds or advises a throttle, saying why (`CoreGrant.note`). Pure; the loop keeps each query's
newest demand and calls `divide` once a cycle. Neighbours: `parallelism` (cuts the executor
request), `policy`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from controller.core.wording import num

MAX_NEED = 100.0
"""Arrival over capacity beyond which every query is as needy (one with no capacity yet)."""


@dataclass(frozen=True, slots=True)
class Demand:
    """Cores one query wants beyond those it runs."""

    query_id: str
    cores: int
    priority: int = 0
    need: float = 0.0
    """How far over its capacity the query is (arrival / capacity)."""
    asked: bool = False
    """A tuple asked for them, in flight or applied since the reading: the reading may not
    count them as taken yet."""
    since_reading: int = 0
    """The cluster status's reading in force when the query came to want cores: it is
    granted cores from the next one on (`loop.sharing`)."""


@dataclass(frozen=True, slots=True)
class Taken:
    """Cores an applied executors request took: the master's readings show them taken only
    from one begun after the request's ack on, and until then they are counted as asked."""

    cores: int
    shown_after: int
    """The reads begun at the ack (`ClusterStatus.reads_begun`): readings past it show the
    executors."""


@dataclass(frozen=True, slots=True)
class CoreGrant:
    """Cores one query may add, and the sentence that says why not more."""

    cores: int
    note: str = ""
    pending: bool = False
    """The query's want is newer than the cluster's last reading: it waits for the next,
    whose division counts it, rather than take cores a query of a higher priority wanting
    them before that reading would be granted."""


@dataclass(frozen=True, slots=True)
class Division:
    """One cycle's division of the free cores."""

    free_cores: int
    grants: dict[str, CoreGrant]
    left: int
    """Cores no request took."""
    takers: tuple[Demand, ...] = ()
    """The requests granted cores, in the order they were served."""

    def grant(self, query_id: str) -> CoreGrant:
        found = self.grants.get(query_id)
        if found is not None:
            return found
        return CoreGrant(self.left, _short(self.free_cores, self.left, self.takers), pending=True)


def _order(demand: Demand) -> tuple[bool, int, float, str]:
    return (not demand.asked, -demand.priority, -demand.need, demand.query_id)


def divide(free_cores: int, demands: Iterable[Demand]) -> Division:
    """The free cores granted request by request in `_order` (module docstring)."""
    left = max(0, free_cores)
    grants: dict[str, CoreGrant] = {}
    before: list[Demand] = []
    for demand in sorted(demands, key=_order):
        granted = min(demand.cores, left)
        left -= granted
        note = "" if granted >= demand.cores else _short(free_cores, granted, before)
        grants[demand.query_id] = CoreGrant(granted, note)
        if granted > 0:
            before.append(demand)
    return Division(free_cores, grants, left, tuple(before))


def _short(free_cores: int, granted: int, before: Iterable[Demand]) -> str:
    """Why a query gets `granted` cores and no more."""
    takers = list(before)
    if not takers:
        return f"the cluster has {_cores(free_cores, 'free ')}"
    named = ", ".join(f"{d.query_id} (priority {d.priority}, {_why(d)})" for d in takers[:3])
    more = f" and {len(takers) - 3} more" if len(takers) > 3 else ""
    return (f"the cluster's {_cores(free_cores, 'free ')} went to {named}{more} first"
            + (f"; {_cores(granted)} left for this query" if granted else ""))


def _why(demand: Demand) -> str:
    if demand.asked:
        return "asked already"
    if demand.need >= MAX_NEED:
        return "no capacity measured yet"
    return f"arrival {num(demand.need * 100)}% of its capacity"


def _cores(count: int, which: str = "") -> str:
    """'1 core', '2 free cores'."""
    return f"{num(count)} {which}core{'' if count == 1 else 's'}"
