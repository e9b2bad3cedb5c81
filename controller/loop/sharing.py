"""The shared Spark cluster's free cores, divided among the queries' wants (`core.cluster`).

Owns what each query wants of the cluster from one cycle to the next (`QueryMemory.demand`,
kept with the rest of the query's record, forgotten with it) and the division of each cycle:
what each query's verdict last named, what an executors tuple still in flight asked for
(the master may not have started those executors yet), and what an applied one took until a
reading begun after its ack shows it. Neighbours: `cycle` divides before it models and
notes the wants after it decides, `settling` notes what an applied tuple took; the model
carries its grant.
"""

from __future__ import annotations

from collections.abc import Mapping

from controller.core.cluster import MAX_NEED, Demand, Division, Taken, divide
from controller.core.model import QueryModel
from controller.core.parallelism import CORES_WANTED
from controller.core.results import NotReady, Verdict
from controller.core.state import InFlight
from controller.loop.memory import Memory, QueryMemory
from controller.loop.ports import ClusterStatus
from schemas.knobs import EXECUTORS


def division(cluster: ClusterStatus | None, queries: Memory) -> Division | None:
    """The cluster's free cores divided among the queries that wanted cores before its last
    reading (`Demand.since_reading`): those that came to want them since wait for the next,
    where the priority orders them with every other want since this one. None when the
    cluster's status is unknown, and then nothing cuts an executor request."""
    if cluster is None:
        return None
    # The reading's number before its cores: a reading that comes in between is then
    # divided as if older, holding cores a request it shows took rather than granting them.
    reading = cluster.readings()
    free_cores = cluster.free_cores()
    if free_cores is None:
        return None
    demands = []
    for query_id, query in queries.items():
        flight, model, taken = query.state.in_flight, query.model, query.taken
        if flight is not None and flight.parameter == EXECUTORS and model is not None:
            demands.append(Demand(query_id, _cores_asked(flight, model),
                                  model.cluster_priority, asked=True))
        elif taken is not None and reading <= taken.shown_after:
            priority = model.cluster_priority if model is not None else 0
            demands.append(Demand(query_id, taken.cores, priority, asked=True))
        elif query.demand is not None and query.demand.since_reading < reading:
            demands.append(query.demand)
    return divide(free_cores, demands)


def note_taken(query: QueryMemory, flight: InFlight, cluster: ClusterStatus | None) -> None:
    """An executors request was applied: its cores are taken, though the reading in force
    (or one under way) was read before its executors ran."""
    model = query.model
    if cluster is not None and model is not None and flight.parameter == EXECUTORS:
        query.taken = Taken(_cores_asked(flight, model), cluster.reads_begun())
        cluster.read_soon()  # the others' wants wait for the reading that shows them


def _cores_asked(flight: InFlight, model: QueryModel) -> int:
    return max(0, flight.target - flight.current) * model.executor_cores


def note_demands(queries: Memory, ready: Mapping[str, QueryModel],
                 verdicts: Mapping[str, Verdict], reading: int) -> bool:
    """Each query decided this cycle wants the cores its verdict names (`CORES_WANTED`);
    one lost, down or not ready wants none. A want is dated by the cluster's `reading` in
    force when it began, kept while it lasts. Whether a want began this cycle."""
    began = False
    for query_id, verdict in verdicts.items():
        model = ready.get(query_id)
        cores = (0.0 if model is None or isinstance(verdict, NotReady)
                 else verdict.figures.get(CORES_WANTED, 0.0))
        query = queries.of(query_id)
        since = query.demand.since_reading if query.demand is not None else reading
        demand = (Demand(query_id, int(cores), model.cluster_priority,
                         min(model.utilisation, MAX_NEED), since_reading=since)
                  if model is not None and cores > 0 else None)
        began |= query.demand is None and demand is not None
        query.demand = demand
    return began
